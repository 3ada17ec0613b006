"""The record-error handlers (deserialization, processing, production): every response, the
built-in policies as handlers, and the dead-letter records' headers (Kafka's KIP-1034 names)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kstream.config import Config
from kstream.errors import (
    ConfigError,
    DeserializationError,
    ProcessingError,
    ProduceError,
    RecordError,
)
from kstream.records import Record
from kstream.runtime.policies import (
    CONTINUE,
    FAIL,
    DeadLetterRecord,
    ErrorContext,
    ErrorCounts,
    Response,
    Result,
    dead_letter,
    make_handler,
)

TOPIC = "orders"


class _Raw:
    """A confluent Message as the task's batch holds it."""

    def __init__(self, key: bytes, value: bytes, ts: int, headers: list[tuple[str, bytes]]):
        self._k, self._v, self._ts, self._h = key, value, ts, headers

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def headers(self) -> list[tuple[str, bytes]]:
        return self._h


RAW = _Raw(b"k7", b"{broken", 1_000, [("trace", b"t7")])
Sent = list[tuple[str, bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]]]]


def _error(kind: type[RecordError], cause: BaseException) -> RecordError:
    err = kind("failed", topic=TOPIC, partition=2, offset=7)
    err.__cause__ = cause
    return err


def _run(config: Config, err: RecordError, task_id: str | None = "0_2") -> tuple[Sent, ErrorCounts]:
    sent: Sent = []
    counts = ErrorCounts()

    def raw(t: str | None, p: int | None, o: int | None) -> Any:
        return RAW if (t, p, o) == (TOPIC, 2, 7) else None

    handle = make_handler(config, counts, raw, lambda *a: sent.append(a), task_id)
    handle(err, Record(b"k7", None, 1_000, (), TOPIC, 2, 7))
    return sent, counts


def test_a_handler_gets_kafka_s_context_and_the_cause() -> None:
    seen: list[tuple[ErrorContext, BaseException]] = []

    def handler(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        seen.append((ctx, exc))
        return CONTINUE

    cause = ValueError("bad json")
    sent, counts = _run(
        Config(on_deserialization_error=handler), _error(DeserializationError, cause)
    )
    ((ctx, exc),) = seen
    assert exc is cause
    assert (ctx.reason, ctx.topic, ctx.partition, ctx.offset) == ("deserialization", TOPIC, 2, 7)
    assert (ctx.source_raw_key, ctx.source_raw_value, ctx.timestamp) == (b"k7", b"{broken", 1000)
    assert ctx.headers == (("trace", b"t7"),) and ctx.task_id == "0_2"
    assert sent == [] and counts.skipped["deserialization"] == 1


@pytest.mark.parametrize("answer", [FAIL, Result.FAIL])
def test_fail_raises_the_record_error(answer: Any) -> None:
    err = _error(ProcessingError, ZeroDivisionError("division by zero"))
    with pytest.raises(ProcessingError) as raised:
        _run(Config(on_processing_error=lambda c, r, e: answer), err)
    assert raised.value is err


def test_resume_with_dead_letters_sends_them_and_goes_on() -> None:
    def handler(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        return Response.resume(dead_letter(ctx, exc, "orders-dlq"), dead_letter(ctx, exc, "audit"))

    sent, counts = _run(Config(on_processing_error=handler), _error(ProcessingError, KeyError("x")))
    assert [s[0] for s in sent] == ["orders-dlq", "audit"]
    _, key, value, ts, headers = sent[0]
    assert (key, value, ts) == (b"k7", b"{broken", 1000)
    h = dict(headers)
    assert h["__streams.errors.exception"] == b"builtins.KeyError"
    assert h["__streams.errors.message"] == b"'x'"
    assert b"KeyError" in (h["__streams.errors.stacktrace"] or b"")
    assert h["__streams.errors.topic"] == TOPIC.encode()
    assert h["__streams.errors.partition"] == b"2"
    assert h["__streams.errors.offset"] == b"7"
    assert "trace" not in h  # Kafka's dead letter does not copy the input's headers
    assert counts.dead_lettered["processing"] == 1 and counts.skipped["processing"] == 0


def test_fail_with_dead_letters_sends_them_then_fails() -> None:
    dl = DeadLetterRecord("dlq", b"k", b"v", 5)
    err = _error(ProcessingError, RuntimeError("boom"))
    sent: Sent = []
    handle = make_handler(
        Config(on_processing_error=lambda c, r, e: Response.fail(dl)),
        ErrorCounts(),
        lambda *a: None,
        lambda *a: sent.append(a),
    )
    with pytest.raises(ProcessingError):
        handle(err, Record(b"k", None, 5, (), TOPIC, 2, 7))
    assert sent == [("dlq", b"k", b"v", 5, ())]


def test_a_handler_that_raises_or_answers_nonsense_stops_the_app() -> None:
    def raising(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        raise LookupError("handler bug")

    err = _error(DeserializationError, ValueError("bad"))
    with pytest.raises(DeserializationError, match="handler raised LookupError: handler bug"):
        _run(Config(on_deserialization_error=raising), err)
    with pytest.raises(DeserializationError, match="returned 'continue', not a Response"):
        _run(Config(on_deserialization_error=lambda c, r, e: "continue"), err)


def test_a_refused_produce_goes_to_the_production_handler() -> None:
    reasons: list[str] = []

    def production(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        reasons.append(ctx.reason)
        return CONTINUE

    refused = _error(ProcessingError, ProduceError("MSG_SIZE_TOO_LARGE", code="MSG_SIZE"))
    config = Config(on_processing_error="fail", on_production_error=production)
    _, counts = _run(config, refused)
    assert reasons == ["production"] and counts.skipped["processing"] == 1
    # a failing user function is still a processing error
    with pytest.raises(ProcessingError):
        _run(config, _error(ProcessingError, ValueError("user code")))
    # unset, production errors follow on_processing_error (kstream's behaviour before)
    _, counts = _run(Config(on_processing_error="skip"), refused)
    assert counts.skipped["processing"] == 1


def test_the_built_in_dlq_writes_kafka_s_and_kstream_s_headers() -> None:
    config = Config(on_deserialization_error="dlq", dlq_topic="dead")
    sent, counts = _run(config, _error(DeserializationError, ValueError("invalid JSON")))
    ((topic, key, value, ts, headers),) = sent
    assert (topic, key, value, ts) == ("dead", b"k7", b"{broken", 1000)
    names = [n for n, _ in headers]
    assert names[0] == "trace"  # the input's own headers first
    h = dict(headers)
    assert h["__streams.errors.exception"] == b"builtins.ValueError"
    assert h["__streams.errors.offset"] == b"7"
    assert h["kstream.error.exception"] == b"ValueError"
    assert h["kstream.error.message"] == b"invalid JSON"
    assert counts.dead_lettered["deserialization"] == 1


def test_the_built_in_fail_and_skip() -> None:
    err = _error(ProcessingError, ValueError("x"))
    with pytest.raises(ProcessingError):
        _run(Config(on_processing_error="fail"), err)
    sent, counts = _run(Config(on_processing_error="skip"), err)
    assert sent == [] and counts.skipped["processing"] == 1


def test_config_takes_a_policy_or_a_callable() -> None:
    with pytest.raises(
        ConfigError,
        match=r"on_production_error: expected one of fail, skip, dlq \(or a handler: .*\), "
        r"got 'retry'",
    ):
        Config(on_production_error="retry")
    with pytest.raises(ConfigError, match="dlq_topic: required"):
        Config(on_production_error="dlq")
    assert callable(Config(on_processing_error=lambda c, r, e: CONTINUE).on_processing_error)
