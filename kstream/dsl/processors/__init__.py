"""The DSL's built-in processors, one module per operator family.

A processor module imports only downward: the records, serdes, state and topology packages,
the DSL's option classes (`kstream.dsl.windows`, `joined`, `suppressed`) and other modules of
this package (`base` and `cache` for every family), never the API classes (`KStream`,
`KTable`, ...) nor the modules that add operators to a topology. So a processor can be read,
tested and run (by the native runtime, the test driver or the Spark engine) without the DSL's
handles, and the handles' modules import the processors, never the reverse.

Families: `base` (`BuiltinProcessor`, `Change`), `cache` (timestamped store access, forwarding
through the record cache), `getter` (reading a table from another processor), `stateless`
(the operators that carry `stateless = True`), `process` (`process_values`), `aggregate`
(grouped streams), `table_aggregate` (re-grouped tables), `cogroup` (a cogroup's windowed
inputs), `table` (table sources, filters, mappers, materialization), `transform_values`,
`versioned`, `join` (stream-table, table-table), `grace_join`, `stream_stream_join`,
`fk_join` (with its wire format, `fk_wire`), `suppress`, `dedup`, `topic_chooser` (a sink
choosing its topic).

The names below are those `kstream.dsl.processors` had as one module (what code outside the
DSL imports: `Change`, `BuiltinProcessor`, the stateless operators, `AggregateProcessor`).
"""

from kstream.dsl.processors.aggregate import (
    AggregateProcessor,
    aggregate_step,
    count_initial,
    count_step,
    counts_by_key,
    reduce_step,
)
from kstream.dsl.processors.base import (
    BuiltinProcessor,
    Change,
    NotLatest,
    new_change,
    same_kind,
    without,
)
from kstream.dsl.processors.cache import UpdateSink, cached_forwarding, timestamped_access
from kstream.dsl.processors.process import FixedKeyProcessor
from kstream.dsl.processors.stateless import (
    BranchProcessor,
    DropNullKeysProcessor,
    FilterProcessor,
    FlatMapProcessor,
    FlatMapValuesProcessor,
    MapProcessor,
    MapValuesProcessor,
    NullKeyPolicy,
    PassThroughProcessor,
    PeekProcessor,
    SelectKeyProcessor,
)

__all__ = [
    "AggregateProcessor",
    "BranchProcessor",
    "BuiltinProcessor",
    "Change",
    "DropNullKeysProcessor",
    "FilterProcessor",
    "FixedKeyProcessor",
    "FlatMapProcessor",
    "FlatMapValuesProcessor",
    "MapProcessor",
    "MapValuesProcessor",
    "NotLatest",
    "NullKeyPolicy",
    "PassThroughProcessor",
    "PeekProcessor",
    "SelectKeyProcessor",
    "UpdateSink",
    "aggregate_step",
    "cached_forwarding",
    "count_initial",
    "count_step",
    "counts_by_key",
    "new_change",
    "reduce_step",
    "same_kind",
    "timestamped_access",
    "without",
]
