"""What the DSL's operators read of the handles they are given: a stream's, a table's and a
grouped stream's state, without their operators.

The handle classes users see (`KStream`, `KTable`, `KGroupedStream`, ...) return one another,
so their types are tied; their modules still import one way because nothing below
`kstream.dsl.api` names the final `KStream` or `KTable`: an operator that returns a handle
of the kind it was given makes one with `type(handle)(...)`, and one that returns the other
kind asks the handle it has for that kind's class (`StreamHandle._tables`,
`TableHandle._streams`), which `kstream.dsl.api` defines. The operator bases of the grouped,
windowed and cogrouped handles are generic in the classes they make (`TableT`, ...); the
classes users name, bound to `KTable` and to one another, are defined in `kstream.dsl.api`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kstream.dsl.graph import Handle, InternalBuilder
from kstream.dsl.processors.getter import ValueGetter

if TYPE_CHECKING:
    from kstream.dsl.processors.table import MaterializedOnDemand
    from kstream.serde import Serde

TableT = TypeVar("TableT", bound="TableHandle[Any]")
StreamT = TypeVar("StreamT", bound="StreamHandle[Any]")


class StreamHandle(Handle, Generic[TableT]):
    """A stream's state: `_repartition_required` is True once the key may have changed, so
    the next stateful operator first repartitions by the new key. `TableT` is the table kind
    its `to_table` and aggregations make."""

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

    def _ensure_partitioned(self, base: str) -> str:
        """The node a stateful operator named `base` reads from, repartitioning if needed."""
        if not self._repartition_required:
            return self._node
        return self._builder.repartition(
            self._node, base, key_serde=self._key_serde, value_serde=self._value_serde
        )

    def _tables(self) -> type[TableT]:
        """The table class this stream's operators make (`kstream.dsl.api.KTable`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no tables")


class TableHandle(Handle, Generic[StreamT]):
    """A table's state: `_getter` reads its current value for a key (for joins);
    `_sends_old_values` and `_on_demand` are `KTable`'s (see there). `StreamT` is the stream
    kind its `to_stream` makes."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        getter: ValueGetter,
        sends_old_values: bool = True,
        on_demand: MaterializedOnDemand | None = None,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self._getter = getter
        self._sends_old_values = sends_old_values
        self._on_demand = on_demand

    def _streams(self) -> type[StreamT]:
        """The stream class this table's operators make (`kstream.dsl.api.KStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no streams")


class GroupedHandle(Handle, Generic[TableT]):
    """A grouped stream's state: whether its records must be repartitioned before they are
    aggregated, the name of that repartition topic if the user gave one, and the table class
    its aggregations make (`tables`)."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        repartition_required: bool,
        tables: type[TableT],
        repartition_name: str | None = None,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self._repartition_required = repartition_required
        self._table_class = tables
        self._repartition_name = repartition_name

    def _tables(self) -> type[TableT]:
        """The table class the aggregations make (`kstream.dsl.api.KTable`)."""
        return self._table_class

    def _source(self, base: str) -> str:
        """The node to aggregate from, through `<base>-repartition` when the key changed, or
        `<repartition_name>-repartition` when the grouping was named (Kafka's `Grouped.as`,
        GroupedStreamAggregateBuilder: the user's name, else the store's), so the topic keeps
        its name when operators are added upstream."""
        if not self._repartition_required:
            return self._node
        return self._builder.repartition(
            self._node,
            base if self._repartition_name is None else self._repartition_name,
            key_serde=self._key_serde,
            value_serde=self._value_serde,
        )
