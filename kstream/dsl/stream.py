"""`KStream`'s operators (`StreamOps`): an unbounded stream of independent records (Kafka
Streams' KStream). The class users see, `kstream.dsl.api.KStream`, binds the table kind."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Self

from kstream.dsl import graph as _graph  # its processor_factory: a parameter shadows the name
from kstream.dsl import processors as p
from kstream.dsl.branched_ops import BranchedT
from kstream.dsl.dedup import deduplicate as _deduplicate
from kstream.dsl.graph import StoreLike, processor_factory
from kstream.dsl.grouped_ops import GroupedStreamT
from kstream.dsl.handles import TableT
from kstream.dsl.materialized import source_table
from kstream.dsl.processors.topic_chooser import TopicChooserSinkProcessor, TopicNameExtractor
from kstream.dsl.stream_joins import StreamJoins
from kstream.dsl.versioned import versioned_spec
from kstream.duration import DurationLike
from kstream.errors import TopologyError
from kstream.serde import Serde, SerdeLike, serde
from kstream.topology.processor import ProcessorFactory
from kstream.topology.topology import Partitioner

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec


def _opt_serde(s: SerdeLike) -> Serde | None:
    return None if s is None else serde(s)


class StreamOps(StreamJoins[TableT], Generic[TableT, GroupedStreamT, BranchedT]):
    """`KStream`'s operators. A stream's records are facts, not updates; every operator returns
    a new handle (of the stream's own class: `Self`) and adds its nodes to the builder's
    topology at once. `TableT` is the table class `to_table` and the aggregations make,
    `GroupedStreamT` the grouped stream `group_by_key`/`group_by` make, `BranchedT` the
    splitter `split` makes."""

    def _grouped(self) -> type[GroupedStreamT]:
        """The grouped-stream class this stream's groupings make
        (`kstream.dsl.api.KGroupedStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no grouped streams")

    def _branched(self) -> type[BranchedT]:
        """The splitter class `split` makes (`kstream.dsl.api.BranchedKStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no splitters")

    def _then(
        self,
        op: str,
        factory: ProcessorFactory,
        name: str | None,
        *,
        key_changed: bool = False,
        value_changed: bool = False,
    ) -> Self:
        b = self._builder
        node = b.processor(b.name(op, name), factory, self._node)
        return type(self)(
            b,
            node,
            None if key_changed else self._key_serde,
            None if value_changed else self._value_serde,
            self._repartition_required or key_changed,
        )

    # --- stateless ------------------------------------------------------------------------

    def filter(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> Self:
        """Keep the records for which `predicate(key, value)` is truthy; the others are dropped.

        Stateless: keys, timestamps and partitions are unchanged, so no repartition follows.
        A predicate that raises goes to the application's error handler (raise, or skip the record).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> b.stream("orders", "str", "long").filter(lambda k, v: v > 100).to("big-orders")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "long").pipe_many([("a", 50), ("b", 150)])
            ...     d.output_topic("big-orders", "str", "long").read_key_values()
            [('b', 150)]
        """
        return self._then("FILTER", processor_factory(p.FilterProcessor, predicate), name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> Self:
        """Keep the records for which `predicate(key, value)` is falsy (the complement of `filter`).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> b.stream("events", "str", "json").filter_not(lambda k, v: v.get("test")).to("real")
            >>> with TopologyTestDriver(b) as d:
            ...     events = d.input_topic("events", "str", "json")
            ...     events.pipe_many([("a", {"test": 1}), ("b", {})])
            ...     d.output_topic("real", "str", "json").read_key_values()
            [('b', {})]
        """
        return self._then("FILTER", processor_factory(p.FilterProcessor, predicate, True), name)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]], name: str | None = None) -> Self:
        """Replace each record by `fn(key, value) -> (new_key, new_value)`, keeping its timestamp.

        The key may change, so the next stateful operator (aggregation, join, `to_table`) first
        repartitions through an internal topic; prefer `map_values` when only the value changes.
        The known serdes are forgotten (pass serdes to `to`, `group_by_key`, ... downstream).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "json")
            >>> clicks.map(lambda k, v: (v["user"], v["page"])).to("pages", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("clicks", "str", "json").pipe("c1", {"user": "ann", "page": "/"})
            ...     d.output_topic("pages", "str", "str").read_key_values()
            [('ann', '/')]
        """
        factory = processor_factory(p.MapProcessor, fn)
        return self._then("MAP", factory, name, key_changed=True, value_changed=True)

    def map_values(
        self, fn: Callable[..., Any], name: str | None = None, *, with_key: bool = False
    ) -> Self:
        """Replace each value by `fn(value)`; key, timestamp and partitioning are kept.

        Does not cause a repartition (unlike `map`). `fn` also sees None values (tombstones).
        With `with_key=True` the mapper is `fn(key, value)` (Kafka's `ValueMapperWithKey`): it
        reads the key but cannot change it, so still no repartition follows.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> orders = b.stream("orders", "str", "json")
            >>> orders.map_values(lambda v: v["amount"]).to("amounts", value_serde="double")
            >>> ids = orders.map_values(lambda k, v: f"{k}:{v['amount']}", with_key=True)
            >>> ids.to("ids", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "json").pipe("o1", {"amount": 2.5})
            ...     d.output_topic("amounts", "str", "double").read_values()
            ...     d.output_topic("ids", "str", "str").read_values()
            [2.5]
            ['o1:2.5']
        """
        factory = processor_factory(p.MapValuesProcessor, fn, with_key)
        return self._then("MAPVALUES", factory, name, value_changed=True)

    def flat_map(
        self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]], name: str | None = None
    ) -> Self:
        """Replace each record by the `(key, value)` pairs of `fn(key, value)`: none, one or many.

        Every output keeps the input's timestamp. As with `map`, the key may change, so the next
        stateful operator repartitions first.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> lines = b.stream("lines", "str", "str")
            >>> words = lines.flat_map(lambda k, line: [(w, len(w)) for w in line.split()])
            >>> words.to("w", "str", "int")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("lines", "str", "str").pipe(None, "to be")
            ...     d.output_topic("w", "str", "int").read_key_values()
            [('to', 2), ('be', 2)]
        """
        factory = processor_factory(p.FlatMapProcessor, fn)
        return self._then("FLATMAP", factory, name, key_changed=True, value_changed=True)

    def flat_map_values(
        self, fn: Callable[..., Iterable[Any]], name: str | None = None, *, with_key: bool = False
    ) -> Self:
        """One record per value of `fn(value)`, each with the input's key and timestamp.

        No repartition follows (the key is kept). With `with_key=True` the mapper is
        `fn(key, value)` (Kafka's `ValueMapperWithKey`).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> b.stream("lines", "str", "str").flat_map_values(str.split).to("words", "str", "str")
            >>> carts = b.stream("carts", "str", "json")
            >>> items = carts.flat_map_values(lambda k, v: [f"{k}/{i}" for i in v], with_key=True)
            >>> items.to("items", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("lines", "str", "str").pipe("l1", "to be")
            ...     d.input_topic("carts", "str", "json").pipe("c1", ["tea", "jam"])
            ...     d.output_topic("words", "str", "str").read_key_values()
            ...     d.output_topic("items", "str", "str").read_values()
            [('l1', 'to'), ('l1', 'be')]
            ['c1/tea', 'c1/jam']
        """
        factory = processor_factory(p.FlatMapValuesProcessor, fn, with_key)
        return self._then("FLATMAPVALUES", factory, name, value_changed=True)

    def select_key(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> Self:
        """Set each record's key to `fn(key, value)`; value and timestamp are kept.

        The next stateful operator repartitions by the new key (an internal `...-repartition`
        topic). A None key is allowed here, but a repartition drops such records (counted as
        `null_key`) unless a left/outer join reads the stream further down.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> orders = b.stream("orders", "str", "json")
            >>> orders.select_key(lambda k, v: v["customer"]).to("by-customer", "str", "json")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "json").pipe("o1", {"customer": "ann"})
            ...     d.output_topic("by-customer", "str", "json").read_key_values()
            [('ann', {'customer': 'ann'})]
        """
        factory = processor_factory(p.SelectKeyProcessor, fn)
        return self._then("KEY-SELECT", factory, name, key_changed=True)

    def peek(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> Self:
        """Call `fn(key, value)` for every record and forward it unchanged (logging, metrics).

        A record whose `fn` raised goes to the error handler and, when skipped, is not forwarded.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> b.stream("orders", "str", "str").peek(lambda k, v: print("saw", k)).to("copy")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "str").pipe("o1", "tea")
            ...     d.output_topic("copy", "str", "str").read_values()
            saw o1
            ['tea']
        """
        return self._then("PEEK", processor_factory(p.PeekProcessor, fn), name)

    def foreach(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> None:
        """Call `fn(key, value)` for every record; terminal (nothing downstream).

        Side effects here are not part of the exactly-once guarantee: after a failure a record may
        be seen again. Write to a topic with `to` when the output must be exactly once.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> seen = []
            >>> b.stream("alerts", "str", "str").foreach(lambda k, v: seen.append((k, v)))
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("alerts", "str", "str").pipe("disk", "full")
            >>> seen
            [('disk', 'full')]
        """
        self._then("FOREACH", processor_factory(p.PeekProcessor, fn), name)

    def branch(
        self, *predicates: Callable[[Any, Any], Any], default: bool = False, name: str | None = None
    ) -> list[Self]:
        """Split the stream: one stream per predicate; a record goes to the first that matches.

        With `default=True` a last stream gets the records that match no predicate; without it they
        are dropped. Keys are unchanged, so the branches need no repartition of their own. The
        nodes take the names Kafka's `split()` gives: unnamed, `KSTREAM-BRANCH-<n>` and its
        branches `KSTREAM-BRANCH-<n>1`, `...2` (the default branch `...0`); with `name`, `name`
        and `<name>0`, `<name>1`, ... in list order.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> orders = b.stream("orders", "str", "long")
            >>> big, small = orders.branch(lambda k, v: v > 100, default=True)
            >>> big.to("big-orders"); small.to("small-orders")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "long").pipe_many([("a", 50), ("b", 150)])
            ...     d.output_topic("big-orders", "str", "long").read_key_values()
            [('b', 150)]
        """
        if not predicates and not default:
            raise TopologyError("branch needs at least one predicate (or default=True)")
        b = self._builder
        node = b.name("BRANCH", name)
        n = len(predicates) + (1 if default else 0)
        # Kafka's names (BranchedKStreamImpl): each branch takes a name from the counter but is
        # named after the splitter: unnamed, as `split()` names them (`<splitter><i>` with the
        # predicates from 1 and the default branch 0); named, as `split(Named.as(name))` with
        # `Branched.as(str(i))` names them (`<name><i>`, i the position in the list)
        kids = []
        for i in range(n):
            b.name("BRANCHCHILD")
            if name is not None:
                kids.append(f"{name}{i}")
            else:
                kids.append(f"{node}{0 if default and i == n - 1 else i + 1}")
        dflt = kids[-1] if default else None
        b.processor(
            node,
            processor_factory(p.BranchProcessor, predicates, kids[: len(predicates)], dflt),
            self._node,
        )
        out = []
        for kid in kids:
            b.processor(kid, p.PassThroughProcessor, node)
            out.append(
                type(self)(b, kid, self._key_serde, self._value_serde, self._repartition_required)
            )
        return out

    def split(self, name: str | None = None) -> BranchedT:
        """Split the stream into named branches, the Kafka 4 way (`BranchedKStream`): chain
        `.branch(predicate, Branched...)` calls and end with `.default_branch()` or
        `.no_default_branch()`, which return the branches by name.

        A record goes to the first branch whose predicate holds. A branch's name is `name` (else
        Kafka's generated `KSTREAM-BRANCH-<n>`) followed by its `Branched` name, or by its
        position from 1 (0 for the default branch); nodes take the same names as Kafka's, so a
        ported topology describes the same. See `kstream.dsl.branched.Branched` for branches
        chained inline (`with_function`) or consumed (`with_consumer`).

        Example:
            >>> from kstream.dsl import Branched
            >>> b = StreamBuilder()
            >>> orders = b.stream("orders", "str", "long").split("orders-")
            >>> parts = orders.branch(lambda k, v: v > 100, Branched.as_("big")).default_branch()
            >>> sorted(parts)
            ['orders-0', 'orders-big']
        """
        return self._branched()(self, name)

    def merge(self, other: Self, name: str | None = None) -> Self:
        """One stream of the records of both, in the order they are processed (no ordering between
        the two inputs); timestamps are kept.

        Both must come from the same `StreamBuilder`. A serde is kept only if both sides have the
        same one; the result repartitions before a stateful operator if either side would have.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> b.stream("eu", "str", "str").merge(b.stream("us", "str", "str")).to("orders")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("eu", "str", "str").pipe("o1", "tea")
            ...     d.input_topic("us", "str", "str").pipe("o2", "jam")
            ...     d.output_topic("orders", "str", "str").read_key_values()
            [('o1', 'tea'), ('o2', 'jam')]
        """
        if other._builder is not self._builder:
            raise TopologyError("merge: both streams must come from the same StreamBuilder")
        b = self._builder
        node = b.processor(b.name("MERGE", name), p.PassThroughProcessor, [self._node, other._node])
        same_k = self._key_serde if self._key_serde is other._key_serde else None
        same_v = self._value_serde if self._value_serde is other._value_serde else None
        req = self._repartition_required or other._repartition_required
        return type(self)(b, node, same_k, same_v, req)

    # --- topics ---------------------------------------------------------------------------

    def repartition(
        self,
        name: str | None = None,
        partitions: int | None = None,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
    ) -> Self:
        """Write to and read back from an internal topic, partitioned by the current key.

        Use it to choose the partition count or to repartition once before several stateful
        operators. A record without a key has no partition to go to: it is dropped (counted as
        `null_key`), as Kafka Streams drops it before a repartition topic, unless a left or outer
        join reads the stream further down (Kafka 3.7+, KIP-962: such joins accept null keys, so the
        repartition topic keeps them).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "json").select_key(lambda k, v: v["user"])
            >>> by_user = clicks.repartition("by-user", partitions=12, key_serde="str")
            >>> with TopologyTestDriver(b, app_id="app") as d:
            ...     d.compiled.repartition_topics["app-by-user-repartition"].partitions
            12
        """
        b = self._builder
        base = b.name("REPARTITION", name)
        ks = _opt_serde(key_serde) or self._key_serde
        vs = _opt_serde(value_serde) or self._value_serde
        src = b.repartition(
            self._node,
            base,
            key_serde=ks,
            value_serde=vs,
            partitions=partitions,
            relaxable=True,
        )
        return type(self)(b, src, self._key_serde, self._value_serde, False)

    def to(
        self,
        topic: str | TopicNameExtractor,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        partitioner: Partitioner | None = None,
        name: str | None = None,
    ) -> None:
        """Write every record to `topic`; terminal.

        Serdes default to the ones known for the stream (else bytes, for `bytes` keys and values).
        Records keep their timestamps; a None value is written as a tombstone. `partitioner(key,
        value, num_partitions) -> int` overrides the default (murmur2 of the key bytes, as Kafka's).

        `topic` may be a chooser instead, `topic(key, value, record_context) -> topic name`
        (Kafka's `TopicNameExtractor`; the context is the record: `.topic`, `.partition`,
        `.offset`, `.timestamp`, `.headers` of its input record), called per record. The chosen
        topics must exist: as in Kafka, the app neither creates them nor lists them as its
        outputs, and a record for a missing topic fails the task with an error naming the
        topic. Not on the Spark engine (refused when the query is planned).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> orders = b.stream("orders", "str", "json")
            >>> orders.to(lambda k, v, ctx: f"orders-{v['region']}", value_serde="json")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "json").pipe("o1", {"region": "eu"})
            ...     d.output_topic("orders-eu", "str", "json").read_key_values()
            [('o1', {'region': 'eu'})]
        """
        ks = _opt_serde(key_serde) or self._key_serde
        vs = _opt_serde(value_serde) or self._value_serde
        if isinstance(topic, str):
            self._builder.sink(topic, self._node, ks, vs, partitioner, name)
            return
        if not callable(topic):
            raise TopologyError(
                f"to: topic must be a topic name or a chooser (key, value, record_context) -> "
                f"topic name, got {topic!r}"
            )
        b = self._builder
        # Kafka's name for it is a sink's (KStreamImpl.to: SINK_NAME), from the same counter
        node = b.name("SINK", name)
        factory = processor_factory(
            TopicChooserSinkProcessor, topic, serde(ks), serde(vs), partitioner, node
        )
        b.processor(node, factory, self._node)

    def process(
        self,
        processor_factory: ProcessorFactory,
        stores: Iterable[str | StoreSpec] = (),
        name: str | None = None,
    ) -> Self:
        """Run a user `Processor` here; `stores` are store specs to add or store names to connect.

        The processor may change keys or forward anything, so a following stateful operator
        repartitions. It reads its stores with `ctx.get_store(name)` in `init`.

        Example:
            >>> from kstream import Processor, stores
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> class FirstSeen(Processor):
            ...     def process(self, record):
            ...         seen = self.ctx.get_store("seen")
            ...         if seen.get(record.key) is None:
            ...             seen.put(record.key, record.value)
            ...             self.ctx.forward(record)
            >>> firsts = b.stream("s", "str", "str").process(FirstSeen, [stores.key_value("seen")])
            >>> firsts.to("out", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("s", "str", "str").pipe_many([("a", "1"), ("a", "2"), ("b", "3")])
            ...     d.output_topic("out", "str", "str").read_key_values()
            [('a', '1'), ('b', '3')]
        """
        b = self._builder
        node = b.processor(b.name("PROCESSOR", name), processor_factory, self._node)
        self._connect_stores(node, stores)
        return type(self)(b, node, None, None, True)

    def process_values(
        self,
        processor_factory: ProcessorFactory,
        stores: Iterable[str | StoreSpec] = (),
        name: str | None = None,
    ) -> Self:
        """Run a user processor that changes values but keeps keys (Kafka's `processValues`
        with a `FixedKeyProcessor`); `stores` as in `process`.

        Because the key is kept, a following stateful operator does not repartition (after
        `process` it must). The processor forwards records derived from its input with
        `record.with_value(...)` (timestamp and headers may change too); a record forwarded
        with another key than the input's fails through the error handler. Records forwarded
        from a punctuation are not checked: forward only records kept from earlier inputs.

        Example:
            >>> from kstream import Processor
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> class Upper(Processor):
            ...     def process(self, record):
            ...         self.ctx.forward(record.with_value(record.value.upper()))
            >>> counts = b.stream("s", "str", "str").process_values(Upper).group_by_key().count()
            >>> with TopologyTestDriver(b, app_id="app") as d:  # the key is kept: no repartition
            ...     list(d.compiled.repartition_topics)
            []
        """
        b = self._builder
        # a given name takes no index (KStreamImpl.processValues: `NamedInternal(named).name()`)
        node = name or b.name("PROCESSVALUES")
        b.processor(
            node, _graph.processor_factory(p.FixedKeyProcessor, processor_factory, node), self._node
        )
        self._connect_stores(node, stores)
        return type(self)(b, node, self._key_serde, None, self._repartition_required)

    def _connect_stores(self, node: str, stores: Iterable[str | StoreSpec]) -> None:
        b = self._builder
        for s in stores:
            if isinstance(s, str):
                b.connect(node, s)
            elif s.name in b.topology.stores:
                b.connect(node, s.name)
            else:
                b.add_store(s, [node])

    def to_table(
        self,
        store: StoreLike = None,
        name: str | None = None,
        versioned: DurationLike | None = None,
    ) -> TableT:
        """Read the stream as upserts of a table: the latest value per key, materialized in `store`.

        A None value deletes the key (it reaches `KTable.to_stream()` as a tombstone); a record
        with a None key is dropped (counted as `null_key`). Repartitions first if the key changed.
        `versioned` (a history retention), or a `kstream.stores.versioned_key_value` store, makes
        a versioned table (see `StreamBuilder.table`).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> profiles = b.stream("profiles", "str", "str").to_table(store="profiles")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("profiles", "str", "str").pipe_many([("a", "v1"), ("a", "v2")])
            ...     d.get_store("profiles").get("a")
            'v2'
        """
        b = self._builder
        node = b.name("TOTABLE", name)
        vspec = versioned_spec(b, store, versioned, "TOTABLE", self._key_serde, self._value_serde)
        spec = vspec or b.store_spec(
            store, "TOTABLE", key_serde=self._key_serde, value_serde=self._value_serde
        )
        # the repartition topic is named after the processor, as Kafka's (KStreamImpl.toTable)
        parent = self._ensure_partitioned(node)
        # as `StreamBuilder.table`: materialized in Kafka's sense only when given a store
        return source_table(
            self._tables(),
            b,
            node,
            parent,
            spec,
            store is not None,
            self._key_serde,
            self._value_serde,
        )

    # --- grouping -------------------------------------------------------------------------

    def group_by_key(
        self, key_serde: SerdeLike = None, value_serde: SerdeLike = None, name: str | None = None
    ) -> GroupedStreamT:
        """Group by the current key, for `count`, `reduce`, `aggregate` or `windowed_by`.

        Nothing is added to the topology yet: the aggregation repartitions first only if the key
        may have changed upstream (`map`, `select_key`, `flat_map`, `process`). `key_serde`/
        `value_serde` are used for that repartition topic and the store. The topic is
        `<store>-repartition`, or `<name>-repartition` given `name` (Kafka's `Grouped.as`):
        then it keeps its name when the topology changes upstream.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "str").select_key(lambda k, page: page)
            >>> per_page = clicks.group_by_key(name="by-page").count(store="per-page")
            >>> with TopologyTestDriver(b, app_id="app") as d:
            ...     sorted(d.compiled.internal_topics)
            ['app-by-page-repartition', 'app-per-page-changelog']
        """
        ks = _opt_serde(key_serde) or self._key_serde
        vs = _opt_serde(value_serde) or self._value_serde
        b, node, req = self._builder, self._node, self._repartition_required
        return self._grouped()(b, node, ks, vs, req, self._tables(), name)

    def group_by(
        self,
        fn: Callable[[Any, Any], Any],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> GroupedStreamT:
        """Group by a new key `fn(key, value)`: `select_key(fn)` then `group_by_key()`.

        The aggregation reads through a repartition topic keyed by the new key; records whose new
        key is None are dropped there (counted as `null_key`). `name` (Kafka's `Grouped.as`)
        names the key selector and the topic, `<name>-repartition` (see `group_by_key`).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "json")
            >>> by_page = clicks.group_by(lambda k, v: v["page"], "str", name="by-page")
            >>> per_page = by_page.count(store="n")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("clicks", "str", "json").pipe_many([("ann", {"page": "/"})] * 2)
            ...     d.get_store("n").get("/")
            2
        """
        return self.select_key(fn, name).group_by_key(
            key_serde, value_serde or self._value_serde, name
        )

    # --- implemented in other modules (the joins: kstream.dsl.stream_joins) ----------------

    def deduplicate(
        self,
        id_fn: Callable[[Any, Any], Any] | None = None,
        within: DurationLike | None = None,
        store: StoreLike = None,
        name: str | None = None,
    ) -> Self:
        """Drop a record whose id was already seen within `within` (a duration, e.g. "10m").

        The id is `id_fn(key, value)` (default: the key); a None id is kept and not remembered.
        Seen ids live in a changelogged dedup store, so the filter survives restarts and
        rebalances. Equal ids must reach the same task: with the key as id and a changed key,
        the stream is repartitioned first; an id taken from the value is the caller's to
        co-partition.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> payments = b.stream("payments", "str", "json")
            >>> payments.deduplicate(lambda k, v: v["id"], within="1h").to("payments-once")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("payments", "str", "json").pipe_many([("a", {"id": 7})] * 2)
            ...     d.output_topic("payments-once", "str", "json").read_key_values()
            [('a', {'id': 7})]
        """
        return _deduplicate(self, id_fn, within, store, name)
