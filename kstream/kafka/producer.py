"""Producer: plain, idempotent or transactional, with delivery errors that always surface.

librdkafka reports a failed delivery only to a callback; a producer that never looks loses
records silently. Here every failure is recorded and raised from the next `flush()` (and
`poll()`), so at-least-once code that flushes before committing offsets cannot skip a loss.
Only failures produce callbacks (`delivery.report.only.error`), keeping the hot path cheap.

Keys are placed with `murmur2_random`, Kafka's Java default, so a key lands on the partition
`kstream.kafka.partitioner.default_partition` computes.

This is the one producer of the library: the runtime, the Spark sink and the service use it.
The runtime also needs the offsets its changelog records got (a store's checkpoint is the next
changelog offset to read on restore): `track_offsets` names those topics, which turns on a
delivery report for every record and keeps the highest offset per partition (`take_offsets`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka import Producer as _RawProducer

from kstream.duration import DurationLike
from kstream.errors import ConfigError, KafkaClientError, ProduceError, TopicError
from kstream.kafka.client import ErrorLog, build_config, check_connected, connect_timeout_s
from kstream.kafka.deadline import Deadline
from kstream.kafka.delivered import DeliveredOffsets
from kstream.kafka.errors import FatalTransactionError, TransactionAbortableError, map_error
from kstream.kafka.roles import client_config

__all__ = ["DeliveryFailure", "Producer"]

# confluent-kafka's produce() takes (topic, value, key, partition, on_delivery, callback,
# timestamp, headers); called with all eight positionally it skips building and matching
# keywords, 0.25-0.35 us of its 0.8-1.1 us per call (measured on a queue-only producer).
# Partition -1 is librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner chooses. A None
# callback leaves the producer's own delivery callback in charge, as an omitted one does.
UNASSIGNED = -1

PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "acks": "all",
}


class DeliveryFailure:
    """One record that could not be delivered: where it was going and why."""

    __slots__ = ("error", "key", "partition", "topic")

    def __init__(self, error: KafkaError, topic: str, partition: int, key: bytes | None) -> None:
        self.error = error
        self.topic = topic
        self.partition = partition
        self.key = key

    def __str__(self) -> str:
        return (
            f"topic={self.topic!r} partition={self.partition} key={self.key!r:.60}: "
            f"{self.error.name()}: {self.error.str()}"
        )


class Producer:
    """A Kafka producer.

    `transactional_id` makes it transactional (and idempotent); `init_transactions` runs in
    the constructor. `idempotent=True` alone gives per-partition exactly-once delivery without
    transactions. `kafka` holds librdkafka settings (including security), applied over the
    defaults (settings only a consumer takes are left out); `connect_timeout` bounds the
    start-up check. `track_offsets` names the topics whose delivered offsets `take_offsets`
    reports.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        kafka: Mapping[str, Any] | None = None,
        transactional_id: str | None = None,
        idempotent: bool = False,
        connect_timeout: DurationLike | None = None,
        transaction_timeout: DurationLike = 30_000,
        client_id: str | None = None,
        track_offsets: Collection[str] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.transactional_id = transactional_id
        self._tracked = DeliveredOffsets(track_offsets)
        self._errors = ErrorLog()
        self._failures: list[DeliveryFailure] = []
        self._failed_total = 0
        # Re-entrant: delivery callbacks take it, and librdkafka may serve them from inside a
        # call made while it is held (a signal handler closing the producer mid-callback).
        self._lock = threading.RLock()
        self._timeout = connect_timeout_s(connect_timeout)
        self._txn_timeout = connect_timeout_s(transaction_timeout)
        forced: dict[str, Any] = {
            "on_delivery": self._on_delivery,
            "delivery.report.only.error": not self._tracked.topics,
        }
        if transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise ConfigError(
                    f"transactional_id must be a non-empty string, got {transactional_id!r}"
                )
            forced["transactional.id"] = transactional_id
            forced["enable.idempotence"] = True
        elif idempotent:
            forced["enable.idempotence"] = True
        if client_id:
            forced["client.id"] = client_id
        conf = build_config(
            bootstrap_servers,
            client_config("producer", kafka),
            defaults=PRODUCER_DEFAULTS,
            forced=forced,
            errors=self._errors,
            where="Producer",
        )
        try:
            self._p = _RawProducer(conf)
        except KafkaException as e:
            raise ConfigError(f"Producer: invalid kafka settings: {e}") from None
        # The client's own produce, for a caller that queues a record per call (the runtime's
        # sink): one Python call fewer per record. It takes confluent-kafka's eight positional
        # arguments (see UNASSIGNED: partition -1 or a number, None, None, timestamp an int,
        # headers a list or None), and the caller falls back to `produce` when it raises,
        # which retries a full queue and turns errors into kstream's.
        self.client_produce = self._p.produce
        # the calls that wait on the broker, each with a deadline (kstream.kafka.deadline)
        self._calls = Deadline(transactional_id or client_id or "producer")
        check_connected(self._p, bootstrap_servers, self._timeout, self._errors, "Producer")
        self._in_txn = False
        if transactional_id is not None:
            try:
                self._call(
                    f"initialising transactions for transactional.id={transactional_id!r}",
                    self._txn_timeout,
                    self._p.init_transactions,
                    self._txn_timeout,
                )
            except KafkaException as e:
                raise map_error(
                    e,
                    f"initialising transactions for transactional.id={transactional_id!r}",
                    transactional=True,
                ) from None

    @property
    def raw(self) -> _RawProducer:
        """The underlying confluent-kafka Producer (its callbacks belong to this object)."""
        return self._p

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def fenced(self) -> bool:
        """The fatal error was fencing: another producer owns the transactional id now."""
        err = self._errors.fatal()
        return err is not None and err.code() in _FENCED_CODES

    def is_fatal(self) -> bool:
        """The producer hit a fatal error (fenced, or unusable) or was abandoned in a stuck
        call (`stuck`), and must be replaced."""
        return self._calls.stuck is not None or self._errors.fatal() is not None

    @property
    def stuck(self) -> str | None:
        """What the call this producer was abandoned in was doing (it outlived its deadline,
        kstream.kafka.deadline), or None: every later call raises `ClientStuckError`."""
        return self._calls.stuck

    def _call(self, doing: str, timeout_s: float, fn: Any, *args: Any) -> Any:
        """`fn(*args)`, a librdkafka call that waits on the broker up to `timeout_s`, abandoned
        (ClientStuckError) if it has not returned by its deadline."""
        return self._calls.call(doing, timeout_s, fn, *args)

    # -- producing -------------------------------------------------------------------------

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            topic = msg.topic()
            if topic in self._tracked.topics:
                off = msg.offset()
                if off is not None:
                    self._tracked.delivered(topic, msg.partition(), off)  # type: ignore[arg-type]
            return
        with self._lock:
            self._failed_total += 1
            if len(self._failures) < 100:
                part = msg.partition()
                self._failures.append(
                    DeliveryFailure(
                        err, msg.topic() or "?", -1 if part is None else part, msg.key()
                    )
                )

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
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> None:
        """Queue one record; a full local queue is drained (poll) and the call retried.

        The runtime calls this once per output record: the common case runs first, without
        the retry loop around it.
        """
        # the runtime passes a fresh list per record: hand it over as it is
        hdrs: Any = (headers if type(headers) is list else list(headers)) if headers else None
        ts = timestamp or 0
        part = UNASSIGNED if partition is None else partition
        try:
            self._p.produce(topic, value, key, part, None, None, ts, hdrs)
            return
        except BufferError:
            self._p.poll(0.05)
        except KafkaException as e:
            raise self._produce_error(e, topic, partition) from None
        while True:
            try:
                self._p.produce(topic, value, key, part, None, None, ts, hdrs)
                return
            except BufferError:
                self._p.poll(0.05)
            except KafkaException as e:
                raise self._produce_error(e, topic, partition) from None

    def _produce_error(
        self, e: KafkaException, topic: str, partition: int | None
    ) -> KafkaClientError:
        where = f"topic {topic!r}"
        if partition is not None:
            where += f" partition {partition}"
        fatal = self._errors.fatal()
        raised = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if fatal is None and raised is not None and raised.code() == KafkaError._FATAL:
            # produce() says only "fatal error"; the error callback that names it (fenced, ...)
            # is served by the next poll: serve it now, so the caller sees the real cause.
            try:
                self._p.poll(0)
            except KafkaException as served:  # the poll itself may raise the fatal error
                if served.args and isinstance(served.args[0], KafkaError):
                    self._errors(served.args[0])
            fatal = self._errors.fatal()
            if fatal is None:
                return FatalTransactionError(
                    self._ctx(f"producing to {where}: the producer hit a fatal error"),
                    code=raised.name(),
                )
        if fatal is not None:  # fenced or unusable: the transaction error says why
            return map_error(fatal, self._ctx(f"producing to {where}"), transactional=True)
        if self.transactional and raised is not None and raised.code() == KafkaError._STATE:
            # the transaction is in an error state (e.g. after an abort that timed out), not
            # the record at fault: abort and retry the batch rather than let the error policy
            # skip a record
            return TransactionAbortableError(
                self._ctx(f"producing to {where}: the transaction is in an error state"),
                code=raised.name(),
            )
        exc = map_error(e, f"producing to {where}")
        if type(exc) in (KafkaClientError, TopicError):
            exc = ProduceError(str(exc), code=exc.code, retriable=exc.retriable)
        return exc

    def poll(self, timeout: float = 0.0) -> int:
        """Serve callbacks; raises if a delivery failed since the last check."""
        n = int(self._p.poll(timeout))
        self.raise_delivery_errors()
        return n

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued record is delivered; raise ProduceError on any failure.

        Records still queued after `timeout` seconds are an error too: the caller must not
        commit input offsets for them.
        """
        remaining = int(self._call("flushing", timeout, self._p.flush, timeout))
        self.raise_delivery_errors()
        if remaining:
            raise ProduceError(
                f"{remaining} record(s) not delivered to {self.bootstrap_servers!r} within "
                f"{timeout:g}s" + _error_suffix(self._errors),
                retriable=True,
            )

    def raise_delivery_errors(self) -> None:
        """Raise ProduceError describing delivery failures recorded so far (and clear them)."""
        with self._lock:
            if not self._failed_total:
                return
            failures, total = self._failures, self._failed_total
            self._failures, self._failed_total = [], 0
        first = failures[0]
        more = f" (and {total - 1} more)" if total > 1 else ""
        raise ProduceError(
            f"delivery failed for {total} record(s); first: {first}{more}",
            code=first.error.name(),
            retriable=bool(first.error.retriable()),
        )

    def __len__(self) -> int:
        """Records queued and not yet delivered."""
        return len(self._p)

    # -- transactions ----------------------------------------------------------------------

    def _require_txn(self, op: str) -> None:
        if self.transactional_id is None:
            raise ConfigError(f"Producer.{op}: this producer has no transactional_id")

    def begin(self) -> None:
        """Begin a transaction."""
        self._require_txn("begin")
        self._calls.check(self._ctx("beginning a transaction"))  # a stuck call's state
        try:
            self._p.begin_transaction()
        except KafkaException as e:
            self._note_fatal(e)
            raise map_error(e, self._ctx("beginning a transaction"), transactional=True) from None
        self._in_txn = True

    def send_offsets(
        self,
        offsets: Sequence[TopicPartition],
        group_metadata: Any,
        timeout: float | None = None,
    ) -> None:
        """Add consumed offsets (the next offsets to read) to the open transaction."""
        self._require_txn("send_offsets")
        limit = self._txn_timeout if timeout is None else timeout
        try:
            self._call(
                self._ctx("sending offsets to the transaction"),
                limit,
                self._p.send_offsets_to_transaction,
                list(offsets),
                group_metadata,
                limit,
            )
        except KafkaException as e:
            self._note_fatal(e)
            raise map_error(
                e, self._ctx("sending offsets to the transaction"), transactional=True
            ) from None

    def commit(self, timeout: float | None = None) -> None:
        """Commit the open transaction.

        Any failure, including a timeout, leaves the outcome to `TransactionError` subclasses:
        `TransactionAbortableError` (abort and retry), `ProducerFencedError` and
        `FatalTransactionError` (recreate the producer). librdkafka cannot safely retry a
        timed-out commit without KIP-890, so a timeout counts as fatal.
        """
        self._require_txn("commit")
        limit = self._txn_timeout if timeout is None else timeout
        try:
            self._call(
                self._ctx("committing a transaction"), limit, self._p.commit_transaction, limit
            )
        except KafkaException as e:
            self._note_fatal(e)
            failures = self._take_failures()
            exc = map_error(e, self._ctx("committing a transaction"), transactional=True)
            if failures:
                exc.args = (f"{exc.args[0]}; delivery failures: {failures}",)
            raise exc from None
        self._in_txn = False
        self._p.poll(0)  # serve the delivery reports of the committed records
        self.raise_delivery_errors()

    def abort(self, timeout: float | None = None) -> None:
        """Abort the open transaction; records produced in it are discarded by readers.

        The transaction is over even if the abort fails: a failed abort leaves the producer
        unusable (`is_fatal`) or the outcome to the broker's transaction timeout.
        """
        self._require_txn("abort")
        limit = self._txn_timeout if timeout is None else timeout
        try:
            self._call(self._ctx("aborting a transaction"), limit, self._p.abort_transaction, limit)
        except KafkaException as e:
            self._note_fatal(e)
            raise map_error(e, self._ctx("aborting a transaction"), transactional=True) from None
        finally:
            self._take_failures()
            self._tracked.drop()
            self._in_txn = False

    def _note_fatal(self, e: KafkaException) -> None:
        """Keep a fatal error a transactional call raised (fenced, ...) where `is_fatal` and
        `fenced` look. librdkafka also reports it to the error callback, but only the next
        poll serves that, and a producer that failed a call may never be polled again: a
        fenced exactly_once_v2 producer then looked healthy to `CommitProtocol.after_fenced`,
        was kept, and failed every `begin` after each rejoin (the fence loop of issue 44)."""
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is not None and err.fatal():
            self._errors(err)

    def _take_failures(self) -> str:
        with self._lock:
            failures, self._failures, self._failed_total = self._failures, [], 0
        return "; ".join(str(f) for f in failures[:3])

    def _ctx(self, what: str) -> str:
        return f"{what} (transactional.id={self.transactional_id!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def close(self, timeout: float = 30.0, *, drop_undelivered: bool = False) -> None:
        """Deliver what is queued (raising on failures); an open transaction is aborted.

        `drop_undelivered=True` (the runtime, whose uncommitted work is retried elsewhere)
        drops what is not delivered within `timeout` instead of raising. A fenced or fatal
        producer delivers nothing more, so its queue is purged at once rather than waited on.
        A producer abandoned in a stuck call (`stuck`) is let go as it is: purging or closing
        it would wait on the same stuck state.
        """
        if self._calls.stuck is not None:
            self._in_txn = False
            return
        if self._errors.fatal() is not None:
            self._in_txn = False
            self._calls.close()
            try:
                self._p.purge()
                self._p.poll(0)
            except Exception:
                pass
            return
        if self._in_txn:
            try:
                self.abort(timeout)
            except Exception:
                pass
        try:
            if not drop_undelivered:
                self.flush(timeout)
                return
            try:
                self._call("flushing before the close", timeout, self._p.flush, timeout)
            except Exception:
                pass
        finally:
            if self._calls.stuck is None:
                self._calls.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        elif self._in_txn:
            try:
                self.abort()
            except Exception:
                pass


_FENCED_CODES = (
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
)


def _error_suffix(errors: ErrorLog) -> str:
    text = errors.summary()
    return f"; last client errors: {text}" if text else ""
