"""The DSL's handles users name: `KStream`, `KTable`, and the grouped, windowed and cogrouped
streams and grouped tables they lead to, the classes that return one another
(`KStream.to_table`, `KTable.to_stream`, `KStream.group_by_key`, `KGroupedStream.count`, ...),
so the one module that names them all.

Their operators are in the modules below (`StreamOps` in kstream.dsl.stream, `TableOps` in
kstream.dsl.table, `GroupedStreamOps` in kstream.dsl.grouped_ops, ...), which name none of
these classes: an operator returns a handle of its own class (`Self`), and one that makes
another kind asks for that kind's class through a hook (`_tables()`, `_streams()`,
`_grouped()`, `_time_windowed()`, ...), answered here. So every class here is concrete, not
generic: a user annotates `g: KGroupedStream = s.group_by_key()` bare, and `g.count()` is a
`KTable` to a type checker. The DSL's modules import one way: this module imports the
operators, the operators import the handles' state (kstream.dsl.handles) and the processors
(kstream.dsl.processors), never the reverse; the modules whose paths users import these
classes from (kstream.dsl.grouped, .windowed, .cogroup, .grouped_table) sit above this one.
"""

from __future__ import annotations

from kstream.dsl.branched_ops import BranchedOps
from kstream.dsl.cogroup_ops import (
    CogroupedOps,
    SessionWindowedCogroupedOps,
    TimeWindowedCogroupedOps,
)
from kstream.dsl.grouped_ops import GroupedStreamOps
from kstream.dsl.grouped_table_ops import GroupedTableOps
from kstream.dsl.stream import StreamOps
from kstream.dsl.table import TableOps
from kstream.dsl.windowed_ops import SessionWindowedOps, TimeWindowedOps

__all__ = [
    "BranchedKStream",
    "CogroupedKStream",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "SessionWindowedCogroupedKStream",
    "SessionWindowedKStream",
    "TimeWindowedCogroupedKStream",
    "TimeWindowedKStream",
]


class KStream(StreamOps["KTable", "KGroupedStream", "BranchedKStream"]):
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

    def _grouped(self) -> type[KGroupedStream]:
        return KGroupedStream

    def _branched(self) -> type[BranchedKStream]:
        return BranchedKStream


class KTable(TableOps[KStream, "KGroupedTable"]):
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

    def _grouped_tables(self) -> type[KGroupedTable]:
        return KGroupedTable


class BranchedKStream(BranchedOps[KStream]):
    """A `KStream` being split, from `KStream.split()`: add branches with `branch`, finish with
    `default_branch` or `no_default_branch`, which return the branches, `KStream`s, by name
    (Kafka 4's `BranchedKStream`; see `kstream.dsl.branched_ops`)."""


class KGroupedStream(
    GroupedStreamOps[KTable, "TimeWindowedKStream", "SessionWindowedKStream", "CogroupedKStream"]
):
    """Records grouped by their key, from `KStream.group_by_key` or `KStream.group_by`.

    Each aggregation returns a `KTable` and repartitions first if the key changed upstream
    (through `<name>-repartition` when the grouping was given a `name`).

    Example:
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> pages = b.stream("clicks", "str", "json").group_by(lambda k, v: v["page"], "str")
        >>> pages.count(store="per-page").to_stream().to("page-counts")
        >>> with TopologyTestDriver(b) as d:
        ...     d.input_topic("clicks", "str", "json").pipe_many([("ann", {"page": "/"})] * 2)
        ...     d.output_topic("page-counts", "str", "long").read_key_values()
        [('/', 1), ('/', 2)]
    """

    def _time_windowed(self) -> type[TimeWindowedKStream]:
        return TimeWindowedKStream

    def _session_windowed(self) -> type[SessionWindowedKStream]:
        return SessionWindowedKStream

    def _cogrouped(self) -> type[CogroupedKStream]:
        return CogroupedKStream


class TimeWindowedKStream(TimeWindowedOps[KTable]):
    """A grouped stream over time windows (tumbling, hopping) or sliding windows, from
    `KGroupedStream.windowed_by(TimeWindows | SlidingWindows)`; its aggregations return
    `KTable`s keyed by `Windowed(key, start, end)`."""


class SessionWindowedKStream(SessionWindowedOps[KTable]):
    """A grouped stream over session windows, from
    `KGroupedStream.windowed_by(SessionWindows)`; its aggregations return `KTable`s keyed by
    `Windowed(key, start, end)`."""


class CogroupedKStream(
    CogroupedOps[KTable, "TimeWindowedCogroupedKStream", "SessionWindowedCogroupedKStream"]
):
    """Grouped streams with one aggregator each, aggregated together into one `KTable`
    (KIP-150), from `KGroupedStream.cogroup(aggregator)`; see `kstream.dsl.cogroup_ops`.

    Add inputs with `cogroup(grouped, aggregator)` (a grouped stream given twice keeps its
    last aggregator, as Kafka's map of patterns does). All inputs must have the same key type;
    their values may differ.
    """

    def _time_windowed(self) -> type[TimeWindowedCogroupedKStream]:
        return TimeWindowedCogroupedKStream

    def _session_windowed(self) -> type[SessionWindowedCogroupedKStream]:
        return SessionWindowedCogroupedKStream


class TimeWindowedCogroupedKStream(TimeWindowedCogroupedOps[KTable]):
    """A cogroup over time windows (tumbling, hopping) or sliding windows, from
    `CogroupedKStream.windowed_by(TimeWindows | SlidingWindows)`."""


class SessionWindowedCogroupedKStream(SessionWindowedCogroupedOps[KTable]):
    """A cogroup over session windows, from `CogroupedKStream.windowed_by(SessionWindows)`."""


class KGroupedTable(GroupedTableOps[KTable]):
    """Rows of a table grouped by a new key, from `KTable.group_by`: `count`, `reduce` (with
    an adder and a subtractor) and `aggregate`, each returning a `KTable`; see
    `kstream.dsl.grouped_table_ops`."""
