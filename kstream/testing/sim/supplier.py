"""`SimClientSupplier`: one simulated instance's Kafka clients, as the runtime asks for them.

The runtime gets every client from its `ClientSupplier` (kstream.kafka.supplier); this one
hands out clients over the simulated cluster that share the instance's `CallHooks`, so the
scheduler can fail any of the instance's calls, pause its heartbeats, or kill all its clients
at once when it crashes the instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka.admin import DeletedRecords  # type: ignore[attr-defined,unused-ignore]

from kstream.errors import TopicError
from kstream.kafka.supplier import ClientConfig
from kstream.testing.sim.broker import SimKafka
from kstream.testing.sim.consumer import SimConsumer
from kstream.testing.sim.hooks import CallHooks
from kstream.testing.sim.producer import SimProducer

if TYPE_CHECKING:
    from kstream.kafka.admin import Admin, TopicSpec
    from kstream.kafka.consumer import Consumer
    from kstream.kafka.producer import Producer

__all__ = ["SimAdmin", "SimClientSupplier"]

TP = tuple[str, int]


class SimAdmin:
    """The admin calls the runtime makes: topics and DeleteRecords (the repartition purge)."""

    def __init__(self, cluster: SimKafka, hooks: CallHooks) -> None:
        self.cluster = cluster
        self.hooks = hooks

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(self.cluster.topics)

    def partition_counts(self, names: Iterable[str]) -> dict[str, int]:
        return {n: self.cluster.partitions(n) for n in names if self.cluster.partitions(n)}

    def create_topic(self, name: str, partitions: int = 1, config: object = None) -> bool:
        return self.cluster.create_topic(name, partitions)

    def create_topics(self, specs: Iterable[TopicSpec]) -> dict[str, bool]:
        return {s.name: self.cluster.create_topic(s.name, s.partitions) for s in specs}

    def delete_records(self, offsets: Mapping[TP, int]) -> dict[TP, Future[Any]]:
        self.hooks.before("admin.delete_records", self)
        out: dict[TP, Future[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            fut: Future[Any] = Future()
            try:
                log = self.cluster.log(topic, partition)
            except TopicError as e:
                fut.set_exception(e)
            else:
                log.start = max(log.start, min(offset, log.high_watermark))
                fut.set_result(DeletedRecords(log.start))
            out[(topic, partition)] = fut
        return out

    def close(self) -> None:
        pass


class SimClientSupplier:
    """Clients of one instance over `cluster`; `hooks` are the instance's."""

    def __init__(self, cluster: SimKafka, hooks: CallHooks) -> None:
        self.cluster = cluster
        self.hooks = hooks
        self.producers: list[SimProducer] = []
        self.consumers: list[SimConsumer] = []

    def producer(self, config: ClientConfig) -> Producer:
        p = SimProducer(
            self.cluster,
            self.hooks,
            transactional_id=config.transactional_id,
            kafka=dict(config.kafka),
            track_offsets=config.track_offsets,
        )
        self.producers.append(p)
        return cast("Producer", p)  # duck-typed: the calls of kstream.kafka.Producer

    def consumer(self, config: ClientConfig, poll_call: str | None = None) -> Consumer:
        c = SimConsumer(
            self.cluster,
            self.hooks,
            group_id=config.group_id,
            kafka=dict(config.kafka),
            poll_call=poll_call,
        )
        self.consumers.append(c)
        return cast("Consumer", c)  # duck-typed: the calls of kstream.kafka.Consumer

    def restore_consumer(self, config: ClientConfig) -> Consumer:
        return self.consumer(config)

    def global_consumer(self, config: ClientConfig) -> Consumer:
        # its polls have a hook of their own: the `global_poll` fault fails them alone
        return self.consumer(config, poll_call="consumer.poll_global")

    def admin(self, config: ClientConfig) -> Admin:
        return cast("Admin", SimAdmin(self.cluster, self.hooks))
