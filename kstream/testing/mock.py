"""In-memory stand-ins for `kstream.kafka.Producer` and `Consumer`, for users' unit tests.

They share a `MockCluster` (topics, partitions, committed group offsets) and follow the real
clients' method names and return shapes, so code written against the real clients runs
unchanged: messages have `topic()`, `partition()`, `offset()`, `key()`, `value()`,
`headers()`, `timestamp()` and `error()`. Keyed records land where the real producer puts them
(murmur2). Transactions are atomic: records and offsets appear only on `commit()`.
Nothing blocks: `consume_batch` returns what is there and never waits for its timeout.

The cluster also injects the faults a real one has (`fail_next_commit`, `fence`,
`drop_connection`, `time_out_transactions`), so failure handling is testable in milliseconds;
`kstream.testing.MockClientSupplier` runs a whole `App` on these clients.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, TopicPartition

from kstream.errors import (
    ConfigError,
    KafkaClientError,
    ProduceError,
    ProducerFencedError,
    TopicError,
    TransactionError,
)
from kstream.kafka.errors import FatalTransactionError, TransactionAbortableError
from kstream.kafka.partitioner import default_partition

__all__ = ["MockCluster", "MockConsumer", "MockGroupMetadata", "MockMessage", "MockProducer"]

CREATE_TIME = 1
Header = tuple[str, bytes | None]


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


_Pending = tuple[str, int | None, bytes | None, bytes | None, int, Any]


class MockProducer:
    """In-memory `kstream.kafka.Producer`.

    `history` lists every record made visible, in order. `fail_next_flush(message)` makes the
    next `flush()` raise `ProduceError`, to test delivery-failure handling.
    """

    def __init__(
        self,
        cluster: MockCluster | None = None,
        *,
        transactional_id: str | None = None,
        idempotent: bool = False,
        track_offsets: Iterable[str] | None = None,
        **_ignored: Any,
    ) -> None:
        self.cluster = cluster if cluster is not None else MockCluster()
        self.transactional_id = transactional_id
        self._tracked = frozenset(track_offsets or ())
        self._offsets: dict[tuple[str, int], int] = {}
        self._fatal: KafkaClientError | None = None
        self.idempotent = idempotent or transactional_id is not None
        self.history: list[MockMessage] = []
        self._queue: list[_Pending] = []
        self._txn: list[_Pending] | None = None
        self._txn_offsets: list[tuple[str, list[TopicPartition]]] = []
        self._failure: str | None = None
        self._closed = False
        self._epoch = (
            self.cluster._new_epoch(transactional_id) if transactional_id is not None else -1
        )

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def in_transaction(self) -> bool:
        return self._txn is not None

    def fenced(self) -> bool:
        """Another producer with the transactional id took over."""
        return isinstance(self._fatal, ProducerFencedError)

    def is_fatal(self) -> bool:
        """Fenced, or its transaction timed out: the producer must be replaced."""
        return self._fatal is not None

    def take_offsets(self) -> dict[tuple[str, int], int]:
        """Highest delivered offset per partition of the tracked topics since the last call."""
        out, self._offsets = self._offsets, {}
        return out

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> None:
        if self._closed:
            raise ProduceError(f"producing to topic {topic!r}: the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        if self.transactional and self._txn is None:
            raise TransactionError(
                f"producing to topic {topic!r}: no open transaction "
                f"(transactional.id={self.transactional_id!r}); call begin() first",
                code="_STATE",
            )
        ts = timestamp if timestamp else int(time.time() * 1000)
        rec = (topic, partition, key, value, ts, list(headers) if headers else None)
        if partition is not None:
            parts = self.cluster.partitions(topic)
            if parts and not 0 <= partition < parts:
                raise ProduceError(
                    f"producing to topic {topic!r} partition {partition}: the topic has "
                    f"{parts} partition(s)",
                    code="_UNKNOWN_PARTITION",
                )
        (self._txn if self._txn is not None else self._queue).append(rec)

    def poll(self, timeout: float = 0.0) -> int:
        n = self._deliver()
        return n

    def _deliver(self) -> int:
        queued, self._queue = self._queue, []
        self._delivered(self.cluster._append(queued))
        return len(queued)

    def _delivered(self, msgs: list[MockMessage]) -> None:
        self.history.extend(msgs)
        for m in msgs:
            if m.topic() in self._tracked:
                tp = (m.topic(), m.partition())
                self._offsets[tp] = max(self._offsets.get(tp, -1), m.offset())

    def flush(self, timeout: float = 30.0) -> None:
        self._deliver()
        self.raise_delivery_errors()

    def raise_delivery_errors(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise ProduceError(failure, code="_MSG_TIMED_OUT", retriable=True)

    def fail_next_flush(self, message: str = "delivery failed (injected by the test)") -> None:
        """Make the next `flush()` (or commit) raise `ProduceError(message)`."""
        self._failure = message

    def __len__(self) -> int:
        return len(self._queue)

    # -- transactions ----------------------------------------------------------------------

    def _require_txn(self, op: str) -> str:
        if self.transactional_id is None:
            raise ConfigError(f"Producer.{op}: this producer has no transactional_id")
        if self._fatal is not None:
            raise self._fatal
        try:
            self.cluster._check_epoch(self.transactional_id, self._epoch)
        except ProducerFencedError as e:
            self._fatal = e
            raise
        return self.transactional_id

    def begin(self) -> None:
        self._require_txn("begin")
        if self._txn is not None:
            raise TransactionError("beginning a transaction: one is already open", code="_STATE")
        self._txn, self._txn_offsets = [], []
        with self.cluster._lock:
            self.cluster._open_txns.add((self.transactional_id or "", self._epoch))

    def send_offsets(
        self, offsets: Sequence[TopicPartition], group_metadata: Any, timeout: float | None = None
    ) -> None:
        self._require_txn("send_offsets")
        if self._txn is None:
            raise TransactionError("sending offsets: no open transaction", code="_STATE")
        group = getattr(group_metadata, "group_id", None)
        if not isinstance(group, str):
            raise ConfigError(
                f"send_offsets: expected MockConsumer.consumer_group_metadata(), got "
                f"{group_metadata!r}"
            )
        copied = [TopicPartition(t.topic, t.partition, t.offset) for t in offsets]
        self._txn_offsets.append((group, copied))

    def commit(self, timeout: float | None = None) -> None:
        """Make the transaction's records and offsets visible at once."""
        self._require_txn("commit")
        if self._txn is None:
            raise TransactionError("committing a transaction: none is open", code="_STATE")
        key = (self.transactional_id or "", self._epoch)
        with self.cluster._lock:
            timed_out = key in self.cluster._timed_out
            self.cluster._timed_out.discard(key)
        if timed_out:
            self._txn, self._txn_offsets = None, []
            self._fatal = FatalTransactionError(
                f"committing a transaction (transactional.id={self.transactional_id!r}): "
                "the broker aborted it after transaction.timeout.ms",
                code="TRANSACTION_TIMED_OUT",
            )
            raise self._fatal
        if self._failure is None and self.cluster._take_commit_failure():
            self._failure = "COORDINATOR_NOT_AVAILABLE (injected by the test)"
        if self._failure is not None:
            # as with the real producer, the transaction stays open: the caller aborts it
            failure, self._failure = self._failure, None
            raise TransactionAbortableError(
                f"committing a transaction: {failure}", code="_MSG_TIMED_OUT", retriable=True
            )
        records, self._txn = self._txn, None
        with self.cluster._lock:
            self.cluster._open_txns.discard(key)
            self._delivered(self.cluster._append(records))
            for group, offsets in self._txn_offsets:
                self.cluster._commit(group, offsets)
        self._txn_offsets = []

    def abort(self, timeout: float | None = None) -> None:
        """Drop the transaction's records and offsets (the transaction is over even if the
        abort raises, as with the real producer)."""
        try:
            self._require_txn("abort")
        finally:
            with self.cluster._lock:
                self.cluster._open_txns.discard((self.transactional_id or "", self._epoch))
            self._txn, self._txn_offsets = None, []
            self._offsets = {}

    def close(self, timeout: float = 30.0, *, drop_undelivered: bool = False) -> None:
        if self._txn is not None:
            self._txn, self._txn_offsets = None, []
        if not self._closed and self._fatal is None:
            try:
                self.flush(timeout)
            except ProduceError:
                if not drop_undelivered:
                    raise
        self._closed = True

    def __enter__(self) -> MockProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RebalanceCallback = Callable[[list[TopicPartition]], None]


class MockConsumer:
    """In-memory `kstream.kafka.Consumer`: the only member of its group.

    `subscribe` assigns every partition of the topics (on the next `consume_batch`, where
    the real consumer runs rebalance callbacks too). Reading starts at the group's committed
    offset, or at the beginning.
    """

    _ids = itertools.count()

    def __init__(
        self,
        cluster: MockCluster | None = None,
        *,
        group_id: str | None = None,
        partition_eof: bool = True,
        **_ignored: Any,
    ) -> None:
        self.cluster = cluster if cluster is not None else MockCluster()
        self.group_id = group_id
        self._group = group_id or f"mock-unmanaged-{next(self._ids)}"
        self._track_eof = partition_eof
        self._positions: dict[tuple[str, int], int] = {}
        self._paused: set[tuple[str, int]] = set()
        self._eof: dict[tuple[str, int], int] = {}
        self._eof_reported: dict[tuple[str, int], int] = {}
        self._subscription: list[str] | None = None
        self._callbacks: tuple[RebalanceCallback | None, RebalanceCallback | None] = (None, None)
        self._pending_rebalance = False
        self._closed = False

    # -- assignment ------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        if self.group_id is None:
            raise ConfigError("Consumer.subscribe needs a group_id; use assign() without one")
        self._subscription = list(topics)
        self._callbacks = (on_assign, on_revoke)
        self._pending_rebalance = True

    def unsubscribe(self) -> None:
        """Leave the subscription: the partitions are revoked (on_revoke runs now)."""
        _, on_revoke = self._callbacks
        old = [TopicPartition(t, p) for t, p in self._positions]
        if old and on_revoke is not None:
            on_revoke(old)
        self._subscription = None
        self._pending_rebalance = False
        self.unassign()

    def _rebalance(self) -> None:
        self._pending_rebalance = False
        on_assign, on_revoke = self._callbacks
        old = [TopicPartition(t, p) for t, p in self._positions]
        if old and on_revoke is not None:
            on_revoke(old)
        self._positions.clear()
        self._eof.clear()
        self._eof_reported.clear()
        new = [
            TopicPartition(t, p)
            for t in self._subscription or []
            for p in range(self.cluster.partitions(t))
        ]
        before = dict(self._positions)
        if on_assign is not None:
            on_assign(new)
        if self._positions == before:  # on_assign did not call assign(): apply it
            self.assign(new)

    def assign(self, partitions: Iterable[TopicPartition | tuple[Any, ...]]) -> None:
        self._positions.clear()
        self._eof.clear()
        self._eof_reported.clear()
        for p in partitions:
            tp = _tp(p)
            self._positions[(tp.topic, tp.partition)] = self._start(tp)

    def _start(self, tp: TopicPartition) -> int:
        off = tp.offset
        if off is None or off < 0:
            if off == OFFSET_END:
                return self.cluster.end_offset(tp.topic, tp.partition)
            committed = self.cluster.committed(self._group, tp.topic, tp.partition)
            if committed is not None and off != OFFSET_BEGINNING:
                return committed
            return 0
        return int(off)

    def unassign(self) -> None:
        self._positions.clear()
        self._eof.clear()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._positions]

    # -- consuming -------------------------------------------------------------------------

    def consume_batch(self, max_records: int, timeout_s: float) -> list[MockMessage]:
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self.cluster._take_dropped_poll():
            raise KafkaClientError(
                "consuming: _TRANSPORT: connection to the broker dropped (injected by the test)",
                code="_TRANSPORT",
                retriable=True,
            )
        if self._pending_rebalance:
            self._rebalance()
        out: list[MockMessage] = []
        for key, pos in list(self._positions.items()):
            if key in self._paused:
                continue
            msgs = self.cluster.messages(*key)
            take = msgs[pos : pos + max_records - len(out)]
            out.extend(take)
            pos += len(take)
            self._positions[key] = pos
            if pos >= len(msgs) and self._track_eof and self._eof_reported.get(key) != pos:
                self._eof[key] = pos
                self._eof_reported[key] = pos
            if len(out) >= max_records:
                break
        return out

    def eof_offset(self, topic: str, partition: int) -> int | None:
        return self._eof.get((topic, partition))

    def high_watermark(self, topic: str, partition: int) -> int | None:
        if (topic, partition) not in self._positions:
            return self._eof.get((topic, partition))
        return self.cluster.end_offset(topic, partition)

    def get_watermark_offsets(
        self, tp: TopicPartition, cached: bool = True, timeout: float | None = None
    ) -> tuple[int, int] | None:
        return (0, self.cluster.end_offset(tp.topic, tp.partition))

    # -- positions -------------------------------------------------------------------------

    def seek(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        if key not in self._positions:
            raise TopicError(
                f"seeking topic={topic!r} partition={partition}: partition is not assigned",
                code="_STATE",
            )
        self._eof.pop(key, None)
        self._eof_reported.pop(key, None)
        self._positions[key] = offset

    def position(
        self, partitions: Iterable[TopicPartition | tuple[str, int]]
    ) -> list[TopicPartition]:
        out = []
        for p in partitions:
            tp = _tp(p)
            pos = self._positions.get((tp.topic, tp.partition), OFFSET_INVALID)
            out.append(TopicPartition(tp.topic, tp.partition, pos))
        return out

    def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> list[TopicPartition]:
        out = []
        for p in partitions:
            tp = _tp(p)
            off = self.cluster.committed(self._group, tp.topic, tp.partition)
            off = OFFSET_INVALID if off is None else off
            out.append(TopicPartition(tp.topic, tp.partition, off))
        return out

    def commit(
        self, offsets: Iterable[TopicPartition | tuple[str, int, int]] | None = None
    ) -> None:
        if self.group_id is None:
            raise ConfigError("Consumer.commit needs a group_id")
        if offsets is None:
            tps = [TopicPartition(t, p, o) for (t, p), o in self._positions.items()]
        else:
            tps = [_tp(o) for o in offsets]
        if self.cluster._take_commit_failure():
            raise KafkaClientError(
                "committing offsets: COORDINATOR_NOT_AVAILABLE (injected by the test)",
                code="COORDINATOR_NOT_AVAILABLE",
                retriable=True,
            )
        self.cluster._commit(self._group, tps)

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for p in partitions:
            tp = _tp(p)
            self._paused.add((tp.topic, tp.partition))

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for p in partitions:
            tp = _tp(p)
            self._paused.discard((tp.topic, tp.partition))

    def consumer_group_metadata(self) -> MockGroupMetadata:
        return MockGroupMetadata(self._group)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        return list(range(self.cluster.partitions(topic)))

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> MockConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tp(p: TopicPartition | tuple[Any, ...]) -> TopicPartition:
    if isinstance(p, TopicPartition):
        return p
    if len(p) == 2:
        return TopicPartition(p[0], p[1])
    if len(p) == 3:
        return TopicPartition(p[0], p[1], p[2])
    raise ConfigError(f"expected TopicPartition or (topic, partition[, offset]), got {p!r}")
