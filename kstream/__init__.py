"""kstream: Kafka Streams for Python.

Micro-batch stream processing over Kafka with a Kafka Streams DSL, a Processor API, pluggable
state stores and exactly-once results.
"""

from kstream import errors
from kstream.config import Config
from kstream.duration import duration
from kstream.errors import (
    ConfigError,
    DeserializationError,
    KStreamError,
    ProcessingError,
    TopologyError,
)
from kstream.records import Record, TimestampType, Windowed
from kstream.serde import Serde, SerdeContext, serde

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "DeserializationError",
    "KStreamError",
    "ProcessingError",
    "Record",
    "Serde",
    "SerdeContext",
    "TimestampType",
    "TopologyError",
    "Windowed",
    "__version__",
    "duration",
    "errors",
    "serde",
]
