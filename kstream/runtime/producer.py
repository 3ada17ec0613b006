"""The runtime's producer: delivery reports for every record, so changelog offsets are known.

`kstream.kafka.Producer` asks librdkafka for failure reports only, which keeps plain producing
cheap but hides where records landed. A store's checkpoint is the next changelog offset to
read on restore, so the runtime needs the offset its changelog records got; this adapter takes
every delivery report and remembers the highest offset per tracked partition.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka import Producer as _RawProducer

from kstream.errors import ConfigError, KafkaClientError, ProduceError, TopicError
from kstream.kafka.client import ErrorLog, build_config, check_connected
from kstream.kafka.errors import map_error

__all__ = ["TrackingProducer"]

_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "acks": "all",
}


class TrackingProducer:
    """A producer (transactional when `transactional_id` is given) that tracks delivery offsets.

    Offsets are kept only for topics in `tracked` (the changelogs), read with `take_offsets`.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        kafka: Mapping[str, Any] | None,
        tracked: set[str],
        transactional_id: str | None = None,
        connect_timeout_s: float = 10.0,
        transaction_timeout_s: float = 30.0,
        client_id: str | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self._tracked = tracked
        self._errors = ErrorLog()
        self._lock = threading.RLock()
        self._failures: list[str] = []
        self._failed = 0
        self._first_code: str | None = None
        self._offsets: dict[tuple[str, int], int] = {}
        self._txn_timeout = transaction_timeout_s
        self.in_txn = False
        forced: dict[str, Any] = {"on_delivery": self._on_delivery}
        if transactional_id is not None:
            forced["transactional.id"] = transactional_id
            forced["enable.idempotence"] = True
        else:
            forced["enable.idempotence"] = True
        if client_id:
            forced["client.id"] = client_id
        user = {k: v for k, v in (kafka or {}).items() if not _consumer_only(k)}
        conf = build_config(
            bootstrap_servers,
            user,
            defaults=_DEFAULTS,
            forced=forced,
            errors=self._errors,
            where="Producer",
        )
        try:
            self._p = _RawProducer(conf)
        except KafkaException as e:
            raise ConfigError(f"Producer: invalid kafka settings: {e}") from None
        check_connected(self._p, bootstrap_servers, connect_timeout_s, self._errors, "Producer")
        if transactional_id is not None:
            try:
                self._p.init_transactions(transaction_timeout_s)
            except KafkaException as e:
                raise map_error(
                    e,
                    f"initialising transactions for transactional.id={transactional_id!r}",
                    transactional=True,
                ) from None

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            topic = msg.topic()
            if topic in self._tracked:
                tp = (topic, msg.partition())
                off = msg.offset()
                if off is not None and off > self._offsets.get(tp, -1):  # type: ignore[arg-type]
                    self._offsets[tp] = off  # type: ignore[index]
            return
        with self._lock:
            self._failed += 1
            if self._first_code is None:
                self._first_code = err.name()
            if len(self._failures) < 3:
                self._failures.append(
                    f"topic={msg.topic()!r} partition={msg.partition()}: {err.name()}: {err.str()}"
                )

    def take_offsets(self) -> dict[tuple[str, int], int]:
        """Highest delivered offset per tracked partition since the last call."""
        out, self._offsets = self._offsets, {}
        return out

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> None:
        """Queue one record; a full local queue is drained and the call retried."""
        hdrs: Any = headers
        try:  # the common case first, without the retry loop around it
            if partition is None:
                self._p.produce(topic, value, key, timestamp=timestamp, headers=hdrs)
            else:
                self._p.produce(topic, value, key, partition, timestamp=timestamp, headers=hdrs)
            return
        except BufferError:
            self._p.poll(0.05)
        except KafkaException as e:
            raise self._produce_error(e, topic) from None
        while True:
            try:
                if partition is None:
                    self._p.produce(topic, value, key, timestamp=timestamp, headers=hdrs)
                else:
                    self._p.produce(topic, value, key, partition, timestamp=timestamp, headers=hdrs)
                return
            except BufferError:
                self._p.poll(0.05)
            except KafkaException as e:
                raise self._produce_error(e, topic) from None

    def _produce_error(self, e: KafkaException, topic: str) -> Exception:
        fatal = self._errors.fatal()
        if fatal is not None:
            return map_error(fatal, self._ctx(f"producing to topic {topic!r}"), transactional=True)
        exc = map_error(e, f"producing to topic {topic!r}")
        if type(exc) in (KafkaClientError, TopicError):
            exc = ProduceError(str(exc), code=exc.code, retriable=exc.retriable)
        return exc

    def poll(self, timeout: float = 0.0) -> None:
        self._p.poll(timeout)

    def raise_delivery_errors(self) -> None:
        with self._lock:
            if not self._failed:
                return
            n, text, code = self._failed, "; ".join(self._failures), self._first_code
            self._failed, self._failures, self._first_code = 0, [], None
        raise ProduceError(f"delivery failed for {n} record(s): {text}", code=code)

    def flush(self, timeout: float = 30.0) -> None:
        left = int(self._p.flush(timeout))
        self.raise_delivery_errors()
        if left:
            raise ProduceError(
                f"{left} record(s) not delivered within {timeout:g}s", retriable=True
            )

    # -- transactions ----------------------------------------------------------------------

    def begin(self) -> None:
        try:
            self._p.begin_transaction()
        except KafkaException as e:
            raise map_error(e, self._ctx("beginning a transaction"), transactional=True) from None
        self.in_txn = True

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        try:
            self._p.send_offsets_to_transaction(offsets, group_metadata, self._txn_timeout)
        except KafkaException as e:
            raise map_error(e, self._ctx("sending offsets"), transactional=True) from None

    def commit(self) -> None:
        """Commit; a timeout is fatal (no KIP-890: a retried commit is not safe)."""
        try:
            self._p.commit_transaction(self._txn_timeout)
        except KafkaException as e:
            exc = map_error(e, self._ctx("committing a transaction"), transactional=True)
            with self._lock:
                if self._failures:
                    exc.args = (f"{exc.args[0]}; delivery failures: {'; '.join(self._failures)}",)
                self._failed, self._failures, self._first_code = 0, [], None
            raise exc from None
        self.in_txn = False
        self._p.poll(0)
        self.raise_delivery_errors()

    def abort(self) -> None:
        try:
            self._p.abort_transaction(self._txn_timeout)
        except KafkaException as e:
            raise map_error(e, self._ctx("aborting a transaction"), transactional=True) from None
        finally:
            with self._lock:
                self._failed, self._failures, self._first_code = 0, [], None
            self._offsets = {}
        self.in_txn = False

    def _ctx(self, what: str) -> str:
        return f"{what} (transactional.id={self.transactional_id!r})"

    def close(self, timeout: float = 5.0) -> None:
        """Abort an open transaction and drop what cannot be delivered in `timeout`."""
        if self._errors.fatal() is not None:
            # A fenced or fatal producer delivers nothing more; waiting would only stall.
            self.in_txn = False
            try:
                self._p.purge()
                self._p.poll(0)
            except Exception:
                pass
            return
        if self.in_txn:
            try:
                self.abort()
            except Exception:
                pass
        try:
            self._p.flush(timeout)
        except Exception:
            pass

    def fenced(self) -> bool:
        """The fatal error was fencing: another producer owns the transactional id now."""
        err = self._errors.fatal()
        return err is not None and err.code() in _FENCED_CODES

    def is_fatal(self) -> bool:
        """The producer hit a fatal error (fenced, or unusable) and must be replaced."""
        return self._errors.fatal() is not None


_FENCED_CODES = (
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
)

_CONSUMER_ONLY = (
    "group.",
    "enable.auto",
    "auto.offset",
    "isolation.",
    "session.",
    "heartbeat.",
    "max.poll",
    "partition.assignment",
    "fetch.",
    "enable.partition.eof",
)


def _consumer_only(key: str) -> bool:
    # One `kafka` dict configures every client; consumer keys would only make librdkafka warn.
    return key.startswith(_CONSUMER_ONLY)
