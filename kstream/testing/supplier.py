"""`MockClientSupplier`: an app's Kafka clients over a `MockCluster`, for broker-free tests.

`App(..., client_supplier=MockClientSupplier(cluster))` runs the real runtime (stream thread,
commit protocols, restore, global tables) on in-memory clients: a test can commit, fence a
producer, drop a connection or time out a transaction through the cluster's fault injection
and see what the runtime does, in milliseconds. Every consumer of a group is its only member
and gets every partition, so two apps with one id on one cluster act as an owner and a zombie.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka.admin import DeletedRecords  # type: ignore[attr-defined,unused-ignore]

from kstream.errors import TopicError
from kstream.kafka.supplier import ClientConfig
from kstream.testing.mock import MockCluster, MockConsumer, MockProducer

if TYPE_CHECKING:
    from kstream.kafka.admin import Admin, TopicSpec
    from kstream.kafka.consumer import Consumer
    from kstream.kafka.producer import Producer

__all__ = ["MockAdmin", "MockClientSupplier"]

TP = tuple[str, int]


class MockAdmin:
    """In-memory `kstream.kafka.Admin`: the calls the runtime makes."""

    def __init__(self, cluster: MockCluster) -> None:
        self.cluster = cluster

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self.cluster.topics()

    def partition_counts(self, names: Iterable[str]) -> dict[str, int]:
        """Partitions of each existing topic among `names`."""
        out: dict[str, int] = {}
        for name in names:
            n = self.cluster.partitions(name)
            if n:
                out[name] = n
        return out

    def create_topic(self, name: str, partitions: int = 1, config: object = None) -> bool:
        return self.cluster.create_topic(name, partitions)

    def create_topics(self, specs: Iterable[TopicSpec]) -> dict[str, bool]:
        return {s.name: self.cluster.create_topic(s.name, s.partitions) for s in specs}

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[TP, Future[Any]]:
        """DeleteRecords on the cluster (`MockCluster.start_offset`), answered at once: each
        future holds a `DeletedRecords`, or the error of a partition that does not exist."""
        out: dict[TP, Future[Any]] = {}
        for tp, offset in offsets.items():
            fut: Future[Any] = Future()
            try:
                low = self.cluster.delete_records({tp: offset})[tp]
            except TopicError as e:
                fut.set_exception(e)
            else:
                fut.set_result(DeletedRecords(low))
            out[tp] = fut
        return out

    def close(self) -> None:
        pass


class MockClientSupplier:
    """Clients over `cluster` (a new one if not given); `producers` and `consumers` list
    every client handed out, so a test can look at them."""

    def __init__(self, cluster: MockCluster | None = None) -> None:
        self.cluster = cluster if cluster is not None else MockCluster()
        self.producers: list[MockProducer] = []
        self.consumers: list[MockConsumer] = []

    def producer(self, config: ClientConfig) -> Producer:
        p = MockProducer(
            self.cluster,
            transactional_id=config.transactional_id,
            idempotent=config.idempotent,
            track_offsets=config.track_offsets,
        )
        self.producers.append(p)
        return cast("Producer", p)  # duck-typed: the calls of kstream.kafka.Producer

    def consumer(self, config: ClientConfig) -> Consumer:
        c = MockConsumer(self.cluster, group_id=config.group_id)
        self.consumers.append(c)
        return cast("Consumer", c)  # duck-typed: the calls of kstream.kafka.Consumer

    def restore_consumer(self, config: ClientConfig) -> Consumer:
        return self.consumer(config)

    def global_consumer(self, config: ClientConfig) -> Consumer:
        return self.consumer(config)

    def admin(self, config: ClientConfig) -> Admin:
        return cast("Admin", MockAdmin(self.cluster))  # duck-typed: the runtime's calls
