"""kstream: Kafka Streams for Python.

Micro-batch stream processing over Kafka with a Kafka Streams DSL, a Processor API, pluggable
state stores and exactly-once results.
"""

from typing import TYPE_CHECKING

from kstream._lazy import lazy_exports

# Imported at once: these names are also submodules, which the import system would otherwise
# bind here as modules on their first import from anywhere.
from kstream.duration import duration
from kstream.serde import Serde, SerdeContext, serde
from kstream.version import __version__  # its own module: the service and the build read it

if TYPE_CHECKING:
    from kstream import errors, stores
    from kstream.config import Config
    from kstream.dsl import Change, GlobalKTable, KGroupedStream, KStream, KTable, StreamBuilder
    from kstream.dsl.grouped_table import KGroupedTable
    from kstream.dsl.windowed import session_windowed_serde, time_windowed_serde
    from kstream.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
    from kstream.errors import (
        ConfigError,
        DeserializationError,
        KStreamError,
        ProcessingError,
        TopologyError,
    )
    from kstream.processes import App, run_processes
    from kstream.records import Record, TimestampType, Windowed
    from kstream.runtime import AppState
    from kstream.topology import Processor, ProcessorContext, PunctuationType, Topology

__all__ = [
    "App",
    "AppState",
    "Change",
    "Config",
    "ConfigError",
    "DeserializationError",
    "GlobalKTable",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KStreamError",
    "KTable",
    "ProcessingError",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "Serde",
    "SerdeContext",
    "SessionWindows",
    "SlidingWindows",
    "StreamBuilder",
    "TimeWindows",
    "TimestampType",
    "Topology",
    "TopologyError",
    "Windowed",
    "__version__",
    "duration",
    "errors",
    "run_processes",
    "serde",
    "session_windowed_serde",
    "stores",
    "time_windowed_serde",
]

# Names are imported on first use (PEP 562), so a process that needs one corner of kstream (a
# Spark worker, the CLI's argument parsing, a store backend) does not pay for the runtime, the
# DSL and the Kafka clients: `import kstream` alone used to cost ~0.35 s of CPU, paid again by
# every Python worker Spark starts.
_EXPORTS = {
    "App": "kstream.processes",
    "AppState": "kstream.runtime",
    "Change": "kstream.dsl",
    "Config": "kstream.config",
    "ConfigError": "kstream.errors",
    "DeserializationError": "kstream.errors",
    "GlobalKTable": "kstream.dsl",
    "JoinWindows": "kstream.dsl.windows",
    "KGroupedStream": "kstream.dsl",
    "KGroupedTable": "kstream.dsl.grouped_table",
    "KStream": "kstream.dsl",
    "KStreamError": "kstream.errors",
    "KTable": "kstream.dsl",
    "ProcessingError": "kstream.errors",
    "Processor": "kstream.topology",
    "ProcessorContext": "kstream.topology",
    "PunctuationType": "kstream.topology",
    "Record": "kstream.records",
    "SessionWindows": "kstream.dsl.windows",
    "SlidingWindows": "kstream.dsl.windows",
    "StreamBuilder": "kstream.dsl",
    "TimeWindows": "kstream.dsl.windows",
    "TimestampType": "kstream.records",
    "Topology": "kstream.topology",
    "TopologyError": "kstream.errors",
    "Windowed": "kstream.records",
    "errors": "kstream.errors",
    "run_processes": "kstream.processes",
    "session_windowed_serde": "kstream.dsl.windowed",
    "stores": "kstream.stores",
    "time_windowed_serde": "kstream.dsl.windowed",
}


__getattr__ = lazy_exports(globals(), _EXPORTS, frozenset({"errors", "stores"}))
