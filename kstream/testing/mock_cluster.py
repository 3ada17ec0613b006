"""The in-memory cluster behind the mock clients: topics, partitions, committed group offsets,
transactional ids and their epochs, and the faults a test asks it to inject.

`MockCluster` is what a test holds on to: it creates topics, reads what was written, checks
committed offsets, and arms faults (`fail_next_commit`, `fence`, `drop_connection`,
`time_out_transactions`) that the next client call hits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from kstream.errors import ConfigError, ProduceError, ProducerFencedError, TopicError
from kstream.kafka.partitioner import default_partition

__all__ = ["MockCluster", "MockGroupMetadata", "MockMessage"]

CREATE_TIME = 1
Header = tuple[str, bytes | None]
# a record produced and not yet appended: (topic, partition, key, value, timestamp, headers)
Pending = tuple[str, int | None, bytes | None, bytes | None, int, Any]


class MockMessage:
    """A consumed record, shaped like confluent-kafka's `Message`."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: list[Header] | None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._timestamp = timestamp
        self._headers = headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[Header] | None:
        return None if self._headers is None else list(self._headers)

    def timestamp(self) -> tuple[int, int]:
        return (CREATE_TIME, self._timestamp)

    def error(self) -> KafkaError | None:
        return None

    def __len__(self) -> int:
        return len(self._value or b"")

    def __repr__(self) -> str:
        return (
            f"MockMessage({self._topic}[{self._partition}]@{self._offset}, "
            f"key={self._key!r}, value={self._value!r:.60})"
        )


@dataclass(frozen=True)
class MockGroupMetadata:
    """What `consumer_group_metadata()` returns; `MockProducer.send_offsets` takes it."""

    group_id: str


class MockCluster:
    """Topics and committed offsets shared by mock clients.

    Topics are created on first produce with `default_partitions` partitions, as a broker
    with auto-creation would; create them explicitly to choose the count.
    """

    def __init__(self, default_partitions: int = 1) -> None:
        self.default_partitions = default_partitions
        self._topics: dict[str, list[list[MockMessage]]] = {}
        self._committed: dict[tuple[str, str, int], int] = {}
        self._fencing: dict[str, int] = {}
        self._round_robin: dict[str, int] = {}
        self._lock = threading.RLock()
        self._failing_commits = 0
        self._dropped_polls = 0
        self._timed_out: set[tuple[str, int]] = set()
        self._open_txns: set[tuple[str, int]] = set()
        self._log_start: dict[tuple[str, int], int] = {}

    # -- fault injection -------------------------------------------------------------------

    def fail_next_commit(self, times: int = 1) -> None:
        """The next `times` commits fail retriably: a transaction is aborted and its commit
        raises `TransactionAbortableError`; a consumer's offset commit raises
        `KafkaClientError` (COORDINATOR_NOT_AVAILABLE) and stores nothing."""
        with self._lock:
            self._failing_commits += times

    def fence(self, transactional_id: str) -> None:
        """Fence the producer with `transactional_id`, as a new one with the id would: its
        next transactional call raises `ProducerFencedError`."""
        self._new_epoch(transactional_id)

    def drop_connection(self, polls: int = 1) -> None:
        """The next `polls` calls to `consume_batch` (of any consumer) raise a retriable
        `KafkaClientError` (_TRANSPORT), as when the connection to the broker drops."""
        with self._lock:
            self._dropped_polls += polls

    def time_out_transactions(self) -> None:
        """Abort every open transaction, as the broker does past `transaction.timeout.ms`:
        its producer's next commit raises `FatalTransactionError` and the producer is
        unusable (kstream treats a commit timeout as fatal, see `kstream.kafka.Producer`)."""
        with self._lock:
            self._timed_out |= self._open_txns
            self._open_txns.clear()

    def _take_commit_failure(self) -> bool:
        with self._lock:
            if self._failing_commits <= 0:
                return False
            self._failing_commits -= 1
            return True

    def _take_dropped_poll(self) -> bool:
        with self._lock:
            if self._dropped_polls <= 0:
                return False
            self._dropped_polls -= 1
            return True

    def create_topic(self, name: str, partitions: int = 1) -> bool:
        """Create a topic; False (and no change) if it exists with the same count."""
        with self._lock:
            have = self._topics.get(name)
            if have is not None:
                if len(have) != partitions:
                    raise TopicError(
                        f"topic {name!r} already exists with {len(have)} partitions, "
                        f"but {partitions} were requested"
                    )
                return False
            if partitions < 1:
                raise ConfigError(f"topic {name!r}: partitions must be >= 1, got {partitions}")
            self._topics[name] = [[] for _ in range(partitions)]
            return True

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._topics)

    def partitions(self, topic: str) -> int:
        with self._lock:
            parts = self._topics.get(topic)
            return 0 if parts is None else len(parts)

    def messages(self, topic: str, partition: int | None = None) -> list[MockMessage]:
        """Every record of a topic (or one partition), in offset order per partition."""
        with self._lock:
            parts = self._topics.get(topic, [])
            if partition is not None:
                return list(parts[partition]) if partition < len(parts) else []
            return [m for p in parts for m in p]

    def end_offset(self, topic: str, partition: int) -> int:
        with self._lock:
            parts = self._topics.get(topic)
            if parts is None or partition >= len(parts):
                return 0
            return len(parts[partition])

    def delete_records(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """DeleteRecords: move each partition's start offset up to the offset given (never
        down, never past its end); the new start offsets. `start_offset` is what a test of a
        purge looks at; `messages` still lists the records below it."""
        out: dict[tuple[str, int], int] = {}
        with self._lock:
            for (topic, partition), offset in offsets.items():
                parts = self._topics.get(topic)
                if parts is None or not 0 <= partition < len(parts):
                    raise TopicError(f"deleting records of {topic}[{partition}]: no such partition")
                end = len(parts[partition])
                start = max(self._log_start.get((topic, partition), 0), min(offset, end))
                self._log_start[(topic, partition)] = out[(topic, partition)] = start
        return out

    def start_offset(self, topic: str, partition: int) -> int:
        """The partition's start offset (low watermark): 0 until records were deleted."""
        with self._lock:
            return self._log_start.get((topic, partition), 0)

    def committed(self, group_id: str, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._committed.get((group_id, topic, partition))

    def _append(
        self, records: Sequence[tuple[str, int | None, bytes | None, bytes | None, int, Any]]
    ) -> list[MockMessage]:
        out = []
        with self._lock:
            for topic, partition, key, value, ts, headers in records:
                if topic not in self._topics:
                    self.create_topic(topic, self.default_partitions)
                parts = self._topics[topic]
                if partition is None:
                    if key is not None:
                        partition = default_partition(key, len(parts))
                    else:
                        partition = self._round_robin.get(topic, 0) % len(parts)
                        self._round_robin[topic] = partition + 1
                if not 0 <= partition < len(parts):
                    raise ProduceError(
                        f"producing to topic {topic!r} partition {partition}: the topic has "
                        f"{len(parts)} partition(s)",
                        code="_UNKNOWN_PARTITION",
                    )
                msg = MockMessage(topic, partition, len(parts[partition]), key, value, ts, headers)
                parts[partition].append(msg)
                out.append(msg)
        return out

    def _commit(self, group_id: str, offsets: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in offsets:
                self._committed[(group_id, tp.topic, tp.partition)] = tp.offset

    def _new_epoch(self, transactional_id: str) -> int:
        with self._lock:
            epoch = self._fencing.get(transactional_id, -1) + 1
            self._fencing[transactional_id] = epoch
            return epoch

    def _check_epoch(self, transactional_id: str, epoch: int) -> None:
        with self._lock:
            if self._fencing.get(transactional_id) != epoch:
                raise ProducerFencedError(
                    f"transactional.id={transactional_id!r}: PRODUCER_FENCED (a newer producer "
                    "with the same transactional.id took over)",
                    code="PRODUCER_FENCED",
                )


def _tp(p: TopicPartition | tuple[Any, ...]) -> TopicPartition:
    if isinstance(p, TopicPartition):
        return p
    if len(p) == 2:
        return TopicPartition(p[0], p[1])
    if len(p) == 3:
        return TopicPartition(p[0], p[1], p[2])
    raise ConfigError(f"expected TopicPartition or (topic, partition[, offset]), got {p!r}")
