"""Tools for testing kstream applications without a broker."""

from kstream.testing.driver import TestInputTopic, TestOutputTopic, TopologyTestDriver
from kstream.testing.mock import (
    MockCluster,
    MockConsumer,
    MockGroupMetadata,
    MockMessage,
    MockProducer,
)

__all__ = [
    "MockCluster",
    "MockConsumer",
    "MockGroupMetadata",
    "MockMessage",
    "MockProducer",
    "TestInputTopic",
    "TestOutputTopic",
    "TopologyTestDriver",
]
