"""Read a topic that kstream wrote, each record once.

On Apache Kafka a read_committed reader sees every committed record once: nothing is dropped
here. With the broker-compatibility component on (`broker_compat="tansu"`,
kstream.broker_compat) every record kstream produces carries a provenance id (`kstream.src`); a
batch retried after an abort writes the same ids again, and that broker shows the aborted
copies even to read_committed readers, so a reader that drops ids it has already seen gets
exactly the committed result. Records without an id are all passed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from kstream.errors import KStreamError
from kstream.kafka.consumer import to_end_settings
from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.records import Record
from kstream.serde import SerdeLike, deserialize_records, serde
from kstream.state.provenance import from_headers

__all__ = ["TopicReader", "read_unique"]


class TopicReader:
    """Reads every partition of `topic` from the beginning, dropping repeated provenance ids.

    Its fetches wait at most 10 ms for data (`to_end_settings`), so `read_to_end` sees the end
    at once.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        *,
        kafka: Mapping[str, Any] | None = None,
        client_supplier: ClientSupplier | None = None,
    ) -> None:
        """`client_supplier`: where its consumer comes from (Kafka's by default)."""
        self.topic = topic
        self.key_serde = serde(key_serde)
        self.value_serde = serde(value_serde)
        self.duplicates = 0
        self._seen: set[tuple[str, int, int, int]] = set()
        self._next: dict[int, int] = {}
        supplier = client_supplier or KafkaClientSupplier()
        self.consumer = supplier.consumer(ClientConfig(bootstrap_servers, to_end_settings(kafka)))
        parts = self.consumer.partitions_for(topic)
        if not parts:
            raise KStreamError(f"topic {topic!r} does not exist")
        self.partitions = parts
        self.consumer.assign([(topic, p, OFFSET_BEGINNING) for p in parts])

    def poll(self, timeout: float = 0.2, max_records: int = 10_000) -> list[Record]:
        """The new records (deserialized) that arrived, without repeats."""
        return self._records(self.consumer.consume_batch(max_records, timeout))

    def _records(self, msgs: list[Any]) -> list[Record]:
        out: list[Record] = []
        topic = self.topic
        for m in msgs:
            part, off = m.partition() or 0, m.offset() or 0
            self._next[part] = off + 1
            headers: Any = m.headers() or []
            prov = from_headers(headers)
            if prov is not None:
                pid = (prov.topic, prov.partition, prov.offset, prov.output_index)
                if pid in self._seen:
                    self.duplicates += 1
                    continue
                self._seen.add(pid)
            out.append(Record(m.key(), m.value(), m.timestamp()[1], headers, topic, part, off))
        bad = deserialize_records(out, self.key_serde, self.value_serde, topic=topic)
        if bad:
            raise bad[0].error
        return out

    def at_end(self) -> bool:
        """True when every partition reported its end at or past what was read."""
        for p in self.partitions:
            eof = self.consumer.eof_offset(self.topic, p)
            if eof is None or eof < self._next.get(p, 0):
                return False
        return True

    def read_to_end(self, idle_timeout: float = 30.0) -> list[Record]:
        """Everything up to the current end of every partition (from where `poll` got to)."""
        starts = {(self.topic, p): self._next.get(p, OFFSET_BEGINNING) for p in self.partitions}
        out: list[Record] = []
        try:
            for batch in read_to_end(self.consumer, starts, idle_timeout=idle_timeout):
                out += self._records(batch.messages)
        except ReadToEndTimeout:
            raise KStreamError(
                f"reading {self.topic!r}: no end reached in {idle_timeout:g}s"
            ) from None
        return out

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_unique(
    bootstrap_servers: str,
    topic: str,
    key_serde: SerdeLike = None,
    value_serde: SerdeLike = None,
) -> list[Record]:
    """Every record of `topic` up to its current end, each provenance id once."""
    with TopicReader(bootstrap_servers, topic, key_serde, value_serde) as r:
        return r.read_to_end()


def caught_up(
    bootstrap_servers: str,
    group: str,
    topic: str,
    timeout_s: float = 30.0,
    client_supplier: ClientSupplier | None = None,
) -> bool:
    """True when no record of `topic` lies at or after `group`'s committed offsets.

    The end is where fetching stops (partition EOF), never ListOffsets, so it holds on brokers
    whose ListOffsets LATEST is wrong, and past transaction markers, which take offsets but are
    never delivered.
    """
    from confluent_kafka import TopicPartition

    supplier = client_supplier or KafkaClientSupplier()
    with supplier.consumer(ClientConfig(bootstrap_servers, {}, group_id=group)) as meta:
        parts = meta.partitions_for(topic)
        committed = meta.committed([TopicPartition(topic, p) for p in parts])
    starts = {(topic, tp.partition): max(tp.offset, 0) for tp in committed}
    with supplier.consumer(ClientConfig(bootstrap_servers, to_end_settings(None))) as c:
        try:
            for batch in read_to_end(
                c, starts, max_records=1, poll_s=0.05, idle_timeout=None, timeout=timeout_s
            ):
                if batch.messages:
                    return False
        except ReadToEndTimeout:
            raise KStreamError(f"topic {topic!r}: no end in sight after {timeout_s:g}s") from None
    return True
