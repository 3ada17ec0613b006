"""Thin adapters over confluent-kafka: Admin, Producer, Consumer and the embedded broker; the
client supplier the runtime gets them from, and `client_config` (one settings dict per role).

Names are loaded on first use: a process that imports one module of the package (the client
supplier's settings, the partitioner) should not pull in every client class.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kstream.kafka.admin import Admin, TopicDescription, TopicSpec
    from kstream.kafka.broker import EmbeddedBroker
    from kstream.kafka.consumer import Consumer
    from kstream.kafka.partitioner import default_partition, murmur2
    from kstream.kafka.producer import Producer
    from kstream.kafka.roles import client_config
    from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier

_EXPORTS = {
    "Admin": "kstream.kafka.admin",
    "TopicDescription": "kstream.kafka.admin",
    "TopicSpec": "kstream.kafka.admin",
    "EmbeddedBroker": "kstream.kafka.broker",
    "Consumer": "kstream.kafka.consumer",
    "Producer": "kstream.kafka.producer",
    "default_partition": "kstream.kafka.partitioner",
    "murmur2": "kstream.kafka.partitioner",
    "client_config": "kstream.kafka.roles",
    "ClientConfig": "kstream.kafka.supplier",
    "ClientSupplier": "kstream.kafka.supplier",
    "KafkaClientSupplier": "kstream.kafka.supplier",
}

__all__ = [
    "Admin",
    "ClientConfig",
    "ClientSupplier",
    "Consumer",
    "EmbeddedBroker",
    "KafkaClientSupplier",
    "Producer",
    "TopicDescription",
    "TopicSpec",
    "client_config",
    "default_partition",
    "murmur2",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kstream.kafka' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
