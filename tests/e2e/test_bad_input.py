"""Bad input: the fail, skip and dlq policies for undeserializable records and failing code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.groups import fast_group

from e2e.inprocess import read_until, running
from e2e.support import create_topics
from kstream.broker_compat.reader import TopicReader
from kstream.dsl import StreamBuilder
from kstream.errors import DeserializationError
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState

T0 = 1_700_000_000_000

# offset: (key, raw value); offset 3 is not JSON, offset 6 divides by zero
INPUT = [
    (b"a", b'{"d": 1}'),
    (b"b", b'{"d": 2}'),
    (b"c", b'{"d": 4}'),
    (b"bad-json", b"{not json"),
    (b"d", b'{"d": 5}'),
    (b"e", b'{"d": 10}'),
    (b"zero", b'{"d": 0}'),
    (b"f", b'{"d": 20}'),
]
GOOD = {"a": 100, "b": 50, "c": 25, "d": 20, "e": 10, "f": 5}


def _topology(inp: str, out: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(inp, key_serde="string", value_serde="json").map_values(lambda v: 100 // v["d"]).to(
        out, key_serde="string", value_serde="long"
    )
    return b


def _setup(bs: str, unique_name: Callable[[str], str]) -> tuple[str, str]:
    inp, out = unique_name("in"), unique_name("out")
    create_topics(bs, 1, inp, out)
    with Producer(bs) as p:
        for i, (k, v) in enumerate(INPUT):
            p.produce(inp, v, k, timestamp=T0 + i, headers=[("trace", f"t{i}".encode())])
        p.flush()
    return inp, out


def test_fail_stops_naming_the_record_and_commits_nothing_past_it(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = _setup(bs, unique_name)
    app_id = unique_name("fail")
    app = App(_topology(inp, out), app_id, bs, config=fast_group({"state_dir": str(tmp_path)}))
    app.start()
    assert app.wait_for(AppState.ERROR, timeout=120)
    app.close()
    err = app.error
    assert isinstance(err, DeserializationError)
    assert (err.topic, err.partition, err.offset) == (inp, 0, 3)
    assert f"topic={inp!r} partition=0 offset=3" in str(err)
    assert "JSON" in str(err) or "json" in str(err) or "Expecting" in str(err)
    with Consumer(bs, group_id=app_id) as c:
        (committed,) = c.committed([(inp, 0)])
    assert committed.offset < 0 or committed.offset <= 3


def test_skip_continues_with_the_good_records(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = _setup(bs, unique_name)
    config = {
        "state_dir": str(tmp_path),
        "on_deserialization_error": "skip",
        "on_processing_error": "skip",
    }
    app = App(_topology(inp, out), unique_name("skip"), bs, config=fast_group(config))
    with running(app), TopicReader(bs, out, "string", "long") as reader:
        got = read_until(reader, lambda rs: len(rs) >= len(GOOD), app)
        assert app.state == AppState.RUNNING
    assert {r.key: r.value for r in got} == GOOD
    assert len(got) == len(GOOD)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_dlq_gets_the_raw_record_and_the_error(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    guarantee: str,
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = _setup(bs, unique_name)
    dlq = unique_name("dlq")
    config = {
        "state_dir": str(tmp_path),
        "on_deserialization_error": "dlq",
        "on_processing_error": "dlq",
        "dlq_topic": dlq,
    }
    app = App(_topology(inp, out), unique_name("dlq"), bs, guarantee, fast_group(config))
    with running(app), TopicReader(bs, out, "string", "long") as reader:
        got = read_until(reader, lambda rs: len(rs) >= len(GOOD), app)
        with TopicReader(bs, dlq) as dead_reader:
            dead = read_until(dead_reader, lambda rs: len(rs) >= 2, app)
    assert {r.key: r.value for r in got} == GOOD
    assert [(r.key, r.value) for r in dead] == [INPUT[3], INPUT[6]]
    first, second = (dict(r.headers) for r in dead)
    assert first["trace"] == b"t3" and second["trace"] == b"t6"
    assert first["kstream.error.topic"] == inp.encode()
    assert first["kstream.error.partition"] == b"0"
    assert first["kstream.error.offset"] == b"3"
    assert second["kstream.error.offset"] == b"6"
    assert first["kstream.error.exception"] == b"SerdeError"
    assert b"invalid JSON" in (first["kstream.error.message"] or b"")
    assert second["kstream.error.exception"] == b"ZeroDivisionError"
    assert b"division" in (second["kstream.error.message"] or b"")


@pytest.mark.parametrize("policy", ["fail", "dlq"])
def test_record_too_large_for_the_broker(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path, policy: str
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out, dlq = unique_name("in"), unique_name("out"), unique_name("dlq")
    create_topics(bs, 1, inp, out)
    with Producer(bs) as p:
        for i, v in enumerate([b"1", b"2", b"big", b"3"]):
            p.produce(inp, v, b"k", timestamp=T0 + i)
        p.flush()
    b = StreamBuilder()
    b.stream(inp).map_values(lambda v: v * 600_000 if v == b"big" else v).to(out)
    config = {"state_dir": str(tmp_path), "on_processing_error": policy, "dlq_topic": dlq}
    app = App(b, unique_name("big"), bs, config=fast_group(config))
    if policy == "fail":
        app.start()
        assert app.wait_for(AppState.ERROR, timeout=120)
        app.close()
        assert f"topic={inp!r} partition=0 offset=2" in str(app.error)
        assert "MSG_SIZE_TOO_LARGE" in str(app.error)
        return
    with running(app), TopicReader(bs, out) as reader:
        got = read_until(reader, lambda rs: len(rs) >= 3, app)
        with TopicReader(bs, dlq) as dead_reader:
            (dead,) = read_until(dead_reader, lambda rs: len(rs) >= 1, app)
    assert [r.value for r in got] == [b"1", b"2", b"3"]
    assert dead.value == b"big"
    assert dict(dead.headers)["kstream.error.exception"] == b"ProduceError"
