"""`KTable`'s operators (`TableOps`): a changelog stream read as the latest value per key. The
class users see, `kstream.dsl.api.KTable`, binds the stream kind; `GlobalKTable` is in
kstream.dsl.global_table.

Records between table operators carry `Change(new, old)` values; a None `new` is a delete and
reaches `to_stream()` as a tombstone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Self, overload

from kstream.dsl.fk_join import JoinArgs, join_on_foreign_key, parse_join_args
from kstream.dsl.graph import InternalBuilder, StoreLike, processor_factory
from kstream.dsl.grouped_table_ops import GroupedTableT, group_table
from kstream.dsl.handles import StreamT, TableHandle, TableT
from kstream.dsl.joins import join_tables
from kstream.dsl.materialized import materialize_node, table_store, value_serde_of
from kstream.dsl.processors import table as tp
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.stateless import SelectKeyProcessor
from kstream.dsl.processors.transform_values import (
    TableTransformValuesProcessor,
    TransformedValueGetter,
)
from kstream.dsl.suppress import suppress as _suppress
from kstream.dsl.suppressed import Suppressed
from kstream.dsl.transform_values import TransformerFactory
from kstream.dsl.versioned import versioned_upstream
from kstream.errors import TopologyError
from kstream.serde import Serde, SerdeLike
from kstream.topology.processor import ProcessorFactory

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec


class TableOps(TableHandle[StreamT], Generic[StreamT, GroupedTableT]):
    """`KTable`'s operators. Every operator returns a new handle (of the table's own class:
    `Self`) and adds its nodes to the builder's topology at once; `StreamT` is the stream class
    `to_stream` makes, `GroupedTableT` the grouped table `group_by` makes."""

    def _grouped_tables(self) -> type[GroupedTableT]:
        """The grouped-table class `group_by` makes (`kstream.dsl.api.KGroupedTable`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no grouped tables")

    @property
    def store_name(self) -> str:
        """The store holding this table (given `materialized=`) or the table it derives from
        (queryable)."""
        return self._getter.store

    def _then(
        self,
        op: str,
        factory: ProcessorFactory,
        name: str | None,
        getter: ValueGetter,
        value_serde: Serde | None,
    ) -> Self:
        b = self._builder
        node = b.processor(b.name(op, name, prefix="KTABLE"), factory, self._node)
        return self._derived(node, value_serde, getter)

    def _derived(self, node: str, value_serde: Serde | None, getter: ValueGetter) -> Self:
        """The table of a store-less operator `node` below this one: it answers a filter's
        question for old values as this table does."""
        b, sends = self._builder, self._sends_old_values
        return type(self)(b, node, self._key_serde, value_serde, getter, sends, self._on_demand)

    def _old_values_now(self) -> bool:
        """Kafka's `enableSendingOldValues(false)`, asked by a filter made below this table
        now: True when the table is materialized in Kafka's sense, or derives (through
        operators without a store) from a table Kafka materializes on demand that is
        materialized by now: a join reading it (`valueGetterSupplier()`) or an operator forcing
        old values (`enableSendingOldValues(true)`: a table-table join, `group_by`, suppress)
        made before. Kafka answers when the filter is made, so the order the operators are
        added in counts: a filter made before the join gets no old values."""
        od = self._on_demand
        return self._sends_old_values or (od is not None and od.materialized())

    def filter(
        self,
        predicate: Callable[[Any, Any], Any],
        name: str | None = None,
        materialized: StoreLike = None,
    ) -> Self:
        """Keep the keys whose value matches `predicate(key, value)`.

        A key that stops matching is deleted downstream: its update reaches `to_stream()` as a
        tombstone. As Kafka's KTableFilter, an update not visible before or after is also forwarded
        as a tombstone, unless the table above is materialized (a source or `to_table` given a
        `store`, an aggregation, a table-table join; or, without a store name, read by a join
        or asked for old values before this filter was made) or a consumer needs old values (a
        `group_by`, a table-table join): then it is not forwarded at all. No store of its own:
        joins read the parent's store through the filter, unless `materialized` (a store name
        or a `kstream.stores.key_value` spec, Kafka's `Materialized.as`) keeps the result in a
        queryable, changelogged store of its own (`store_name`).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "json")
            >>> active = users.filter(lambda k, v: v["active"], materialized="active-users")
            >>> active.store_name
            'active-users'
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("users", "str", "json").pipe("ann", {"active": True})
            ...     d.get_store("active-users").get("ann")
            {'active': True}
        """
        getter = self._getter.then(lambda k, v: v if predicate(k, v) else None)
        return self._filter(predicate, False, name, getter, materialized)

    def filter_not(
        self,
        predicate: Callable[[Any, Any], Any],
        name: str | None = None,
        materialized: StoreLike = None,
    ) -> Self:
        """Keep the keys whose value does not match `predicate(key, value)` (see `filter`,
        also for `materialized`).

        Example:
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "json")
            >>> users.filter_not(lambda k, v: v["active"], materialized="inactive").store_name
            'inactive'
        """
        getter = self._getter.then(lambda k, v: None if predicate(k, v) else v)
        return self._filter(predicate, True, name, getter, materialized)

    def _filter(
        self,
        predicate: Callable[[Any, Any], Any],
        negate: bool,
        name: str | None,
        getter: ValueGetter,
        materialized: StoreLike = None,
    ) -> Self:
        """As Kafka's KTableFilter: an update that does not match reaches `to_stream` as a
        tombstone, unless the table above sends old values (Kafka decides it when the filter is
        made: `parent.enableSendingOldValues(false)`) or a consumer below needs them (a
        regroup, a table-table join), in which case an update invisible before and after is
        not forwarded."""
        b = self._builder
        flag = tp.SendOldValues()
        flag.enabled = self._old_values_now()
        if flag.enabled:
            self._want_old_values()
        versioned = versioned_upstream(self._getter)
        if materialized is None:
            factory = processor_factory(
                tp.TableFilterProcessor, predicate, negate, flag, None, versioned
            )
            table = self._then("FILTER", factory, name, getter, self._value_serde)
            b.table_operator(table._node, self._node, flag)
            return table
        node = b.name("FILTER", name, prefix="KTABLE")
        spec = table_store(b, materialized, "FILTER", self._key_serde, self._value_serde)
        factory = processor_factory(
            tp.TableFilterProcessor, predicate, negate, flag, spec.name, versioned
        )
        return self._materialized(node, factory, spec, flag, self._value_serde)

    def _want_old_values(self) -> None:
        """A filter made below this table asks it for old values (Kafka's
        `parent.enableSendingOldValues(false)`): a materialized filter, map_values or
        transform_values above, which only send them on demand, start sending them."""
        for flag in self._builder._old_value_flags.get(self._node, ()):
            flag.enabled = True

    def _materialized(
        self,
        node: str,
        factory: ProcessorFactory,
        spec: StoreSpec,
        flag: tp.SendOldValues,
        value_serde: Serde | None,
    ) -> Self:
        """Add table operator `node` writing its result to store `spec`; the result reads as
        a table of its own (its getter reads the store; consumers below that need old values
        switch on `flag` only: a materialized table answers them from its store, as Kafka's)."""
        b = self._builder
        b.processor(node, factory, self._node)
        b.add_store(spec, [node])
        b.table_operator(node, node, flag)  # `node` has no entry yet: only its own flag
        vs = value_serde_of(spec, value_serde)
        return type(self)(b, node, self._key_serde, vs, ValueGetter(spec.name), True)

    def map_values(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        *,
        with_key: bool = False,
        materialized: StoreLike = None,
    ) -> Self:
        """A table of `fn(value)` per key; deletes stay deletes (`fn` never sees None).

        Keys and timestamps are kept, so no repartition; no store of its own unless
        `materialized` (a store name or spec, Kafka's `Materialized.as`) keeps the result in a
        queryable, changelogged store (`store_name`). With `with_key=True` the mapper is
        `fn(key, value)` (Kafka's `ValueMapperWithKey`); the key is read-only: the result stays
        under the same key.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "json")
            >>> emails = users.map_values(lambda v: v["email"], materialized="emails")
            >>> labels = users.map_values(lambda k, v: f"{k}: {v['name']}", with_key=True)
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("users", "str", "json").pipe("ann", {"email": "a@x", "name": "A"})
            ...     d.get_store("emails").get("ann")
            'a@x'
        """
        b = self._builder
        if materialized is None:
            getter = self._getter.then(fn if with_key else lambda _k, v: fn(v))
            factory = processor_factory(tp.TableMapValuesProcessor, fn, with_key)
            table = self._then("MAPVALUES", factory, name, getter, None)
            b.table_operator(table._node, self._node)
            return table
        node = b.name("MAPVALUES", name, prefix="KTABLE")
        spec = table_store(b, materialized, "MAPVALUES", self._key_serde, None)
        flag = tp.SendOldValues()
        factory = processor_factory(tp.TableMapValuesProcessor, fn, with_key, spec.name, flag)
        return self._materialized(node, factory, spec, flag, None)

    def transform_values(
        self,
        factory: TransformerFactory,
        stores: Iterable[str | StoreSpec] = (),
        name: str | None = None,
        materialized: StoreLike = None,
    ) -> Self:
        """A table of `transformer.transform(key, value)` per key, with state stores (Kafka's
        `KTable.transformValues` with a `ValueTransformerWithKey`); see
        `kstream.dsl.transform_values` for the transformer's methods.

        `factory()` makes one transformer per task; `stores` are store specs to add or names
        of stores to connect, read in its `init(ctx)` with `ctx.get_store(name)`. Unlike
        `map_values`, `transform` also sees None (a delete) and may return None (a delete).
        Keys are kept: no repartition. `materialized` keeps the result in a queryable store.

        Example:
            >>> from kstream import stores
            >>> from kstream.testing import TopologyTestDriver
            >>> class Versioned:
            ...     def init(self, ctx):
            ...         self.seen = ctx.get_store("versions")
            ...     def transform(self, key, value):
            ...         if value is None:
            ...             return None
            ...         n = (self.seen.get(key) or 0) + 1
            ...         self.seen.put(key, n)
            ...         return {**value, "version": n}
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "json")
            >>> spec = stores.key_value("versions", key_serde="str", value_serde="long")
            >>> numbered = users.transform_values(Versioned, stores=[spec])
            >>> numbered.to_stream().to("out", value_serde="json")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("users", "str", "json").pipe_many([("a", {}), ("a", {})])
            ...     d.output_topic("out", "str", "json").read_values()
            [{'version': 1}, {'version': 2}]
        """
        if not callable(factory):
            raise TopologyError(f"transform_values: factory must be callable, got {factory!r}")
        b = self._builder
        node = b.name("TRANSFORMVALUES", name, prefix="KTABLE")
        flag = tp.SendOldValues()
        spec = None
        if materialized is not None:
            spec = table_store(b, materialized, "TRANSFORMVALUES", self._key_serde, None)
        proc = processor_factory(
            TableTransformValuesProcessor, factory, flag, None if spec is None else spec.name
        )
        # added straight to the topology: like map_values, it is no consumer that needs old
        # values from the filters above (it asks for them only when a consumer below does)
        b.topology.add_processor(node, proc, self._node)
        own = _connect_stores(b, node, stores)
        if spec is not None:
            b.add_store(spec, [node])
            b.table_operator(node, node, flag)
            vs = value_serde_of(spec, None)
            return type(self)(b, node, self._key_serde, vs, ValueGetter(spec.name), True)
        b.table_operator(node, self._node, flag)
        getter = TransformedValueGetter(self._getter, factory, own)
        return self._derived(node, None, getter)

    def to_stream(
        self, mapper: Callable[[Any, Any], Any] | None = None, name: str | None = None
    ) -> StreamT:
        """The table's changelog as a stream: every update as a record, deletes as tombstones.

        Each record keeps the update's timestamp. Records with a None value are deletes: written to
        a compacted topic, they remove the key. With `mapper(key, value) -> new_key` (Kafka's
        `toStream(KeyValueMapper)`) each record is re-keyed, as `to_stream().select_key(mapper)`
        (the same nodes and names as Kafka's), so a stateful operator after it repartitions; the
        mapper also sees deletes (value None).

        Example:
            >>> from kstream.dsl.windows import TimeWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "str").group_by_key()
            >>> per_minute = clicks.windowed_by(TimeWindows.of("1m")).count()
            >>> per_minute.to_stream(lambda wk, n: f"{wk.key}@{wk.start}").to("out", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     src = d.input_topic("clicks", "str", "str")
            ...     src.pipe_many([("a", "/", 0), ("a", "/", 61_000)])
            ...     d.output_topic("out", "str", "long").read_key_values()
            [('a@0', 1), ('a@60000', 1)]
        """
        b = self._builder
        node = b.processor(
            b.name("TOSTREAM", name, prefix="KTABLE"), tp.TableToStreamProcessor, self._node
        )
        streams = self._streams()
        if mapper is None:
            return streams(b, node, self._key_serde, self._value_serde, False)
        # what `.select_key(mapper)` of the stream adds (this class cannot call it: it knows
        # the stream class only as a handle)
        factory = processor_factory(SelectKeyProcessor, mapper)
        node = b.processor(b.name("KEY-SELECT", None), factory, node)
        return streams(b, node, None, self._value_serde, True)

    # --- implemented in other modules ----------------------------------------------------
    # (joins and grouped_table import this module: they are imported here, at the call)

    def suppress(self, suppressed: Suppressed) -> Self:
        """Hold updates back: `Suppressed.until_window_closes(BufferConfig.unbounded())` (final
        results of a windowed table) or `Suppressed.until_time_limit(duration, buffer_config)`;
        see `kstream.dsl.suppress`.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> from kstream.dsl.suppress import BufferConfig, Suppressed
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> calm = b.table("in", "string", "long").suppress(
            ...     Suppressed.until_time_limit(10, BufferConfig.unbounded()))
            >>> calm.to_stream().to("out", "string", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     src = d.input_topic("in", "string", "long")
            ...     for v, ts in [(1, 0), (2, 5), (3, 10)]:
            ...         src.pipe("k", v, timestamp=ts)
            ...     d.output_topic("out", "string", "long").read_key_values()
            [('k', 3)]
        """

        return _suppress(self, suppressed)

    @overload
    def join(
        self,
        other: TableHandle[Any],
        joiner: Callable[[Any, Any], Any],
        name: str | None = None,
        materialized: StoreLike = None,
    ) -> Self: ...

    @overload
    def join(
        self,
        other: TableHandle[Any],
        foreign_key_extractor: Callable[..., Any],
        joiner: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        materialized: StoreLike = None,
        with_key: bool = False,
    ) -> Self: ...

    def join(self, other: TableHandle[Any], *args: Any, **kwargs: Any) -> Self:
        """Inner join with another table, on the key (`join(other, joiner)`) or on a foreign
        key (`join(other, foreign_key_extractor, joiner)`).

        On the key: an update on either side emits the new result (and the old one, as
        `Change`) computed against the other side's current value, stamped with the larger of
        the two sides' timestamps; a key present on one side only has no result, and deletes
        propagate as deletes. Both tables must be co-partitioned (same key, same partition
        count).

        Not materialized, the result has no store: `store_name` names the left input's and
        later joins recompute it from both inputs. `materialized` (a store name or a
        `kstream.stores.key_value` spec, Kafka's `Materialized.as`) keeps it in a queryable,
        changelogged store of its own, written by the join's merge node (same for
        `left_join` and `outer_join`).

        On a foreign key (Kafka's KIP-213 join, `kstream.dsl.fk_join`): each row of this table
        joins the row of `other` whose key is `foreign_key_extractor(value)` (or
        `foreign_key_extractor(key, value)` with `with_key=True`), giving `joiner(value,
        other_value)` under this table's key; a row without a match (or without a foreign key)
        has no result. The tables need not be co-partitioned: the join goes through two
        internal topics. When a row's foreign key changes, its result follows the new one and
        never joins the old one again, even for answers still in flight. `name` names the
        join's nodes, topics and stores (Kafka's `TableJoined.as`); `materialized` keeps the
        result in a queryable store.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "json")
            >>> addresses = b.table("addresses", "str", "str")
            >>> profile = users.join(
            ...     addresses, lambda u, a: {**u, "address": a}, materialized="profiles"
            ... )
            >>> profile.store_name
            'profiles'
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("users", "str", "json").pipe("ann", {"name": "Ann"})
            ...     d.input_topic("addresses", "str", "str").pipe("ann", "Main St")
            ...     d.get_store("profiles").get("ann")
            {'address': 'Main St', 'name': 'Ann'}

            On a foreign key, orders joined with their customer:

            >>> b = StreamBuilder()
            >>> orders = b.table("orders", "str", "json")
            >>> customers = b.table("customers", "str", "str")
            >>> orders.join(
            ...     customers, lambda o: o["customer"], lambda o, c: f"{o['item']} for {c}"
            ... ).to_stream().to("shipping", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     people = d.input_topic("customers", "str", "str")
            ...     people.pipe("c1", "Ann")
            ...     order = {"customer": "c1", "item": "tea"}
            ...     d.input_topic("orders", "str", "json").pipe("o1", order)
            ...     people.pipe("c1", "Ann B.")
            ...     d.output_topic("shipping", "str", "str").read_key_values()
            [('o1', 'tea for Ann'), ('o1', 'tea for Ann B.')]
        """

        a = parse_join_args("KTable.join", args, kwargs)
        return self._join_either(other, a, left_join=False)

    @overload
    def left_join(
        self,
        other: TableHandle[Any],
        joiner: Callable[[Any, Any], Any],
        name: str | None = None,
        materialized: StoreLike = None,
    ) -> Self: ...

    @overload
    def left_join(
        self,
        other: TableHandle[Any],
        foreign_key_extractor: Callable[..., Any],
        joiner: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        materialized: StoreLike = None,
        with_key: bool = False,
    ) -> Self: ...

    def left_join(self, other: TableHandle[Any], *args: Any, **kwargs: Any) -> Self:
        """Left join with another table: every key of this table has a result, `joiner(v, None)`
        without a match (see `join` for timestamps and deletes). On a foreign key
        (`left_join(other, foreign_key_extractor, joiner)`, see `join`) a row whose foreign key
        is None or names no row of `other` also has a result, `joiner(value, None)`.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> orders = b.table("orders", "str", "json")
            >>> customers = b.table("customers", "str", "str")
            >>> orders.left_join(
            ...     customers, lambda k, o: o.get("customer"), lambda o, c: c or "?", with_key=True
            ... ).to_stream().to("out", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "json").pipe("o1", {"customer": "c9"})
            ...     d.input_topic("customers", "str", "str").pipe("c9", "Bo")
            ...     d.output_topic("out", "str", "str").read_key_values()
            [('o1', '?'), ('o1', 'Bo')]
        """

        a = parse_join_args("KTable.left_join", args, kwargs)
        return self._join_either(other, a, left_join=True)

    def _join_either(self, other: TableHandle[Any], a: JoinArgs, *, left_join: bool) -> Self:

        if a.extractor is not None:
            return join_on_foreign_key(
                self,
                other,
                a.extractor,
                a.joiner,
                left_join=left_join,
                name=a.name,
                materialized=a.materialized,
                with_key=a.with_key,
            )
        kind = "left" if left_join else "inner"
        return _joined(join_tables(self, other, a.joiner, kind=kind, name=a.name), a.materialized)

    def outer_join(
        self,
        other: TableHandle[Any],
        joiner: Callable[[Any, Any], Any],
        name: str | None = None,
        materialized: StoreLike = None,
    ) -> Self:
        """Outer join with another table: a key of either table has a result, with None for the
        missing side, `joiner(v, None)` or `joiner(None, ov)` (see `join`).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> old, new = b.table("old", "str", "long"), b.table("new", "str", "long")
            >>> merged = old.outer_join(new, lambda a, n: n if n is not None else a)
            >>> merged.to_stream().to("prices", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("old", "str", "long").pipe("tea", 3)
            ...     d.input_topic("new", "str", "long").pipe("tea", 4)
            ...     d.output_topic("prices", "str", "long").read_key_values()
            [('tea', 3), ('tea', 4)]
        """

        return _joined(join_tables(self, other, joiner, kind="outer", name=name), materialized)

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> GroupedTableT:
        """Regroup the rows by `selector(key, value) -> (new_key, new_value)`, for `count`, `reduce`
        or `aggregate` with an adder and a subtractor.

        Every update goes through a repartition topic: the old value leaves its group (subtractor),
        the new value joins its group (adder). A selected pair that is None or has a None key or
        value is dropped and counted. `name` (Kafka's `Grouped.as`) names the select node and
        the repartition topic, `<name>-repartition`; else the topic is named after the store.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "json")
            >>> per_city = users.group_by(lambda k, v: (v["city"], k), "str", "str").count("n")
            >>> with TopologyTestDriver(b) as d:
            ...     users = d.input_topic("users", "str", "json")
            ...     users.pipe_many([("a", {"city": "Oslo"}), ("b", {"city": "Oslo"})])
            ...     users.pipe("a", {"city": "Rome"})  # moves: -1 in Oslo, +1 in Rome
            ...     d.get_store("n").get("Oslo"), d.get_store("n").get("Rome")
            (1, 1)
        """

        return group_table(self, self._grouped_tables(), selector, key_serde, value_serde, name)


def _joined(table: TableT, materialized: StoreLike) -> TableT:
    """A table-table join's result, kept in a store of its own when `materialized`."""
    return table if materialized is None else materialize_node(table, materialized, "MERGE")


def _connect_stores(
    b: InternalBuilder, node: str, stores: Iterable[str | StoreSpec]
) -> tuple[str, ...]:
    """Connect `node` to `stores` (names of stores already added, or specs to add, owned by
    `node`); returns their names."""
    names = []
    for s in stores:
        if isinstance(s, str):
            b.connect(node, s)
            names.append(s)
        elif s.name in b.topology.stores:
            b.connect(node, s.name)
            names.append(s.name)
        else:
            b.add_store(s, [node])
            names.append(s.name)
    return tuple(names)
