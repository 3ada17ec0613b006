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
    """A handle on a table node; `_getter` reads its current value for a key (for joins)."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        getter: ValueGetter,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self._getter = getter

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
        return KTable(b, node, self._key_serde, value_serde, getter)

    def filter(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """Keep keys whose value matches; a key that stops matching is deleted downstream."""
        getter = self._getter.then(lambda k, v: v if predicate(k, v) else None)
        return self._filter(predicate, False, name, getter)

    def filter_not(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """Keep keys whose value does not match (see `filter`)."""
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
        tombstone, unless a consumer below needs old values (a regroup, a table-table join),
        in which case an update invisible before and after is not forwarded."""
        flag = p.SendOldValues()
        factory = processor_factory(p.TableFilterProcessor, predicate, negate, flag)
        table = self._then("FILTER", factory, name, getter, self._value_serde)
        self._builder.table_operator(table._node, self._node, flag)
        return table

    def map_values(self, fn: Callable[[Any], Any], name: str | None = None) -> KTable:
        getter = self._getter.then(lambda _k, v: fn(v))
        factory = processor_factory(p.TableMapValuesProcessor, fn)
        table = self._then("MAPVALUES", factory, name, getter, None)
        self._builder.table_operator(table._node, self._node)
        return table

    def to_stream(self, name: str | None = None) -> KStream:
        """Every update as a record; deletes become tombstones (None values)."""
        from kstream.dsl.stream import KStream

        b = self._builder
        node = b.processor(
            b.name("TOSTREAM", name, prefix="KTABLE"), p.TableToStreamProcessor, self._node
        )
        return KStream(b, node, self._key_serde, self._value_serde, False)

    # --- implemented in other modules ----------------------------------------------------
    # (joins and grouped_table import this module: they are imported here, at the call)

    def join(
        self, other: KTable, joiner: Callable[[Any, Any], Any], name: str | None = None
    ) -> KTable:
        from kstream.dsl.joins import join_tables

        return join_tables(self, other, joiner, kind="inner", name=name)

    def left_join(
        self, other: KTable, joiner: Callable[[Any, Any], Any], name: str | None = None
    ) -> KTable:
        from kstream.dsl.joins import join_tables

        return join_tables(self, other, joiner, kind="left", name=name)

    def outer_join(
        self, other: KTable, joiner: Callable[[Any, Any], Any], name: str | None = None
    ) -> KTable:
        from kstream.dsl.joins import join_tables

        return join_tables(self, other, joiner, kind="outer", name=name)

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
    ) -> KGroupedTable:
        from kstream.dsl.grouped_table import group_table

        return group_table(self, selector, key_serde, value_serde)


class GlobalKTable:
    """A table replicated in full on every instance: joined by a key derived from the record."""

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
