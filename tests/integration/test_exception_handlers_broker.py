"""Exception handlers on Apache Kafka: a handler's dead-letter records, with Kafka's KIP-1034
headers, and the built-in "dlq" policy writing the same header names."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from e2e.inprocess import read_until, running
from e2e.support import create_topics
from support.groups import fast_group

from kstream.broker_compat.reader import TopicReader
from kstream.dsl import StreamBuilder
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.producer import Producer
from kstream.records import Record
from kstream.runtime import App, AppState
from kstream.runtime.failures import StreamThreadExceptionResponse
from kstream.runtime.policies import CONTINUE, ErrorContext, Response, dead_letter

T0 = 1_700_000_000_000
INPUT = [(b"a", b"4"), (b"bad", b"x"), (b"zero", b"0"), (b"b", b"5")]


def _topology(inp: str, out: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(inp, key_serde="string", value_serde="json").map_values(lambda v: 100 // v).to(
        out, key_serde="string", value_serde="long"
    )
    return b


def test_handlers_dead_letter_with_kafka_s_headers(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out, dlq, audit = (unique_name(n) for n in ("in", "out", "dlq", "audit"))
    create_topics(bs, 1, inp, out, dlq, audit)
    with Producer(bs) as p:
        for i, (k, v) in enumerate(INPUT):
            p.produce(inp, v, k, timestamp=T0 + i, headers=[("trace", f"t{i}".encode())])
        p.flush()
    seen: list[tuple[str, int | None]] = []

    def on_processing(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        seen.append((ctx.reason, ctx.offset))
        return Response.resume(dead_letter(ctx, exc, audit))

    def on_deserialization(ctx: ErrorContext, record: Record, exc: BaseException) -> Response:
        seen.append((ctx.reason, ctx.offset))
        return CONTINUE  # dropped, no dead letter

    config = {
        "state_dir": str(tmp_path),
        "on_deserialization_error": on_deserialization,
        "on_processing_error": on_processing,
    }
    app = App(_topology(inp, out), unique_name("h"), bs, "exactly_once_v2", fast_group(config))
    with running(app), TopicReader(bs, out, "string", "long") as reader:
        got = read_until(reader, lambda rs: len(rs) >= 2, app)
        with TopicReader(bs, audit) as dead_reader:
            (dead,) = read_until(dead_reader, lambda rs: len(rs) >= 1, app)
    assert {r.key: r.value for r in got} == {"a": 25, "b": 20}
    assert sorted(seen) == [("deserialization", 1), ("processing", 2)]
    assert (dead.key, dead.value, dead.timestamp) == (b"zero", b"0", T0 + 2)
    h = dict(dead.headers)
    assert h["__streams.errors.exception"] == b"builtins.ZeroDivisionError"
    assert h["__streams.errors.message"] == b"integer division or modulo by zero"
    assert b"ZeroDivisionError" in (h["__streams.errors.stacktrace"] or b"")
    assert h["__streams.errors.topic"] == inp.encode()
    assert (h["__streams.errors.partition"], h["__streams.errors.offset"]) == (b"0", b"2")
    assert "trace" not in h and not any(n.startswith("kstream.error.") for n in h)
    assert app.error is None


def test_the_built_in_dlq_writes_kafka_s_header_names_too(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out, dlq = (unique_name(n) for n in ("in", "out", "dlq"))
    create_topics(bs, 1, inp, out)
    with Producer(bs) as p:
        for i, (k, v) in enumerate(INPUT):
            p.produce(inp, v, k, timestamp=T0 + i, headers=[("trace", f"t{i}".encode())])
        p.flush()
    config = {
        "state_dir": str(tmp_path),
        "on_deserialization_error": "dlq",
        "on_processing_error": "dlq",
        "dlq_topic": dlq,
    }
    app = App(_topology(inp, out), unique_name("b"), bs, "at_least_once", fast_group(config))
    with running(app), TopicReader(bs, dlq) as dead_reader:
        dead = read_until(dead_reader, lambda rs: len(rs) >= 2, app)
    first, second = (dict(r.headers) for r in dead)
    assert [(r.key, r.value) for r in dead] == [INPUT[1], INPUT[2]]
    assert first["trace"] == b"t1" and second["trace"] == b"t2"
    assert first["__streams.errors.offset"] == first["kstream.error.offset"] == b"1"
    assert second["__streams.errors.exception"] == b"builtins.ZeroDivisionError"
    assert second["kstream.error.exception"] == b"ZeroDivisionError"
    assert first["__streams.errors.topic"] == inp.encode()


def test_shutdown_application_stops_the_other_instance(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = unique_name("in"), unique_name("out")
    create_topics(bs, 2, inp, out)
    app_id = unique_name("sa")
    once = [1]  # the first instance to map "bad" fails; the other could take its partition

    def check(v: str) -> str:
        if v == "bad" and once[0]:
            once[0] = 0
            raise RuntimeError("bad record")
        return v

    def shut_down_everything(e: BaseException) -> StreamThreadExceptionResponse:
        return StreamThreadExceptionResponse.SHUTDOWN_APPLICATION

    apps = []
    for i in range(2):
        b = StreamBuilder()
        b.stream(inp, key_serde="string", value_serde="string").map_values(check).to(
            out, key_serde="string", value_serde="string"
        )
        config = fast_group({"state_dir": str(tmp_path / str(i))})
        app = App(b, app_id, bs, "at_least_once", config)
        app.set_uncaught_exception_handler(shut_down_everything)
        apps.append(app)
    try:
        for app in apps:
            app.start()
        for app in apps:
            assert app.wait_for(AppState.RUNNING, timeout=60)
        began = time.monotonic()
        with Producer(bs) as p:
            p.produce(inp, b"bad", b"k")
            p.flush()
        for app in apps:
            assert app.wait_for(AppState.ERROR, timeout=30)
        stopped_in = time.monotonic() - began
    finally:
        for app in apps:
            app.close()
    kinds = sorted(type(app.error).__name__ for app in apps)
    assert kinds == ["KStreamError", "ProcessingError"]
    assert any("shut the application down" in str(app.error) for app in apps)
    assert stopped_in < 10
