"""What happens to a record that cannot be deserialized or processed: fail, skip or dead-letter.

The task calls the handler with the error; raising stops the app (nothing past the record is
committed), returning skips the record. A dead-lettered record keeps its raw key, value and
headers and gains `kstream.error.*` headers; it goes out through the task's producer, so under
exactly-once it is part of the same transaction as the task's other outputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kstream.config import Config
from kstream.errors import DeserializationError, RecordError
from kstream.records import Record

log = logging.getLogger("kstream.runtime")

RawLookup = Callable[[str | None, int | None, int | None], Any]
"""(topic, partition, offset) -> the raw confluent Message of the current batch, or None."""

Send = Callable[[str, bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]]], None]


class ErrorCounts:
    """Records skipped or dead-lettered, per reason ("deserialization" / "processing")."""

    def __init__(self) -> None:
        self.skipped: dict[str, int] = {"deserialization": 0, "processing": 0}
        self.dead_lettered: dict[str, int] = {"deserialization": 0, "processing": 0}


def error_headers(err: RecordError) -> list[tuple[str, bytes | None]]:
    cause = err.__cause__ if err.__cause__ is not None else err
    return [
        ("kstream.error.exception", type(cause).__name__.encode()),
        ("kstream.error.message", str(cause).encode()),
        ("kstream.error.topic", (err.topic or "").encode()),
        ("kstream.error.partition", str(err.partition).encode()),
        ("kstream.error.offset", str(err.offset).encode()),
    ]


def make_handler(
    config: Config,
    counts: ErrorCounts,
    raw: RawLookup,
    send: Send,
) -> Callable[[RecordError, Record], None]:
    """The task's error handler for the configured policies."""

    def handle(err: RecordError, record: Record) -> None:
        reason = "deserialization" if isinstance(err, DeserializationError) else "processing"
        policy = (
            config.on_deserialization_error
            if reason == "deserialization"
            else config.on_processing_error
        )
        if policy == "fail":
            raise err
        if policy == "skip":
            counts.skipped[reason] += 1
            log.warning("skipping a record (%s error): %s", reason, err)
            return
        msg = raw(err.topic, err.partition, err.offset)
        if msg is not None:
            key, value, ts = msg.key(), msg.value(), msg.timestamp()[1]
            hdrs = list(msg.headers() or ())
        else:
            key, value, hdrs, ts = None, None, [], record.timestamp
        assert config.dlq_topic is not None
        send(config.dlq_topic, key, value, ts, hdrs + error_headers(err))
        counts.dead_lettered[reason] += 1
        log.warning("dead-lettered a record to %r (%s error): %s", config.dlq_topic, reason, err)

    return handle
