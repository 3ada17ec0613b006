"""An in-memory stand-in for `kstream.kafka.Producer`, over a `MockCluster`.

Transactions are atomic as on a broker: records and offsets sent in a transaction appear in
the cluster only on `commit()`. The cluster's armed faults (a failed commit, a fence, a timed
out transaction) surface as the same exceptions the real producer raises.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from kstream.errors import (
    ConfigError,
    KafkaClientError,
    ProduceError,
    ProducerFencedError,
    TransactionError,
)
from kstream.kafka.delivered import DeliveredOffsets
from kstream.kafka.errors import FatalTransactionError, TransactionAbortableError
from kstream.testing.mock_cluster import Header, MockCluster, MockMessage, Pending

__all__ = ["MockProducer"]


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
        self._tracked = DeliveredOffsets(track_offsets)
        self._fatal: KafkaClientError | None = None
        self.idempotent = idempotent or transactional_id is not None
        self.history: list[MockMessage] = []
        self._queue: list[Pending] = []
        self._txn: list[Pending] | None = None
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
        return self._tracked.take()

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
            if m.topic() in self._tracked.topics:
                self._tracked.delivered(m.topic(), m.partition(), m.offset())

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
            self._tracked.drop()

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
