"""The low-level graph (Processor API), its compilation and the execution core."""

from kstream.topology.compiled import CompiledTopology, InternalTopic, SubTopology
from kstream.topology.describe import TopologyDescription
from kstream.topology.processor import (
    Cancellable,
    Processor,
    ProcessorContext,
    ProcessorFactory,
    PunctuationType,
)
from kstream.topology.task import ErrorHandler, RecordCollector, Task, fail_on_error
from kstream.topology.topology import Topology

__all__ = [
    "Cancellable",
    "CompiledTopology",
    "ErrorHandler",
    "InternalTopic",
    "Processor",
    "ProcessorContext",
    "ProcessorFactory",
    "PunctuationType",
    "RecordCollector",
    "SubTopology",
    "Task",
    "Topology",
    "TopologyDescription",
    "fail_on_error",
]
