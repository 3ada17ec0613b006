"""kstream: Kafka Streams for Python.

Micro-batch stream processing over Kafka with a Kafka Streams DSL, a Processor API, pluggable
state stores and exactly-once results.
"""

from kstream import errors, stores
from kstream.config import Config
from kstream.dsl import Change, GlobalKTable, KGroupedStream, KStream, KTable, StreamBuilder
from kstream.dsl.grouped_table import KGroupedTable
from kstream.dsl.windowed import session_windowed_serde, time_windowed_serde
from kstream.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
from kstream.duration import duration
from kstream.errors import (
    ConfigError,
    DeserializationError,
    KStreamError,
    ProcessingError,
    TopologyError,
)
from kstream.processes import run_processes
from kstream.records import Record, TimestampType, Windowed
from kstream.runtime import App, AppState, TopicReader, read_unique
from kstream.serde import Serde, SerdeContext, serde
from kstream.topology import Processor, ProcessorContext, PunctuationType, Topology

__version__ = "0.1.0"

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
    "TopicReader",
    "Topology",
    "TopologyError",
    "Windowed",
    "__version__",
    "duration",
    "errors",
    "read_unique",
    "run_processes",
    "serde",
    "session_windowed_serde",
    "stores",
    "time_windowed_serde",
]
