"""Global stores: every instance holds all partitions of each global table.

A consumer without a group is assigned every partition of the global topics from the start,
reads them to their end (partition EOF, never ListOffsets) before the stream thread processes
anything, and then takes what arrived between batches, so lookups see a table that is at most
one batch behind.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from kstream.config import Config
from kstream.errors import StoreError
from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.records import KAFKA_TIMESTAMP_TYPES, Headers, Record
from kstream.topology.compiled import CompiledTopology
from kstream.topology.task import Task

log = logging.getLogger("kstream.runtime")


class _NoOutput:
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        raise StoreError(f"a global store processor may not forward records (to {topic!r})")

    def partitions_for(self, topic: str) -> int:
        return 1


class GlobalStores:
    """The instance's global stores and the consumer that keeps them current."""

    def __init__(
        self,
        compiled: CompiledTopology,
        config: Config,
        app_id: str,
        bootstrap_servers: str,
        client_supplier: ClientSupplier | None = None,
        kafka: Mapping[str, Any] | None = None,
    ) -> None:
        """`kafka`: the consumer's librdkafka settings (default `config.kafka`; the stream
        thread passes its own consumer's, whose fetch wait matches the batch wait)."""
        self.task = Task(
            compiled,
            None,
            0,
            collector=_NoOutput(),
            app_id=app_id,
            state_dir=config.state_dir,
            default_backend=config.default_backend,
        )
        self.views: dict[str, Any] = {n: s.read_only() for n, s in self.task.stores.items()}
        supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
        self.consumer = supplier.global_consumer(
            ClientConfig(
                bootstrap_servers,
                dict(config.kafka if kafka is None else kafka),
                config.connect_timeout,
            )
        )
        self._tps: list[tuple[str, int]] = []
        for topic in compiled.global_topics:
            parts = self.consumer.partitions_for(topic)
            if not parts:
                raise StoreError(f"global table topic {topic!r} does not exist")
            self._tps += [(topic, p) for p in parts]
        self._batch = config.batch_max_records

    def bootstrap(self, stop: Any = None, idle_timeout: float = 60.0) -> None:
        """Assign every global partition from its beginning and read it to its end (partition
        EOF: kstream.kafka.read_to_end) before processing starts; `poll` follows from there."""
        starts = dict.fromkeys(self._tps, OFFSET_BEGINNING)
        try:
            for batch in read_to_end(
                self.consumer,
                starts,
                max_records=self._batch,
                poll_s=0.2,
                idle_timeout=idle_timeout,
                stop=stop,
            ):
                self._apply(batch.messages)
        except ReadToEndTimeout:
            raise StoreError(
                f"global stores: no progress reading {self._tps} for {idle_timeout:g}s"
            ) from None

    def poll(self, timeout: float = 0.0) -> int:
        """Apply what has arrived; returns the number of records."""
        return self._apply(self.consumer.consume_batch(self._batch, timeout))

    def _apply(self, msgs: list[Any]) -> int:
        if not msgs:
            return 0
        by_topic: dict[str, list[Record]] = {}
        for m in msgs:
            topic, part, off = m.topic() or "", m.partition() or 0, m.offset() or 0
            by_topic.setdefault(topic, []).append(_record(m, topic, part, off))
        for recs in by_topic.values():
            self.task.process(recs)
        self.task.flush_stores()
        return len(msgs)

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.task.close()


def _headers(m: Any) -> Any:
    return m.headers() or ()


def _record(m: Any, topic: str, part: int, off: int) -> Record:
    """A global topic's message as a record, its timestamp type kept (LogAppendTime: the
    broker's time)."""
    ts_type, ts = m.timestamp()
    return Record(
        m.key(), m.value(), ts, _headers(m), topic, part, off, KAFKA_TIMESTAMP_TYPES[ts_type]
    )
