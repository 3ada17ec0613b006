"""The error policies on Spark: the native engine's handler, fed what a Spark worker has.

`kstream.runtime.policies.make_handler` decides what a `DeserializationError` or a
`ProcessingError` does: `fail` raises it, `skip` logs and returns, `dlq` sends the record's raw
key, value, timestamp and headers, plus the `kstream.error.*` headers, to `dlq_topic`. That one
implementation serves both engines. The native engine hands it the batch's confluent messages
and the task's producer; on Spark, `RecordPolicy` hands it

- the bytes of the batch's input records, kept before deserialization fills the records in
  place (and kept only when a policy is `dlq`, the only one that reads them), and
- an output row for the dead-letter topic, which the transactional sink writes with the batch's
  other rows: in the same Kafka transaction under exactly-once, so a replayed batch
  dead-letters a record once, as the native task's transaction does. The row's provenance is
  the failed record, so it sits where that record's outputs would.

Every Spark task is kstream's own `Task` with a `RecordPolicy` as its `error_handler`, so an
error reads the same on both engines and names the record the native engine names (a
repartition topic's record after a repartition), which `tests/spark/test_error_policies.py`
checks against the native engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME

from kstream.config import Config
from kstream.errors import RecordError
from kstream.records import Headers, Record
from kstream.runtime.policies import ErrorCounts, make_handler

Origin = tuple[str | None, int | None, int | None]
"""(topic, partition, offset) of the record a dead letter copies."""

Emit = Callable[[str, bytes | None, bytes | None, int, Headers, Origin], None]
"""Adds an output row: (topic, key, value, timestamp, headers, origin)."""


def policy_config(cfg: Config) -> Config:
    """The part of `cfg` that Spark's workers need to apply the policies.

    Only these three keys travel to the executors: the rest (Kafka credentials among it) stays
    on the driver.
    """
    return Config(
        on_deserialization_error=cfg.on_deserialization_error,
        on_processing_error=cfg.on_processing_error,
        dlq_topic=cfg.dlq_topic,
    )


def uses_dlq(cfg: Config) -> bool:
    """Whether a policy of `cfg` writes records to `dlq_topic`."""
    return cfg.dlq_topic is not None and "dlq" in (
        cfg.on_deserialization_error,
        cfg.on_processing_error,
    )


class RawMessage:
    """An input record's bytes, read the way `make_handler` reads a confluent `Message`."""

    __slots__ = ("_headers", "_key", "_timestamp", "_value")

    def __init__(
        self, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers
    ) -> None:
        self._key = key
        self._value = value
        self._timestamp = timestamp
        self._headers = headers

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, self._timestamp)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return list(self._headers) or None


class RecordPolicy:
    """The error handler of one Spark task: `make_handler` over this batch's bytes.

    Call `remember(records)` with a batch's input records before they are deserialized, and
    hand the policy to the `Task` as its `error_handler`.
    """

    def __init__(self, config: Config, emit: Emit) -> None:
        self.keeps_bytes = uses_dlq(config)
        self.counts = ErrorCounts()
        self._emit = emit
        self._raw: dict[Origin, tuple[bytes | None, bytes | None, int, Headers]] = {}
        self._origin: Origin = (None, None, None)
        self._handle = make_handler(config, self.counts, self._lookup, self._send)

    def remember(self, records: Iterable[Record]) -> None:
        """Keep the bytes of a batch's input records (under a dlq policy only)."""
        if self.keeps_bytes:
            self._raw = {
                (r.topic, r.partition, r.offset): (r.key, r.value, r.timestamp, r.headers)
                for r in records
            }

    def __call__(self, err: RecordError, record: Record) -> None:
        self._origin = (err.topic, err.partition, err.offset)
        self._handle(err, record)

    def _lookup(self, topic: str | None, partition: int | None, offset: int | None) -> Any:
        raw = self._raw.get((topic, partition, offset))
        return None if raw is None else RawMessage(*raw)

    def _send(
        self, topic: str, key: bytes | None, value: bytes | None, ts: int, headers: Headers
    ) -> None:
        self._emit(topic, key, value, ts, headers, self._origin)
