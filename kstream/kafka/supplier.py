"""`ClientSupplier`: where the runtime gets its Kafka clients (Kafka Streams' KafkaClientSupplier).

Every Kafka client kstream makes comes from a supplier: the stream thread's consumer, the
tasks' producers, the app's admin client, changelog restore, the global-table consumer, the
topic reader, the HTTP instance registry, `kstreamd reset` and the Spark source and sink. The
roles are Kafka Streams' (KafkaClientSupplier): `producer`, `consumer` (the stream thread's and
every other plain consumer), `admin`, `restore_consumer` (reads changelogs to their end) and
`global_consumer` (reads and follows the global tables' topics), so a supplier can give each
its own settings. The default, `KafkaClientSupplier`, builds the confluent-kafka based
`Producer`, `Consumer` and `Admin`; `kstream.testing.MockClientSupplier` hands out clients over
an in-memory cluster, so the commit protocols, fencing and rollback can be tested without a
broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kstream.kafka.admin import Admin
    from kstream.kafka.consumer import Consumer
    from kstream.kafka.producer import Producer

__all__ = ["ClientConfig", "ClientSupplier", "KafkaClientSupplier"]


@dataclass(frozen=True)
class ClientConfig:
    """What one client is built from; each role reads the fields that concern it.

    `kafka` is the app's one librdkafka settings dict; the clients keep their role's part of it
    (`kstream.kafka.roles.client_config`).
    """

    bootstrap_servers: str
    kafka: Mapping[str, Any] = field(default_factory=dict)
    #: milliseconds the start-up connection check may take (None: the default)
    connect_timeout: int | None = None
    client_id: str | None = None
    #: consumer: the group to join (None: a consumer that only assigns)
    group_id: str | None = None
    #: producer: makes it transactional
    transactional_id: str | None = None
    #: producer: idempotent without transactions
    idempotent: bool = False
    #: producer: topics whose delivered offsets `take_offsets` reports (the changelogs)
    track_offsets: frozenset[str] = frozenset()


class ClientSupplier(Protocol):
    """Makes the clients of an app, each from a config: one method per role (module doc)."""

    def producer(self, config: ClientConfig) -> Producer: ...

    def consumer(self, config: ClientConfig) -> Consumer: ...

    def restore_consumer(self, config: ClientConfig) -> Consumer: ...

    def global_consumer(self, config: ClientConfig) -> Consumer: ...

    def admin(self, config: ClientConfig) -> Admin: ...


class KafkaClientSupplier:
    """The default supplier: confluent-kafka clients talking to a real cluster."""

    def producer(self, config: ClientConfig) -> Producer:
        from kstream.kafka.producer import Producer

        return Producer(
            config.bootstrap_servers,
            kafka=config.kafka,
            transactional_id=config.transactional_id,
            idempotent=config.idempotent,
            connect_timeout=config.connect_timeout,
            client_id=config.client_id,
            track_offsets=config.track_offsets,
        )

    def consumer(self, config: ClientConfig) -> Consumer:
        from kstream.kafka.consumer import Consumer

        return Consumer(
            config.bootstrap_servers,
            group_id=config.group_id,
            kafka=config.kafka,
            connect_timeout=config.connect_timeout,
            client_id=config.client_id,
        )

    def restore_consumer(self, config: ClientConfig) -> Consumer:
        """A consumer like any other: `config` holds the restore's settings."""
        return self.consumer(config)

    def global_consumer(self, config: ClientConfig) -> Consumer:
        """A consumer like any other: `config` holds the global tables' settings."""
        return self.consumer(config)

    def admin(self, config: ClientConfig) -> Admin:
        from kstream.kafka.admin import Admin

        return Admin(
            config.bootstrap_servers, kafka=config.kafka, connect_timeout=config.connect_timeout
        )
