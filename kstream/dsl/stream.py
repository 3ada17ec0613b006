"""`KStream`: an unbounded stream of independent records (Kafka Streams' KStream)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kstream.dsl import processors as p
from kstream.dsl.dedup import deduplicate as _deduplicate
from kstream.dsl.graph import Handle, InternalBuilder, StoreLike, ValueGetter, processor_factory
from kstream.dsl.windows import JoinWindows
from kstream.duration import DurationLike
from kstream.errors import TopologyError
from kstream.serde import Serde, SerdeLike, serde
from kstream.topology.processor import ProcessorFactory
from kstream.topology.topology import Partitioner

if TYPE_CHECKING:
    from kstream.dsl.grouped import KGroupedStream
    from kstream.dsl.table import GlobalKTable, KTable
    from kstream.state.spec import StoreSpec


def _opt_serde(s: SerdeLike) -> Serde | None:
    return None if s is None else serde(s)


class KStream(Handle):
    """A handle on one node of the graph; every operator returns a new handle.

    `_key_serde`/`_value_serde` are the serdes known to fit the records here (None: unknown,
    e.g. after `map`); `_repartition_required` is True once the key may have changed, so the
    next stateful operator first repartitions by the new key.
    """

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        repartition_required: bool = False,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self._repartition_required = repartition_required

    def _then(
        self,
        op: str,
        factory: ProcessorFactory,
        name: str | None,
        *,
        key_changed: bool = False,
        value_changed: bool = False,
    ) -> KStream:
        b = self._builder
        node = b.processor(b.name(op, name), factory, self._node)
        return KStream(
            b,
            node,
            None if key_changed else self._key_serde,
            None if value_changed else self._value_serde,
            self._repartition_required or key_changed,
        )

    # --- stateless ------------------------------------------------------------------------

    def filter(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        return self._then("FILTER", processor_factory(p.FilterProcessor, predicate), name)

    def filter_not(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        return self._then("FILTER", processor_factory(p.FilterProcessor, predicate, True), name)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]], name: str | None = None) -> KStream:
        factory = processor_factory(p.MapProcessor, fn)
        return self._then("MAP", factory, name, key_changed=True, value_changed=True)

    def map_values(self, fn: Callable[[Any], Any], name: str | None = None) -> KStream:
        factory = processor_factory(p.MapValuesProcessor, fn)
        return self._then("MAPVALUES", factory, name, value_changed=True)

    def flat_map(
        self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]], name: str | None = None
    ) -> KStream:
        factory = processor_factory(p.FlatMapProcessor, fn)
        return self._then("FLATMAP", factory, name, key_changed=True, value_changed=True)

    def flat_map_values(
        self, fn: Callable[[Any], Iterable[Any]], name: str | None = None
    ) -> KStream:
        factory = processor_factory(p.FlatMapValuesProcessor, fn)
        return self._then("FLATMAPVALUES", factory, name, value_changed=True)

    def select_key(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        factory = processor_factory(p.SelectKeyProcessor, fn)
        return self._then("KEY-SELECT", factory, name, key_changed=True)

    def peek(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        return self._then("PEEK", processor_factory(p.PeekProcessor, fn), name)

    def foreach(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> None:
        """Call `fn(key, value)` for every record; terminal (nothing downstream)."""
        self._then("FOREACH", processor_factory(p.PeekProcessor, fn), name)

    def branch(
        self, *predicates: Callable[[Any, Any], Any], default: bool = False, name: str | None = None
    ) -> list[KStream]:
        """One stream per predicate; a record goes to the first that matches (or `default`)."""
        if not predicates and not default:
            raise TopologyError("branch needs at least one predicate (or default=True)")
        b = self._builder
        node = b.name("BRANCH", name)
        n = len(predicates) + (1 if default else 0)
        kids = [b.name("BRANCHCHILD", f"{name}-{i}" if name else None) for i in range(n)]
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
                KStream(b, kid, self._key_serde, self._value_serde, self._repartition_required)
            )
        return out

    def merge(self, other: KStream, name: str | None = None) -> KStream:
        if other._builder is not self._builder:
            raise TopologyError("merge: both streams must come from the same StreamBuilder")
        b = self._builder
        node = b.processor(b.name("MERGE", name), p.PassThroughProcessor, [self._node, other._node])
        same_k = self._key_serde if self._key_serde is other._key_serde else None
        same_v = self._value_serde if self._value_serde is other._value_serde else None
        req = self._repartition_required or other._repartition_required
        return KStream(b, node, same_k, same_v, req)

    # --- topics ---------------------------------------------------------------------------

    def repartition(
        self,
        name: str | None = None,
        partitions: int | None = None,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
    ) -> KStream:
        """Write to and read back from an internal topic (partitioned by the current key).

        A record without a key has no partition to go to: it is dropped (counted as
        `null_key`), as Kafka Streams drops it before a repartition topic, unless a left or
        outer join reads the stream further down (Kafka 3.7+, KIP-962: such joins accept
        null keys, so the repartition topic keeps them).
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
        return KStream(b, src, self._key_serde, self._value_serde, False)

    def to(
        self,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        partitioner: Partitioner | None = None,
        name: str | None = None,
    ) -> None:
        """Write every record to `topic` (serdes default to the known ones, else bytes)."""
        ks = _opt_serde(key_serde) or self._key_serde
        vs = _opt_serde(value_serde) or self._value_serde
        self._builder.sink(topic, self._node, ks, vs, partitioner, name)

    def process(
        self,
        processor_factory: ProcessorFactory,
        stores: Iterable[str | StoreSpec] = (),
        name: str | None = None,
    ) -> KStream:
        """Run a user `Processor` here; `stores` are store specs to add or names to connect.

        The result's key may differ from the input's, so a following stateful operator
        repartitions.
        """
        b = self._builder
        node = b.processor(b.name("PROCESSOR", name), processor_factory, self._node)
        for s in stores:
            if isinstance(s, str):
                b.connect(node, s)
            elif s.name in b.topology.stores:
                b.connect(node, s.name)
            else:
                b.add_store(s, [node])
        return KStream(b, node, None, None, True)

    def to_table(self, store: StoreLike = None, name: str | None = None) -> KTable:
        """Read the stream as upserts of a table (None value: delete), materialized in `store`."""
        from kstream.dsl.table import KTable

        b = self._builder
        node = b.name("TOTABLE", name)
        spec = b.store_spec(
            store, "TOTABLE", key_serde=self._key_serde, value_serde=self._value_serde
        )
        parent = self._ensure_partitioned(spec.name)
        b.processor(node, processor_factory(p.TableSourceProcessor, spec.name), parent)
        b.add_store(spec, [node])
        return KTable(b, node, self._key_serde, self._value_serde, ValueGetter(spec.name))

    # --- grouping -------------------------------------------------------------------------

    def _ensure_partitioned(self, base: str) -> str:
        """The node a stateful operator named `base` reads from, repartitioning if needed."""
        if not self._repartition_required:
            return self._node
        return self._builder.repartition(
            self._node, base, key_serde=self._key_serde, value_serde=self._value_serde
        )

    def group_by_key(
        self, key_serde: SerdeLike = None, value_serde: SerdeLike = None
    ) -> KGroupedStream:
        from kstream.dsl.grouped import KGroupedStream

        return KGroupedStream(
            self._builder,
            self._node,
            _opt_serde(key_serde) or self._key_serde,
            _opt_serde(value_serde) or self._value_serde,
            self._repartition_required,
        )

    def group_by(
        self,
        fn: Callable[[Any, Any], Any],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> KGroupedStream:
        return self.select_key(fn, name).group_by_key(key_serde, value_serde or self._value_serde)

    # --- implemented in other modules ----------------------------------------------------

    def deduplicate(
        self,
        id_fn: Callable[[Any, Any], Any] | None = None,
        within: DurationLike | None = None,
        store: StoreLike = None,
    ) -> KStream:
        return _deduplicate(self, id_fn, within, store)

    def join(
        self,
        other: KStream | KTable | GlobalKTable,
        *args: Callable[..., Any],
        window: JoinWindows | None = None,
        name: str | None = None,
        **kwargs: Callable[..., Any] | None,
    ) -> KStream:
        return self._join("inner", other, args, window, name, kwargs)

    def left_join(
        self,
        other: KStream | KTable | GlobalKTable,
        *args: Callable[..., Any],
        window: JoinWindows | None = None,
        name: str | None = None,
        **kwargs: Callable[..., Any] | None,
    ) -> KStream:
        return self._join("left", other, args, window, name, kwargs)

    def outer_join(
        self,
        other: KStream | KTable | GlobalKTable,
        *args: Callable[..., Any],
        window: JoinWindows | None = None,
        name: str | None = None,
        **kwargs: Callable[..., Any] | None,
    ) -> KStream:
        return self._join("outer", other, args, window, name, kwargs)

    def _join(
        self,
        kind: str,
        other: KStream | KTable | GlobalKTable,
        args: tuple[Callable[..., Any], ...],
        window: JoinWindows | None,
        name: str | None,
        kwargs: dict[str, Callable[..., Any] | None],
    ) -> KStream:
        # joins imports this module: imported here, at the call
        from kstream.dsl.joins import join_stream

        # join(stream|table, joiner) or join(global_table, key_selector, joiner)
        key_selector = kwargs.pop("key_selector", None)
        joiner = kwargs.pop("joiner", None)
        if kwargs:
            raise TypeError(f"{kind} join: unexpected arguments {sorted(kwargs)}")
        if len(args) == 2:
            key_selector, joiner = args
        elif len(args) == 1:
            joiner = args[0]
        elif args:
            raise TypeError(
                f"{kind} join: expected (other, joiner) or (other, key_selector, joiner)"
            )
        if kind != "inner":
            self._builder.keep_null_keys_upstream(self._node)
            if isinstance(other, KStream):
                self._builder.keep_null_keys_upstream(other._node)
        return join_stream(
            self,
            other,
            joiner,
            kind=kind,
            window=window,
            key_selector=key_selector,
            name=name,
        )
