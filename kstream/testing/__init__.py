"""Tools for testing kstream applications without a broker."""

from kstream.testing.driver import TestInputTopic, TestOutputTopic, TopologyTestDriver
from kstream.testing.mock import (
    MockCluster,
    MockConsumer,
    MockGroupMetadata,
    MockMessage,
    MockProducer,
)
from kstream.testing.supplier import MockAdmin, MockClientSupplier

__all__ = [
    "MockAdmin",
    "MockClientSupplier",
    "MockCluster",
    "MockConsumer",
    "MockGroupMetadata",
    "MockMessage",
    "MockProducer",
    "TestInputTopic",
    "TestOutputTopic",
    "TopologyTestDriver",
]
