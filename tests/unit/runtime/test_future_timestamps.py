"""A record that moves stream time far past the wall clock is counted and logged (rate-limited),
and stream time still moves there, as in Kafka Streams (kstream.runtime.future_timestamps).

The task here is the engine's own `Task`, run by the test driver; the watch is wired to it as
the stream thread wires it, with a clock the test moves.
"""

from __future__ import annotations

import logging

import pytest

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.duration import format_ms
from kstream.errors import ConfigError
from kstream.metrics import Metrics
from kstream.ratelimit import RateLimiter
from kstream.records import Record
from kstream.runtime.future_timestamps import FutureTimestamps, iso, movers, warning
from kstream.testing.driver import TopologyTestDriver
from kstream.topology.task import NO_LIMIT

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def rec(offset: int, ts: int, key: str = "k") -> Record:
    return Record(key.encode(), b"v", ts, (), "in", 0, offset)


def windowed_count() -> StreamBuilder:
    b = StreamBuilder()
    counts = (
        b.stream("in", "string", "string")
        .group_by_key()
        .windowed_by(TimeWindows.of("1m"))
        .count(store="counts")
    )
    counts.to_stream().to("out", "auto", "long")
    return b


def test_the_rate_limiter_lets_one_event_per_interval_and_key_through_and_counts_the_rest() -> None:
    clock = Clock()
    limiter = RateLimiter(60.0, clock)
    assert limiter.allow("0_0") == 0
    assert limiter.allow("0_0") is None
    assert limiter.allow("0_0", 3) is None
    assert limiter.allow("0_1") == 0  # another task has its own minute
    clock.now += 59.9
    assert limiter.allow("0_0") is None
    clock.now += 0.1
    assert limiter.allow("0_0") == 5  # held back: 1 + 3 + 1
    assert limiter.allow("0_0") is None
    clock.now += 600
    assert limiter.allow("0_0") == 1
    with pytest.raises(ValueError, match="negative"):
        RateLimiter(-1)


def test_movers_are_the_records_that_take_stream_time_to_a_new_high_past_the_limit() -> None:
    run = [rec(0, 10), rec(1, 500), rec(2, 300), rec(3, 500), rec(4, 900), rec(5, 100)]
    assert [r.offset for r in movers(run, -1, 200)] == [1, 4]
    assert [r.offset for r in movers(run, 600, 200)] == [4]  # 500 does not move 600
    assert movers(run, -1, 1_000) == []


def test_a_far_future_record_is_counted_and_warned_once_a_minute_and_later_records_are_late(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    metrics = Metrics("app")
    watch = FutureTimestamps(DAY, metrics, clock=clock)
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    with TopologyTestDriver(windowed_count(), app_id="app") as d:
        task = d.tasks[0]
        task.on_future, task.future_limit = watch, watch.limit(NOW)
        # one batch, one run: an hour ahead is within the bound; ten days ahead is not; a
        # record of now is then late for its window (dropped, as Kafka Streams does); one
        # further ahead moves stream time again and is counted, but not warned about
        task.process([rec(0, NOW + 3_600_000), rec(1, NOW + 10 * DAY), rec(2, NOW)])
        task.process([rec(3, NOW + 10 * DAY + 1_000)])
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1, warned
        assert warned[0].startswith("task 0_0: record topic 'in' partition 0 offset 1 has ")
        assert f"timestamp {NOW + 10 * DAY} (2026-01-11T00:00:00.000Z)" in warned[0]
        assert "10 days ahead of the wall clock (2026-01-01T00:00:00.000Z" in warned[0]
        assert "future_timestamp_warning is 1 day" in warned[0]
        assert metrics.future_timestamps == {("in", 0): 2}
        assert task.stream_time == NOW + 10 * DAY + 1_000  # the semantics are Kafka's
        assert d.dropped_records() == {"late_record": 1}
        out = d.output_topic("out", "auto", "long").read_key_values()
        assert [w.start for w, _ in out] == [NOW + 3_600_000, NOW + 10 * DAY, NOW + 10 * DAY]

        clock.now += 61  # a minute on: the next one is warned about, with the one held back
        caplog.clear()
        task.future_limit = watch.limit(NOW + 61_000)
        task.process([rec(4, NOW + 20 * DAY)])
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1 and "offset 4" in warned[0], warned
        assert "; 1 other record(s) of the task did the same, not logged" in warned[0]
        assert metrics.future_timestamps == {("in", 0): 3}


def test_the_records_of_a_depth_first_source_are_checked_one_by_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A source whose records re-converge runs one record at a time (`Task._one` per record):
    the check sits on that path too."""
    b = StreamBuilder()
    s = b.stream("in", "string", "string")
    s.merge(s.map_values(str.upper)).to("out", "string", "string")
    metrics = Metrics("app")
    watch = FutureTimestamps(DAY, metrics)
    caplog.set_level(logging.WARNING, logger="kstream.runtime")
    with TopologyTestDriver(b, app_id="app") as d:
        task = d.tasks[0]
        task.on_future, task.future_limit = watch, watch.limit(NOW)
        task.process([rec(0, NOW), rec(1, NOW + 2 * DAY), rec(2, NOW + 3 * DAY)])
        assert len(d.output_topic("out", "string", "string").read_key_values()) == 6
    assert metrics.future_timestamps == {("in", 0): 2}
    assert ["offset 1 " in r.getMessage() for r in caplog.records] == [True]


def test_off_means_no_limit_and_no_call() -> None:
    assert FutureTimestamps(0, Metrics("app")).limit(NOW) == NO_LIMIT
    calls: list[int] = []
    with TopologyTestDriver(windowed_count(), app_id="app") as d:
        task = d.tasks[0]
        assert task.future_limit == NO_LIMIT  # the driver (and Spark) watch nothing
        task.on_future = lambda t, run: calls.append(len(run))
        task.process([rec(0, NOW + 1_000 * DAY)])
        task.future_limit = NOW + DAY
        task.process([rec(1, NOW + 1_001 * DAY), rec(2, NOW + 1_002 * DAY)])
        task.process([rec(3, NOW)])  # stream time does not move: no call
    assert calls == [2]


def test_the_warning_reads_well_for_microsecond_timestamps() -> None:
    micros = NOW * 1000  # a producer that wrote microseconds
    text = warning("1_3", Record(b"k", b"v", micros, (), "clicks", 3, 42), NOW, DAY, 0, 60.0)
    assert "topic 'clicks' partition 3 offset 42" in text
    assert f"timestamp {micros} (after year 9999)" in text
    assert "55944 years ahead of the wall clock" in text
    assert "other record(s)" not in text
    assert "warned at most every 60 s per task" in text
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert [format_ms(x) for x in (100, 61_234, 720_000, 3 * 3_600_000, DAY, 36 * 3_600_000)] == [
        "0.1 s",
        "61.2 s",
        "12 min",
        "3 h",
        "1 day",
        "1.5 days",
    ]


def test_future_timestamp_warning_is_a_duration_that_0_or_none_turns_off() -> None:
    assert Config().future_timestamp_warning == DAY
    assert Config.from_mapping({"future_timestamp_warning": "2h"}).future_timestamp_warning == (
        7_200_000
    )
    assert Config.from_mapping({"future_timestamp_warning": None}).future_timestamp_warning == 0
    assert Config.from_mapping({"future_timestamp_warning": 0}).future_timestamp_warning == 0
    with pytest.raises(ConfigError, match="future_timestamp_warning: cannot parse duration"):
        Config.from_mapping({"future_timestamp_warning": "soon"})
    with pytest.raises(ConfigError, match="future_timestamp_warning: duration must not be neg"):
        Config.from_mapping({"future_timestamp_warning": -1})


def test_the_counter_is_exposed_per_input_partition_from_zero() -> None:
    m = Metrics("app")
    m.set_assigned([("in", 0), ("in", 1)])
    m.future_timestamp("in", 1, 2)
    text = m.render().decode()
    assert 'kstream_records_future_timestamp_total{app_id="app",instance_id="",partition="0",' in (
        text
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("kstream_records_future_timestamp")]
    assert [ln.rsplit(" ", 1)[1] for ln in lines] == ["0.0", "2.0"]
