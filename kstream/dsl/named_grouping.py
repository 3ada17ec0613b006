"""`group_by_key(name=...)` / `group_by(..., name=...)`: a grouped stream whose repartition
topic is named by the user (Kafka's `Grouped.as(name)`).

Without a name, an aggregation below a re-keyed stream repartitions through
`<store>-repartition`, so the topic changes with the store's generated name whenever an
operator is added upstream (and the old topic is orphaned with its records). With a name it
is `<name>-repartition`, whatever the store and the rest of the topology, for every
aggregation below the grouping: count, reduce, aggregate, windowed ones and cogroup.
"""

from __future__ import annotations

from kstream.dsl.graph import InternalBuilder
from kstream.dsl.grouped import KGroupedStream
from kstream.dsl.handles import TableT
from kstream.serde import Serde


class NamedKGroupedStream(KGroupedStream[TableT]):
    """A `KGroupedStream` repartitioning through `<name>-repartition` (when it must)."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        repartition_required: bool,
        tables: type[TableT],
        name: str,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde, repartition_required, tables)
        self._repartition_name = name

    def _source(self, base: str) -> str:
        # Kafka (GroupedStreamAggregateBuilder): the user's name, else the store's
        return super()._source(self._repartition_name)
