"""The high-level DSL: StreamBuilder, KStream, KGroupedStream, KTable, GlobalKTable.

Every operator compiles into the low-level `kstream.topology.Topology`; `kstream.dsl.graph`
documents how operators are added (for the operator modules of windows, joins, grouped tables
and deduplication).
"""

from kstream.dsl.api import KStream, KTable
from kstream.dsl.branched import Branched, BranchedKStream
from kstream.dsl.builder import StreamBuilder
from kstream.dsl.global_table import GlobalKTable
from kstream.dsl.grouped import KGroupedStream
from kstream.dsl.joined import Joined
from kstream.dsl.processors import Change
from kstream.dsl.suppressed import BufferConfig, Suppressed

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Change",
    "GlobalKTable",
    "Joined",
    "KGroupedStream",
    "KStream",
    "KTable",
    "StreamBuilder",
    "Suppressed",
]
