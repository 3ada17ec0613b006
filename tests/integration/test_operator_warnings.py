"""Conditions that used to pass in silence are logged and counted, on the real broker: a record
that moves stream time far past the wall clock, and a rebalance that lasts too long."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from support.groups import fast_group

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState

DAY = 86_400_000


def _wait(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _committed(bs: str, topic: str, n: int) -> list[tuple[int, int]]:
    """(timestamp, long value) of the first `n` committed records of partition 0 of `topic`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "unused",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msg in consumer.consume(n, 0.5):
                value = msg.value()
                if msg.error() is None and value is not None:
                    out.append((msg.timestamp()[1], int.from_bytes(value, "big", signed=True)))
    finally:
        consumer.close()
    return out


def test_a_far_future_timestamp_is_warned_about_once_and_counted_and_later_records_are_late(
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bs = kafka_broker.bootstrap_servers
    src, dst = unique_name("clicks"), unique_name("counts")
    admin = Admin(bs)
    # Kafka 4 brokers refuse CreateTime records more than an hour ahead of their clock
    # (message.timestamp.after.max.ms); a topic that allows them is how far-future records
    # reach an app there (older brokers, and Tansu, allow them everywhere)
    anything = {"message.timestamp.after.max.ms": str(2**63 - 1)}
    admin.create_topic(src, 1, anything)
    admin.create_topic(dst, 1, anything)
    b = StreamBuilder()
    (
        b.stream(src, key_serde="string", value_serde="string")
        .group_by_key()
        .windowed_by(TimeWindows.of("1m"))
        .count(store="counts")
        .to_stream()
        .to(dst, key_serde="auto", value_serde="long")
    )
    base = (int(time.time() * 1000) // 60_000 - 1) * 60_000  # a minute ago, on the window grid
    p = Producer(bs)
    for ts in (base, base + 10 * DAY, base + 1_000, base + 10 * DAY + 1_000):
        p.produce(src, b"click", key=b"user", timestamp=ts)
    p.flush()
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    app = App(b, unique_name("app"), bs, config=fast_group({"state_dir": str(tmp_path)}))
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        m = app.metrics
        # counts flow to the metrics with the gauges, twice a second
        _wait(
            "4 records processed, one dropped as late",
            lambda: m.processed_total >= 4 and m.dropped_by_reason["late_record"] >= 1,
        )
        _wait(
            "the far-future window committed",
            lambda: (
                app.store("counts").fetch("user", base, base + 11 * DAY) == [(base + 10 * DAY, 2)]
            ),
        )
    finally:
        assert app.close(timeout=30)
    assert app.error is None
    future = [r.getMessage() for r in caplog.records if "ahead of the wall clock" in r.getMessage()]
    # the record at offset 1 moved stream time ten days ahead; the one at offset 3 moved it
    # further and is counted, but the task warned less than a minute before
    assert len(future) == 1, future
    assert future[0].startswith(f"task 0_0: record topic {src!r} partition 0 offset 1 has ")
    assert f"timestamp {base + 10 * DAY} (" in future[0]
    assert re.search(r", 10(\.0)? days ahead of the wall clock \(\d{4}-", future[0]), future[0]
    assert m.future_timestamps == {(src, 0): 2}
    # Kafka's semantics: the record of a second after the first one is late (its window closed
    # in stream time) and dropped; the far-future window counts two records, and the first
    # window is gone from the store (past its retention in stream time)
    assert m.dropped_by_reason["late_record"] == 1
    assert _committed(bs, dst, 3) == [
        (base, 1),
        (base + 10 * DAY, 1),
        (base + 10 * DAY + 1_000, 2),
    ]
    text = m.render().decode()
    assert f'kstream_records_future_timestamp_total{{app_id="{app.app_id}",instance_id="",' in text


def test_a_rebalance_held_up_by_a_busy_member_is_warned_about_while_it_lasts(
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Member A is deep in a batch (a record takes 6 s) when member B joins: the group waits
    for A to poll and rejoin, B sits in REBALANCING and says so every 1.5 s."""
    bs = kafka_broker.bootstrap_servers
    src, dst, app_id = unique_name("jobs"), unique_name("done"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    busy, done = threading.Event(), threading.Event()

    def work(value: str) -> str:
        if value == "slow" and not busy.is_set():
            busy.set()
            time.sleep(6)
            done.set()
        return value

    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").map_values(work).to(
        dst, key_serde="string", value_serde="string"
    )
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    # eager: the group then waits for the busy member's poll to finish the join. Under the
    # cooperative protocol librdkafka rejoins in the background, so the join completes (the
    # new member RUNNING with no task) and only the partitions' hand-over waits for the poll.
    eager = {"rebalance_protocol": "eager"}
    first = App(b, app_id, bs, config=fast_group({"state_dir": str(tmp_path / "a"), **eager}))
    second = App(
        b,
        app_id,
        bs,
        config=fast_group(
            {"state_dir": str(tmp_path / "b"), "slow_rebalance_warning": "1.5s", **eager}
        ),
    )
    first.start()
    try:
        assert first.wait_for(AppState.RUNNING, timeout=60)
        p = Producer(bs)
        p.produce(src, b"slow", key=b"job", partition=0)
        p.flush()
        assert busy.wait(30), "the first member never got the slow record"
        second.start()
        _wait("a slow-rebalance warning", lambda: second.metrics.slow_rebalances_total == 1, 20)
        assert second.state == AppState.REBALANCING
        assert not done.is_set(), "the busy member finished before the warning"
        assert second.metrics.rebalance_seconds() >= 1.5
        assert second.wait_for(AppState.RUNNING, timeout=60)
        assert done.is_set()
    finally:
        second.close(timeout=30)
        first.close(timeout=30)
    slow = [r.getMessage() for r in caplog.records if "has been rebalancing for" in r.getMessage()]
    assert len(slow) >= 2, slow  # at 1.5 s, 3 s, ... while the first member is busy
    lasted = [float(re.search(r"rebalancing for ([0-9.]+) s,", t).group(1)) for t in slow]  # type: ignore[union-attr]
    assert lasted[0] >= 1.5 and lasted[1] >= 3.0, slow
    assert slow[0].startswith(f"consumer group {app_id!r} has been rebalancing for ")
    assert "longer than slow_rebalance_warning (1.5 s)" in slow[0]
    assert "waiting for its members to join and sync" in slow[0]
    assert second.metrics.slow_rebalances_total == 1  # one slow rebalance, several warnings
    assert second.metrics.rebalance_seconds() == 0.0
