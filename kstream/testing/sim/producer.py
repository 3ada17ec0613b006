"""`SimProducer`: kstream's `Producer` interface over the simulated cluster.

It reports errors the way `kstream.kafka.Producer` does over librdkafka: fencing
(`ProducerFencedError`, and `fenced()` true from then on: librdkafka's fatal error), a
transaction the coordinator must see aborted (`TransactionAbortableError`, the producer stays
usable), a commit timeout (`FatalTransactionError`: kstream cannot retry it). Records are
written to the log when produced, inside the open transaction (so they take offsets and hold
the partition's last stable offset until the transaction ends), as librdkafka writes them
before the commit.
"""

from __future__ import annotations

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
from kstream.kafka.errors import TransactionAbortableError
from kstream.testing.sim.broker import SimKafka
from kstream.testing.sim.hooks import CallHooks
from kstream.testing.sim.metadata import parse_metadata

__all__ = ["SimProducer"]

#: librdkafka's default transaction.timeout.ms
DEFAULT_TXN_TIMEOUT_MS = 60_000


class SimProducer:
    """A plain, idempotent or transactional producer of one simulated instance."""

    def __init__(
        self,
        cluster: SimKafka,
        hooks: CallHooks,
        *,
        transactional_id: str | None = None,
        kafka: dict[str, Any] | None = None,
        track_offsets: Iterable[str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.hooks = hooks
        self.transactional_id = transactional_id
        self._tracked = DeliveredOffsets(track_offsets)
        self._fatal: KafkaClientError | None = None
        self._failure: str | None = None
        self._in_txn = False
        self._closed = False
        self._epoch = -1
        if transactional_id is not None:
            hooks.before("producer.init_transactions", self)
            timeout_ms = int((kafka or {}).get("transaction.timeout.ms", DEFAULT_TXN_TIMEOUT_MS))
            st = cluster.init_producer(transactional_id, timeout_ms / 1000)
            self._epoch = st.epoch

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def fenced(self) -> bool:
        return isinstance(self._fatal, ProducerFencedError)

    def is_fatal(self) -> bool:
        return self._fatal is not None

    def fail(self, error: KafkaClientError) -> None:
        """Make `error` the producer's fatal error (an injected fatal failure)."""
        self._fatal = error

    def take_offsets(self) -> dict[tuple[str, int], int]:
        return self._tracked.take()

    def fail_next_flush(self, message: str) -> None:
        """The next flush (at_least_once's commit) reports a delivery failure."""
        self._failure = message

    def __len__(self) -> int:
        return 0

    # --- producing ----------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> None:
        if self._closed:
            raise ProduceError(f"producing to topic {topic!r}: the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        self.hooks.before("producer.produce", self)
        if self.transactional and not self._in_txn:
            raise TransactionError(
                f"producing to topic {topic!r}: no open transaction "
                f"(transactional.id={self.transactional_id!r}); call begin() first",
                code="_STATE",
            )
        part = self.cluster.choose_partition(topic, key, partition)
        ts = timestamp if timestamp else self.cluster.clock.wall_ms()
        hdrs = list(headers) if headers else None
        txn = None
        if self.transactional_id is not None:
            try:
                txn = self.cluster.ongoing(self.transactional_id, self._epoch)
            except ProducerFencedError as e:
                # the write is refused; librdkafka reports it as the producer's fatal error,
                # which the next transactional call raises
                self._fatal = e
                return
        offset = self.cluster.append(topic, part, key, value, ts, hdrs, txn)
        if topic in self._tracked.topics:
            self._tracked.delivered(topic, part, offset)

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 30.0) -> None:
        self.hooks.before("producer.flush", self)
        self.raise_delivery_errors()

    def raise_delivery_errors(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise ProduceError(failure, code="_MSG_TIMED_OUT", retriable=True)

    # --- transactions -------------------------------------------------------------------

    def _txn_id(self, op: str) -> str:
        if self.transactional_id is None:
            raise ConfigError(f"Producer.{op}: this producer has no transactional_id")
        if self._fatal is not None:
            raise self._fatal
        return self.transactional_id

    def _fenced(self, e: ProducerFencedError) -> ProducerFencedError:
        self._fatal = e
        return e

    def begin(self) -> None:
        """Local, as in librdkafka: only a producer already in a fatal state fails."""
        self._txn_id("begin")
        self.hooks.before("producer.begin", self)
        if self._in_txn:
            raise TransactionError("beginning a transaction: one is already open", code="_STATE")
        self._in_txn = True

    def send_offsets(
        self, offsets: Sequence[TopicPartition], group_metadata: Any, timeout: float | None = None
    ) -> None:
        tid = self._txn_id("send_offsets")
        self.hooks.before("producer.send_offsets", self)
        if not self._in_txn:
            raise TransactionError("sending offsets: no open transaction", code="_STATE")
        group, member, generation = parse_metadata(group_metadata)
        try:
            txn = self.cluster.ongoing(tid, self._epoch)
        except ProducerFencedError as e:
            raise self._fenced(e) from None
        try:
            self.cluster.groups.check_member(group, member, generation)
        except KafkaClientError as e:
            raise TransactionAbortableError(
                f"sending offsets to the transaction (transactional.id={tid!r}): {e}",
                code=e.code,
                retriable=True,
            ) from None
        pending = txn.offsets.setdefault(group, {})
        for tp in offsets:
            pending[(tp.topic, tp.partition)] = tp.offset

    def commit(self, timeout: float | None = None) -> None:
        tid = self._txn_id("commit")
        if not self._in_txn:
            raise TransactionError("committing a transaction: none is open", code="_STATE")
        self.hooks.before("producer.commit", self)
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise TransactionAbortableError(
                f"committing a transaction: {failure}", code="_MSG_TIMED_OUT", retriable=True
            )
        try:
            self.cluster.end_transaction(tid, self._epoch, commit=True)
        except ProducerFencedError as e:
            raise self._fenced(e) from None
        self._in_txn = False

    def abort(self, timeout: float | None = None) -> None:
        """The transaction is over even if the abort raises, as with the real producer."""
        try:
            tid = self._txn_id("abort")
            self.hooks.before("producer.abort", self)
            try:
                self.cluster.end_transaction(tid, self._epoch, commit=False)
            except ProducerFencedError as e:
                raise self._fenced(e) from None
        finally:
            self._in_txn = False
            self._tracked.drop()

    def close(self, timeout: float = 30.0, *, drop_undelivered: bool = False) -> None:
        if self._closed or self.hooks.dead:
            self._closed = True
            return
        if self._in_txn and self._fatal is None:
            try:
                self.abort(timeout)
            except Exception:
                pass
        self._in_txn = False
        self._closed = True
