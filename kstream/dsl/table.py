"""`KTable` (a changelog stream: the latest value per key) and `GlobalKTable`.

Records between table operators carry `Change(new, old)` values; a None `new` is a delete and
reaches `to_stream()` as a tombstone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kstream.dsl import processors as p
from kstream.dsl.graph import Handle, InternalBuilder, ValueGetter, processor_factory
from kstream.serde import Serde, SerdeLike
from kstream.topology.processor import ProcessorFactory

if TYPE_CHECKING:
    from kstream.dsl.grouped_table import KGroupedTable
    from kstream.dsl.stream import KStream


class KTable(Handle):
    """A changelog stream read as a table: the latest value per key, where a None value
    deletes the key. From `StreamBuilder.table`, `KStream.to_table` or an aggregation.

    Example:
        users = b.table("users", value_serde="json")
        users.filter(lambda k, u: u["active"]).to_stream().to("active-users")

    `_getter` reads its current value for a key (for joins). `_sends_old_values` is what
    Kafka's `enableSendingOldValues(false)` answers for the table: True when it is materialized
    in Kafka's sense (a source or `to_table` given a store, any aggregation, a table-table
    join) or derives, without a store of its own, from such a table. A filter below such a
    table forwards nothing for an update that is invisible before and after.
    """

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        getter: ValueGetter,
        sends_old_values: bool = True,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self._getter = getter
        self._sends_old_values = sends_old_values

    @property
    def store_name(self) -> str:
        """The store holding the table this one derives from (queryable)."""
        return self._getter.store

    def _then(
        self,
        op: str,
        factory: ProcessorFactory,
        name: str | None,
        getter: ValueGetter,
        value_serde: Serde | None,
    ) -> KTable:
        b = self._builder
        node = b.processor(b.name(op, name, prefix="KTABLE"), factory, self._node)
        return KTable(b, node, self._key_serde, value_serde, getter, self._sends_old_values)

    def filter(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """Keep the keys whose value matches `predicate(key, value)`.

        A key that stops matching is deleted downstream: its update reaches `to_stream()` as a
        tombstone. As Kafka's KTableFilter, an update not visible before or after is also forwarded
        as a tombstone, unless the table above is materialized (a source or `to_table` given a
        `store`, an aggregation, a table-table join) or a consumer needs old values (a
        `group_by`, a table-table join): then it is not forwarded at all. No store of its own:
        joins read the parent's store through the filter.

        Example:
            active = users.filter(lambda k, v: v["active"])
        """
        getter = self._getter.then(lambda k, v: v if predicate(k, v) else None)
        return self._filter(predicate, False, name, getter)

    def filter_not(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """Keep the keys whose value does not match `predicate(key, value)` (see `filter`).

        Example:
            inactive = users.filter_not(lambda k, v: v["active"])
        """
        getter = self._getter.then(lambda k, v: None if predicate(k, v) else v)
        return self._filter(predicate, True, name, getter)

    def _filter(
        self,
        predicate: Callable[[Any, Any], Any],
        negate: bool,
        name: str | None,
        getter: ValueGetter,
    ) -> KTable:
        """As Kafka's KTableFilter: an update that does not match reaches `to_stream` as a
        tombstone, unless the table above sends old values (Kafka decides it when the filter is
        made: `parent.enableSendingOldValues(false)`) or a consumer below needs them (a
        regroup, a table-table join), in which case an update invisible before and after is
        not forwarded."""
        flag = p.SendOldValues()
        flag.enabled = self._sends_old_values
        factory = processor_factory(p.TableFilterProcessor, predicate, negate, flag)
        table = self._then("FILTER", factory, name, getter, self._value_serde)
        self._builder.table_operator(table._node, self._node, flag)
        return table

    def map_values(
        self, fn: Callable[..., Any], name: str | None = None, *, with_key: bool = False
    ) -> KTable:
        """A table of `fn(value)` per key; deletes stay deletes (`fn` never sees None).

        Keys and timestamps are kept, so no repartition; no store of its own. With
        `with_key=True` the mapper is `fn(key, value)` (Kafka's `ValueMapperWithKey`); the key
        is read-only: the result stays under the same key.

        Example:
            emails = users.map_values(lambda v: v["email"])
            labels = users.map_values(lambda k, v: f"{k}: {v['name']}", with_key=True)
        """
        getter = self._getter.then(fn if with_key else lambda _k, v: fn(v))
        factory = processor_factory(p.TableMapValuesProcessor, fn, with_key)
        table = self._then("MAPVALUES", factory, name, getter, None)
        self._builder.table_operator(table._node, self._node)
        return table

    def to_stream(
        self, mapper: Callable[[Any, Any], Any] | None = None, name: str | None = None
    ) -> KStream:
        """The table's changelog as a stream: every update as a record, deletes as tombstones.

        Each record keeps the update's timestamp. Records with a None value are deletes: written to
        a compacted topic, they remove the key. With `mapper(key, value) -> new_key` (Kafka's
        `toStream(KeyValueMapper)`) each record is re-keyed, as `to_stream().select_key(mapper)`
        (the same nodes and names as Kafka's), so a stateful operator after it repartitions; the
        mapper also sees deletes (value None).

        Example:
            counts.to_stream().to("counts", value_serde="long")
            per_minute.to_stream(lambda wk, v: f"{wk.key}@{wk.start}").to("counts-by-window")
        """
        from kstream.dsl.stream import KStream

        b = self._builder
        node = b.processor(
            b.name("TOSTREAM", name, prefix="KTABLE"), p.TableToStreamProcessor, self._node
        )
        stream = KStream(b, node, self._key_serde, self._value_serde, False)
        return stream if mapper is None else stream.select_key(mapper)

    # --- implemented in other modules ----------------------------------------------------
    # (joins and grouped_table import this module: they are imported here, at the call)

    def join(
        self, other: KTable, joiner: Callable[[Any, Any], Any], name: str | None = None
    ) -> KTable:
        """Inner join with another table on the key: a table of `joiner(v, ov)`.

        An update on either side emits the new result (and the old one, as `Change`) computed
        against the other side's current value, stamped with the larger of the two sides'
        timestamps; a key present on one side only has no result, and deletes propagate as deletes.
        Both tables must be co-partitioned (same key, same partition count).

        Example:
            profile = users.join(addresses, lambda u, a: {**u, "address": a})
        """
        from kstream.dsl.joins import join_tables

        return join_tables(self, other, joiner, kind="inner", name=name)

    def left_join(
        self, other: KTable, joiner: Callable[[Any, Any], Any], name: str | None = None
    ) -> KTable:
        """Left join with another table: every key of this table has a result, `joiner(v, None)`
        without a match (see `join` for timestamps and deletes).

        Example:
            profile = users.left_join(addresses, lambda u, a: {**u, "address": a})
        """
        from kstream.dsl.joins import join_tables

        return join_tables(self, other, joiner, kind="left", name=name)

    def outer_join(
        self, other: KTable, joiner: Callable[[Any, Any], Any], name: str | None = None
    ) -> KTable:
        """Outer join with another table: a key of either table has a result, with None for the
        missing side, `joiner(v, None)` or `joiner(None, ov)` (see `join`).

        Example:
            merged = old_prices.outer_join(new_prices, lambda a, b: b if b is not None else a)
        """
        from kstream.dsl.joins import join_tables

        return join_tables(self, other, joiner, kind="outer", name=name)

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
    ) -> KGroupedTable:
        """Regroup the rows by `selector(key, value) -> (new_key, new_value)`, for `count`, `reduce`
        or `aggregate` with an adder and a subtractor.

        Every update goes through a repartition topic: the old value leaves its group (subtractor),
        the new value joins its group (adder). A selected pair that is None or has a None key or
        value is dropped and counted.

        Example:
            users_per_city = users.group_by(lambda k, v: (v["city"], v)).count()
        """
        from kstream.dsl.grouped_table import group_table

        return group_table(self, selector, key_serde, value_serde)


class GlobalKTable:
    """A table replicated in full on every instance: joined by a key derived from the record.

    It has no operators of its own: streams join it with
    `stream.join(global_table, key_selector(k, v), joiner(v, gv))` (or `left_join`), with no
    repartition and no co-partitioning; `store_name` names its store for queries.

    Example:
        countries = b.global_table("countries", value_serde="json")
        orders.join(countries, lambda k, o: o["country"], lambda o, c: {**o, "c": c})
    """

    def __init__(
        self, store: str, topic: str, key_serde: Serde | None, value_serde: Serde | None
    ) -> None:
        self.store_name = store
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._getter = ValueGetter(store)

    def __repr__(self) -> str:
        return f"GlobalKTable({self.store_name!r} <- {self.topic!r})"
