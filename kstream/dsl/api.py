"""The DSL's stream and table handles, `KStream` and `KTable`: the two classes that return each
other (`KStream.to_table`, `KTable.to_stream`), so the one module that names both.

Their operators are in the modules below (`StreamOps` in kstream.dsl.stream, `TableOps` in
kstream.dsl.table), which name neither: an operator returns a handle of its own class
(`Self`), and one that makes the other kind asks for that kind's class, `_tables()` or
`_streams()`, answered here. The grouped, windowed and cogrouped streams and the grouped
tables are generic in the table class they make, given to them by the stream or table they
come from (`KGroupedStream[KTable]`, ...). So the DSL's modules import one way: this module
imports the operators, the operators import the handles' state (kstream.dsl.handles) and the
processors (kstream.dsl.processors), never the reverse.
"""

from __future__ import annotations

from kstream.dsl.stream import StreamOps
from kstream.dsl.table import TableOps

__all__ = ["KStream", "KTable"]


class KStream(StreamOps["KTable"]):
    """An unbounded stream of independent records (facts, not updates), from
    `StreamBuilder.stream` or an operator; every operator returns a new handle and adds its
    nodes to the builder's topology at once.

    Example:
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> words = b.stream("lines", "str", "str").flat_map_values(str.split)
        >>> counts = words.group_by(lambda k, w: w, "str", "str").count()
        >>> counts.to_stream().to("word-counts", "str", "long")
        >>> with TopologyTestDriver(b) as d:
        ...     d.input_topic("lines", "str", "str").pipe(None, "to be or not to be")
        ...     d.output_topic("word-counts", "str", "long").read_key_values_to_map()
        {'to': 2, 'be': 2, 'or': 1, 'not': 1}

    `_key_serde`/`_value_serde` are the serdes known to fit the records here (None: unknown,
    e.g. after `map`); `_repartition_required` is True once the key may have changed, so the
    next stateful operator first repartitions by the new key.
    """

    def _tables(self) -> type[KTable]:
        return KTable


class KTable(TableOps[KStream]):
    """A changelog stream read as a table: the latest value per key, where a None value
    deletes the key. From `StreamBuilder.table`, `KStream.to_table` or an aggregation.

    Example:
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> users = b.table("users", "str", "json")
        >>> users.filter(lambda k, u: u["active"]).to_stream().to("active-users")
        >>> with TopologyTestDriver(b) as d:
        ...     d.input_topic("users", "str", "json").pipe_many(
        ...         [("ann", {"active": True}), ("ann", {"active": False})])
        ...     d.output_topic("active-users", "str", "json").read_key_values()
        [('ann', {'active': True}), ('ann', None)]

    `_getter` reads its current value for a key (for joins). `_sends_old_values` is what
    Kafka's `enableSendingOldValues(false)` answers for the table: True when it is materialized
    in Kafka's sense (a source or `to_table` given a store, any aggregation, a table-table
    join) or derives, without a store of its own, from such a table. A filter below such a
    table forwards nothing for an update that is invisible before and after. A table that
    derives from one Kafka materializes on demand (a source, `to_table` or foreign-key join
    result without a store name) keeps that table's `_on_demand` (see `_old_values_now`).
    """

    def _streams(self) -> type[KStream]:
        return KStream
