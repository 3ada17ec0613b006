"""Reading a topic as any Kafka client does: a plain confluent-kafka consumer, read_committed.

Only confluent_kafka and the standard library: what a dead-letter topic holds as a team's own
reader sees it, not what kstream's reader makes of it. No group offsets are committed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

__all__ = ["Committed", "partition_count", "read_committed"]


@dataclass(frozen=True)
class Committed:
    """One committed record as read, with where it sits."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes | None]


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )


def partition_count(bootstrap: str, topic: str) -> int | None:
    """The topic's partition count as the cluster's metadata gives it (None: no such topic)."""
    c = _consumer(bootstrap)
    try:
        t = c.list_topics(topic, timeout=10).topics.get(topic)
        return len(t.partitions) if t is not None and t.error is None and t.partitions else None
    finally:
        c.close()


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Committed]:
    """Every committed record of every partition of `topic`, from the beginning up to each
    partition's end as a read_committed reader sees it (its last stable offset)."""
    c = _consumer(bootstrap)
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            raise AssertionError(f"topic {topic!r} not found at {bootstrap}")
        parts = sorted(md.partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Committed] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic!r}: partitions {sorted(set(parts) - at_end)} unread")
            for m in c.consume(500, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise AssertionError(f"reading {topic!r}: {err}")
                at_end.discard(m.partition())
                out.append(
                    Committed(
                        m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or ())
                    )
                )
        return out
    finally:
        c.close()
