"""What an app does on Apache Kafka with the broker-compatibility component off (the default):
records keep their own headers and get no provenance stamp, `auto.offset.reset=latest` starts
a new group at the end (Kafka answers ListOffsets LATEST right), and the lag an app reports is
the distance to the partition's end as ListOffsets gives it.

Read with plain confluent-kafka consumers: nothing of kstream in the reader.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.groups import fast_group

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App, AppState


@pytest.fixture(autouse=True)
def _kafka_only(kafka_broker: Any) -> None:
    if isinstance(kafka_broker, EmbeddedBroker):
        pytest.xfail("Apache Kafka's behaviour: the Tansu lane has its own tests")


def _copy(src: str, dst: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").map_values(str.upper).to(
        dst, key_serde="string", value_serde="string"
    )
    return b


def _read_all(bs: str, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """The first `expected` committed records of `topic` (one partition), read_committed."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            out += [m for m in c.consume(100, 0.2) if m.error() is None]
        # anything past the expected records would be a duplicate: look a little longer
        out += [m for m in c.consume(100, 0.5) if m.error() is None]
        return out
    finally:
        c.close()


def _produce(bs: str, topic: str, values: list[str], headers: Any = None) -> None:
    p = Producer({"bootstrap.servers": bs})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), f"k{i}".encode(), headers=headers)
    p.flush(30)


def _topics(bs: str, *names: str) -> None:
    admin = Admin(bs)
    for name in names:
        admin.create_topic(name, 1)


def _app(src: str, dst: str, app_id: str, bs: str, tmp: Path, **kafka: Any) -> App:
    config = fast_group({"state_dir": str(tmp), "kafka": kafka})
    return App(_copy(src, dst), app_id, bs, config=config)


def test_outputs_keep_their_headers_and_carry_no_provenance_stamp(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    src, dst = unique_name("in"), unique_name("out")
    _topics(bs, src, dst)
    _produce(bs, src, ["a", "b"], headers=[("trace", b"t1"), ("kstream.src", b"stale")])
    app = _app(src, dst, unique_name("app"), bs, tmp_path)
    assert app.config.broker_compat == "none"
    app.start()
    try:
        got = _read_all(bs, dst, 2)
    finally:
        app.close(timeout=30)
    assert [(m.key(), m.value()) for m in got] == [(b"k0", b"A"), (b"k1", b"B")]
    # the input's own header passes through; an upstream's provenance stamp does not
    assert [m.headers() for m in got] == [[("trace", b"t1")], [("trace", b"t1")]]


def test_auto_offset_reset_latest_starts_a_new_group_at_the_end(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    src, dst = unique_name("in"), unique_name("out")
    _topics(bs, src, dst)
    _produce(bs, src, ["old1", "old2", "old3"])
    app = _app(src, dst, unique_name("app"), bs, tmp_path, **{"auto.offset.reset": "latest"})
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        # RUNNING: partitions assigned; the position is resolved on the first fetch
        deadline = time.monotonic() + 30
        while not app.metrics.lag and time.monotonic() < deadline:
            time.sleep(0.05)
        _produce(bs, src, ["new1", "new2"])
        got = _read_all(bs, dst, 2)
    finally:
        app.close(timeout=30)
    assert [m.value() for m in got] == [b"NEW1", b"NEW2"]


def test_reported_lag_is_the_distance_to_the_end_listoffsets_gives(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """An app stopped part-way: its lag gauge, the committed offset and ListOffsets agree."""
    bs = kafka_broker.bootstrap_servers
    src, dst = unique_name("in"), unique_name("out")
    _topics(bs, src, dst)
    _produce(bs, src, [f"v{i}" for i in range(50)])
    app = _app(src, dst, unique_name("app"), bs, tmp_path)
    app.start()
    try:
        _read_all(bs, dst, 50)
        deadline = time.monotonic() + 30
        while app.metrics.lag.get((src, 0)) != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert app.metrics.lag.get((src, 0)) == 0
    finally:
        app.close(timeout=30)
    c = Consumer({"bootstrap.servers": bs, "group.id": app.app_id})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(src, 0), timeout=10, cached=False)
        committed = c.committed([TopicPartition(src, 0)], timeout=10)[0].offset
    finally:
        c.close()
    assert (low, high, committed) == (0, 50, 50)
