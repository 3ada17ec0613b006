"""What happens to a record that cannot be deserialized, processed or produced: the handlers.

Kafka Streams asks a handler for each kind of record error (deserialization, processing,
KIP-1033, and production); kstream does the same. A handler is a callable
`(context, record, exception) -> Response`: `CONTINUE` skips the record, `FAIL` stops the app
(nothing past the record is committed), and either may carry dead-letter records (KIP-1034)
that go out first. The fixed policies "fail", "skip" and "dlq" are the built-in handlers, so a
config names a policy or passes a callable under the same key (`on_deserialization_error`,
`on_processing_error`, `on_production_error`).

Dead-letter records go out through the task's producer, so under exactly-once they are part of
the same transaction as the task's other outputs. They carry Kafka's KIP-1034 headers
(`__streams.errors.exception`, `.message`, `.stacktrace`, `.topic`, `.partition`, `.offset`);
the built-in "dlq" also keeps the input record's own headers and kstream's earlier
`kstream.error.*` headers, which existing dead-letter readers look for.

`dlq_topic` is made ready by `ensure_dlq_topic`, the one rule of both engines (the native app
and the Spark runner): a topic that exists is used as it is, whatever its partition count, as
Kafka Streams writes to the dead-letter topic the user names; a missing one is created with one
partition. A dead letter keeps the failed record's key, so the default partitioner places it.
"""

from __future__ import annotations

import enum
import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kstream.config import Config
from kstream.errors import DeserializationError, ProduceError, RecordError, TopicError
from kstream.kafka.admin import TopicSpec
from kstream.records import Record

log = logging.getLogger("kstream.runtime")

__all__ = [
    "CONTINUE",
    "FAIL",
    "DeadLetterRecord",
    "ErrorContext",
    "ErrorCounts",
    "RecordErrorHandler",
    "Response",
    "Result",
    "dead_letter",
    "ensure_dlq_topic",
    "error_headers",
    "kafka_error_headers",
    "make_handler",
]

RawLookup = Callable[[str | None, int | None, int | None], Any]
"""(topic, partition, offset) -> the raw confluent Message of the current batch, or None."""

Send = Callable[[str, bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]]], None]


class ErrorCounts:
    """Records skipped or dead-lettered, per reason ("deserialization" / "processing"; a
    record the producer refused counts as a processing error, as the metrics always had it)."""

    def __init__(self) -> None:
        self.skipped: dict[str, int] = {"deserialization": 0, "processing": 0}
        self.dead_lettered: dict[str, int] = {"deserialization": 0, "processing": 0}


class Result(enum.Enum):
    """Kafka's `Response.Result` (RESUME is called CONTINUE here, as in Kafka 3.x)."""

    CONTINUE = "continue"
    FAIL = "fail"


@dataclass(frozen=True)
class DeadLetterRecord:
    """A record a handler asks to be written (KIP-1034's dead-letter-queue records)."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class Response:
    """A handler's answer: go on or fail, after writing `dead_letters` (possibly none)."""

    result: Result
    dead_letters: tuple[DeadLetterRecord, ...] = ()

    @classmethod
    def resume(cls, *dead_letters: DeadLetterRecord) -> Response:
        return cls(Result.CONTINUE, tuple(dead_letters))

    @classmethod
    def fail(cls, *dead_letters: DeadLetterRecord) -> Response:
        return cls(Result.FAIL, tuple(dead_letters))


CONTINUE = Response(Result.CONTINUE)
FAIL = Response(Result.FAIL)


@dataclass(frozen=True)
class ErrorContext:
    """Kafka's `ErrorHandlerContext`: where the failed record came from, with its raw bytes.

    `source_raw_key` / `source_raw_value` are the input record's bytes as read (None when the
    record is not in the current batch any more, e.g. an error in a punctuation).
    """

    reason: str
    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()
    source_raw_key: bytes | None = None
    source_raw_value: bytes | None = None
    task_id: str | None = None


RecordErrorHandler = Callable[[ErrorContext, Record, BaseException], "Response | Result"]
"""`(context, record, exception) -> Response` (or a bare `Result`)."""


def error_headers(err: RecordError) -> list[tuple[str, bytes | None]]:
    """kstream's own `kstream.error.*` headers (kept on the built-in "dlq" records)."""
    cause = err.__cause__ if err.__cause__ is not None else err
    return _legacy_headers(err.topic, err.partition, err.offset, cause)


def _legacy_headers(
    topic: str | None, partition: int | None, offset: int | None, exc: BaseException
) -> list[tuple[str, bytes | None]]:
    return [
        ("kstream.error.exception", type(exc).__name__.encode()),
        ("kstream.error.message", str(exc).encode()),
        ("kstream.error.topic", (topic or "").encode()),
        ("kstream.error.partition", str(partition).encode()),
        ("kstream.error.offset", str(offset).encode()),
    ]


def kafka_error_headers(ctx: ErrorContext, exc: BaseException) -> list[tuple[str, bytes | None]]:
    """Kafka's KIP-1034 headers (ExceptionHandlerUtils): the exception's class name, message
    and stack trace, and the input record's topic, partition and offset."""
    kind = type(exc)
    trace = "".join(traceback.format_exception(exc))
    return [
        ("__streams.errors.exception", f"{kind.__module__}.{kind.__qualname__}".encode()),
        ("__streams.errors.message", str(exc).encode()),
        ("__streams.errors.stacktrace", trace.encode()),
        ("__streams.errors.topic", (ctx.topic or "").encode()),
        ("__streams.errors.partition", str(ctx.partition).encode()),
        ("__streams.errors.offset", str(ctx.offset).encode()),
    ]


def dead_letter(
    ctx: ErrorContext, exc: BaseException, topic: str, *, keep_headers: bool = False
) -> DeadLetterRecord:
    """The dead-letter record Kafka's default handlers build: the input's raw key and value,
    its timestamp and the KIP-1034 headers (`keep_headers`: the input's headers first)."""
    hdrs = (list(ctx.headers) if keep_headers else []) + kafka_error_headers(ctx, exc)
    return DeadLetterRecord(
        topic, ctx.source_raw_key, ctx.source_raw_value, ctx.timestamp, tuple(hdrs)
    )


def ensure_dlq_topic(admin: Any, config: Config) -> dict[str, int]:
    """Make `config.dlq_topic` ready for dead letters; `{topic: partitions}` (`{}` without a
    `dlq_topic`).

    A topic that exists is used as it is, whatever its partition count (teams that turn off
    topic auto-creation make it themselves; Kafka Streams' KIP-1034 writes to the topic it is
    given); a missing one is created with one partition and the configured replication factor.
    One created meanwhile by another instance or by hand is used as found. A topic that can
    neither be found nor created raises TopicError naming it. `admin`: `partition_counts` and
    `create_topics` (kstream's `Admin`, or a client supplier's).
    """
    topic = config.dlq_topic
    if topic is None:
        return {}
    have: dict[str, int] = admin.partition_counts([topic])
    if topic not in have:
        try:
            admin.create_topics([TopicSpec(topic, 1, {}, config.replication_factor)])
        except TopicError as e:
            have = admin.partition_counts([topic])
            if topic not in have:
                raise TopicError(f"dlq_topic {topic!r} cannot be used: {e}", code=e.code) from None
        else:
            have = admin.partition_counts([topic])
    if topic not in have:
        raise TopicError(
            f"dlq_topic {topic!r} cannot be used: the cluster's metadata does not list it "
            "after it was created (is the client allowed to describe it?)"
        )
    return {topic: have[topic]}


def reason_of(err: RecordError) -> str:
    """Which handler an error goes to: a record the producer refused is a production error."""
    if isinstance(err, DeserializationError):
        return "deserialization"
    if isinstance(err.__cause__, ProduceError):
        return "production"
    return "processing"


def policy_of(config: Config, reason: str) -> Any:
    """The configured policy name or callable for `reason` (production errors follow
    `on_processing_error` unless `on_production_error` is set, as before it existed)."""
    if reason == "deserialization":
        return config.on_deserialization_error
    if reason == "production" and config.on_production_error is not None:
        return config.on_production_error
    return config.on_processing_error


def builtin_handler(policy: str, dlq_topic: str | None) -> RecordErrorHandler:
    """The fixed policy `policy` ("fail", "skip", "dlq") as a handler."""

    def handle(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        if policy == "fail":
            return FAIL
        if policy == "skip":
            return CONTINUE
        assert dlq_topic is not None
        dl = dead_letter(ctx, exc, dlq_topic, keep_headers=True)
        legacy = tuple(_legacy_headers(ctx.topic, ctx.partition, ctx.offset, exc))
        return Response.resume(
            DeadLetterRecord(dl.topic, dl.key, dl.value, dl.timestamp, dl.headers + legacy)
        )

    return handle


def make_handler(
    config: Config,
    counts: ErrorCounts,
    raw: RawLookup,
    send: Send,
    task_id: str | None = None,
) -> Callable[[RecordError, Record], None]:
    """The task's error handler: asks the configured handler of the error's kind and carries
    out its response (raising `err` to fail, returning to skip)."""

    def handle(err: RecordError, record: Record) -> None:
        reason = reason_of(err)
        policy = policy_of(config, reason)
        if policy == "fail":  # the common case, without building a context
            raise err
        handler = builtin_handler(policy, config.dlq_topic) if isinstance(policy, str) else policy
        ctx = _context(reason, err, record, raw, task_id)
        cause = err.__cause__ if err.__cause__ is not None else err
        try:
            response = handler(ctx, record, cause)
        except Exception as e:
            # Kafka: "Fatal user code error in ... error callback"; the app stops
            raise type(err)(
                f"the {reason} exception handler raised {type(e).__name__}: {e} while handling "
                f"{cause!r}",
                topic=err.topic,
                partition=err.partition,
                offset=err.offset,
            ) from e
        if isinstance(response, Result):
            response = Response(response)
        if not isinstance(response, Response):
            raise type(err)(
                f"the {reason} exception handler returned {response!r}, not a Response "
                f"(CONTINUE, FAIL, Response.resume(...) or Response.fail(...))",
                topic=err.topic,
                partition=err.partition,
                offset=err.offset,
            ) from cause
        kind = "deserialization" if reason == "deserialization" else "processing"
        for dl in response.dead_letters:
            send(dl.topic, dl.key, dl.value, dl.timestamp, dl.headers)
        if response.dead_letters:
            counts.dead_lettered[kind] += 1
            log.warning(
                "dead-lettered a record to %s (%s error): %s",
                ", ".join(sorted({repr(dl.topic) for dl in response.dead_letters})),
                reason,
                err,
            )
        if response.result is Result.FAIL:
            raise err
        if not response.dead_letters:
            counts.skipped[kind] += 1
            log.warning("skipping a record (%s error): %s", reason, err)

    return handle


def _context(
    reason: str, err: RecordError, record: Record, raw: RawLookup, task_id: str | None
) -> ErrorContext:
    msg = raw(err.topic, err.partition, err.offset)
    if msg is not None:
        key, value, ts = msg.key(), msg.value(), msg.timestamp()[1]
        hdrs = tuple(msg.headers() or ())
    else:
        key, value, hdrs, ts = None, None, (), record.timestamp
    return ErrorContext(
        reason,
        err.topic,
        err.partition,
        err.offset,
        ts,
        hdrs,
        key,
        value,
        task_id,
    )
