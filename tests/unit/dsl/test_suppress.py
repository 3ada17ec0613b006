"""`KTable.suppress`: outputs equal to Kafka Streams' own tests.

Scenarios mirror `SuppressScenarioTest` (DSL level, through the test driver) and the processor
cases of `KTableSuppressProcessorTest`; each test names the Kafka test it mirrors. Expected
outputs are Kafka's (key, value, timestamp) triples, written as Kafka writes windowed keys
(`[key@start/end]`).
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream.dsl import KTable, StreamBuilder
from kstream.dsl.suppress import BufferConfig, BufferFullError, Suppressed
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.errors import ConfigError, TopologyError
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

unbounded = BufferConfig.unbounded
until_window_closes = Suppressed.until_window_closes
until_time_limit = Suppressed.until_time_limit
KVT = tuple[Any, Any, int]


def drain(d: TopologyTestDriver, topic: str, value_serde: str = "long") -> list[KVT]:
    return [
        (r.key, r.value, r.timestamp)
        for r in d.output_topic(topic, "string", value_serde).read_records()
    ]


def windowed_name(w: Windowed, _v: Any) -> str:
    return f"[{w.key}@{w.start}/{w.end}]"


def raw_and_suppressed(table: KTable, suppressed: Suppressed, windowed: bool = False) -> None:
    """Kafka's scenario wiring: the table to output-raw, its suppression to output-suppressed."""
    mapper = windowed_name if windowed else None
    table.suppress(suppressed).to_stream(mapper).to("output-suppressed", "string", "long")
    table.to_stream(mapper).to("output-raw", "string", "long")


def value_counts(b: StreamBuilder) -> KTable:
    """`SuppressScenarioTest`'s table: input regrouped by value, counted."""
    return (
        b.table("input", "string", "string")
        .group_by(lambda k, v: (v, k), key_serde="string", value_serde="string")
        .count()
    )


# --- SuppressScenarioTest ----------------------------------------------------------------------


def test_should_immediately_emit_events_with_zero_emit_after() -> None:
    """SuppressScenarioTest.shouldImmediatelyEmitEventsWithZeroEmitAfter"""
    b = StreamBuilder()
    raw_and_suppressed(value_counts(b), until_time_limit(0, unbounded()))
    with TopologyTestDriver(b) as d:
        src = d.input_topic("input", "string", "string")
        src.pipe("k1", "v1", timestamp=0)
        src.pipe("k1", "v2", timestamp=1)
        src.pipe("k2", "v1", timestamp=2)
        expected = [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        assert drain(d, "output-raw") == expected
        assert drain(d, "output-suppressed") == expected
        src.pipe("x", "x", timestamp=3)
        assert drain(d, "output-raw") == [("x", 1, 3)]
        assert drain(d, "output-suppressed") == [("x", 1, 3)]
        src.pipe("x", "y", timestamp=4)
        assert drain(d, "output-raw") == [("x", 0, 4), ("y", 1, 4)]
        assert drain(d, "output-suppressed") == [("x", 0, 4), ("y", 1, 4)]


def test_should_suppress_intermediate_events_with_time_limit() -> None:
    """SuppressScenarioTest.shouldSuppressIntermediateEventsWithTimeLimit"""
    b = StreamBuilder()
    raw_and_suppressed(value_counts(b), until_time_limit(2, unbounded()))
    with TopologyTestDriver(b) as d:
        src = d.input_topic("input", "string", "string")
        src.pipe("k1", "v1", timestamp=0)
        src.pipe("k1", "v2", timestamp=1)
        src.pipe("k2", "v1", timestamp=2)
        assert drain(d, "output-raw") == [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        assert drain(d, "output-suppressed") == [("v1", 1, 2)]
        src.pipe("tick", "tick", timestamp=3)
        assert drain(d, "output-raw") == [("tick", 1, 3)]
        assert drain(d, "output-suppressed") == [("v2", 1, 1)]
        src.pipe("tick", "tock", timestamp=4)
        assert drain(d, "output-raw") == [("tick", 0, 4), ("tock", 1, 4)]
        assert drain(d, "output-suppressed") == []


def test_should_suppress_intermediate_events_with_record_limit() -> None:
    """SuppressScenarioTest.shouldSuppressIntermediateEventsWithRecordLimit"""
    b = StreamBuilder()
    limit = BufferConfig.max_records(1).emit_early_when_full()
    raw_and_suppressed(value_counts(b), until_time_limit(2**63 - 1, limit))
    with TopologyTestDriver(b) as d:
        src = d.input_topic("input", "string", "string")
        src.pipe("k1", "v1", timestamp=0)
        src.pipe("k1", "v2", timestamp=1)
        src.pipe("k2", "v1", timestamp=2)
        assert drain(d, "output-raw") == [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        # v1 is emitted early when v2 arrives, then v2 when v1 comes back
        assert drain(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]
        src.pipe("x", "x", timestamp=3)
        assert drain(d, "output-raw") == [("x", 1, 3)]
        assert drain(d, "output-suppressed") == [("v1", 1, 2)]


def test_should_suppress_intermediate_events_with_bytes_limit() -> None:
    """SuppressScenarioTest.shouldSuppressIntermediateEventsWithBytesLimit"""
    b = StreamBuilder()
    limit = BufferConfig.max_bytes(200).emit_early_when_full()
    counts = (
        b.table("input", "string", "string")
        .group_by(lambda k, v: (v, k), key_serde="string", value_serde="string")
        .count()
    )
    raw_and_suppressed(counts, until_time_limit(2**63 - 1, limit))
    # the byte estimate counts the record's topic, named after the app id: Kafka's driver's
    with TopologyTestDriver(b, app_id="dummy-topology-test-driver-app-id-0") as d:
        src = d.input_topic("input", "string", "string")
        src.pipe("k1", "v1", timestamp=0)
        src.pipe("k1", "v2", timestamp=1)
        src.pipe("k2", "v1", timestamp=2)
        assert drain(d, "output-raw") == [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        assert drain(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]
        src.pipe("x", "x", timestamp=3)
        assert drain(d, "output-raw") == [("x", 1, 3)]
        assert drain(d, "output-suppressed") == [("v1", 1, 2)]


def _windowed_counts(b: StreamBuilder, windows: Any) -> KTable:
    return (
        b.stream("input", "string", "string")
        .group_by(lambda k, v: k, key_serde="string", value_serde="string")
        .windowed_by(windows)
        .count(store="counts")
    )


def _pipe_all(d: TopologyTestDriver, events: list[tuple[str, int]]) -> None:
    src = d.input_topic("input", "string", "string")
    for k, ts in events:
        src.pipe(k, "v1", timestamp=ts)


def test_should_support_final_results_for_time_windows() -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForTimeWindows"""
    b = StreamBuilder()
    counts = _windowed_counts(b, TimeWindows.of(2, grace=1))
    raw_and_suppressed(counts, until_window_closes(unbounded()), windowed=True)
    with TopologyTestDriver(b) as d:
        _pipe_all(d, [("k1", 0), ("k1", 1), ("k1", 2), ("k1", 1), ("k1", 0), ("k1", 5)])
        _pipe_all(d, [("k1", 0)])  # late: dropped
        assert drain(d, "output-raw") == [
            ("[k1@0/2]", 1, 0),
            ("[k1@0/2]", 2, 1),
            ("[k1@2/4]", 1, 2),
            ("[k1@0/2]", 3, 1),
            ("[k1@0/2]", 4, 1),
            ("[k1@4/6]", 1, 5),
        ]
        assert drain(d, "output-suppressed") == [("[k1@0/2]", 4, 1), ("[k1@2/4]", 1, 2)]


def test_should_support_final_results_for_time_windows_with_large_jump() -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForTimeWindowsWithLargeJump"""
    b = StreamBuilder()
    counts = _windowed_counts(b, TimeWindows.of(2, grace=2))
    raw_and_suppressed(counts, until_window_closes(unbounded()), windowed=True)
    with TopologyTestDriver(b) as d:
        _pipe_all(d, [("k1", t) for t in (0, 1, 2, 0, 3, 0, 4, 0, 30)])
        assert drain(d, "output-raw") == [
            ("[k1@0/2]", 1, 0),
            ("[k1@0/2]", 2, 1),
            ("[k1@2/4]", 1, 2),
            ("[k1@0/2]", 3, 1),
            ("[k1@2/4]", 2, 3),
            ("[k1@0/2]", 4, 1),
            ("[k1@4/6]", 1, 4),
            ("[k1@30/32]", 1, 30),
        ]
        assert drain(d, "output-suppressed") == [
            ("[k1@0/2]", 4, 1),
            ("[k1@2/4]", 2, 3),
            ("[k1@4/6]", 1, 4),
        ]


def test_should_support_final_results_for_sliding_windows() -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForSlidingWindows"""
    b = StreamBuilder()
    counts = _windowed_counts(b, SlidingWindows.of(5, grace=15))
    raw_and_suppressed(counts, until_window_closes(unbounded()), windowed=True)
    with TopologyTestDriver(b) as d:
        _pipe_all(d, [("k1", t) for t in (10, 11, 10, 13, 10, 24, 5, 7, 90)])
        assert drain(d, "output-suppressed") == [
            ("[k1@5/10]", 5, 10),
            ("[k1@6/11]", 5, 11),
            ("[k1@8/13]", 5, 13),
            ("[k1@11/16]", 2, 13),
            ("[k1@12/17]", 1, 13),
            ("[k1@19/24]", 1, 24),
        ]


def test_should_support_final_results_for_session_windows() -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForSessionWindows"""
    b = StreamBuilder()
    counts = _windowed_counts(b, SessionWindows.with_gap(5))
    raw_and_suppressed(counts, until_window_closes(unbounded()), windowed=True)
    with TopologyTestDriver(b) as d:
        _pipe_all(d, [("k1", 0), ("k1", 5), ("k1", 1), ("k2", 11), ("k1", 5), ("k1", 30)])
        assert drain(d, "output-raw") == [
            ("[k1@0/0]", 1, 0),
            ("[k1@0/0]", None, 0),
            ("[k1@0/5]", 2, 5),
            ("[k1@0/5]", None, 5),
            ("[k1@0/5]", 3, 5),
            ("[k2@11/11]", 1, 11),
            ("[k1@30/30]", 1, 30),
        ]
        assert drain(d, "output-suppressed") == [("[k1@0/5]", 3, 5), ("[k2@11/11]", 1, 11)]


def test_should_work_before_group_by() -> None:
    """SuppressScenarioTest.shouldWorkBeforeGroupBy"""
    b = StreamBuilder()
    (
        b.table("topic", "string", "string")
        .suppress(until_time_limit(10, unbounded()))
        .group_by(lambda k, v: (k, v), key_serde="string", value_serde="string")
        .count()
        .to_stream()
        .to("output", "string", "long")
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic", "string", "string")
        src.pipe("A", "a", timestamp=0)
        src.pipe("tick", "tick", timestamp=10)
        assert drain(d, "output") == [("A", 1, 0)]


def _joined(suppress_left: bool) -> StreamBuilder:
    b = StreamBuilder()
    left = b.table("left", "string", "string")
    right = b.table("right", "string", "string")
    if suppress_left:
        left = left.suppress(until_time_limit(10, unbounded()))
    else:
        right = right.suppress(until_time_limit(10, unbounded()))
    left.outer_join(right, lambda lv, rv: f"({_j(lv)},{_j(rv)})").to_stream().to(
        "output", "string", "string"
    )
    return b


def _j(v: Any) -> str:
    return "null" if v is None else str(v)


def test_should_work_before_join_right() -> None:
    """SuppressScenarioTest.shouldWorkBeforeJoinRight"""
    with TopologyTestDriver(_joined(suppress_left=False)) as d:
        right = d.input_topic("right", "string", "string")
        left = d.input_topic("left", "string", "string")
        right.pipe("B", "1", timestamp=0)
        right.pipe("A", "1", timestamp=0)
        assert drain(d, "output", "string") == []
        right.pipe("tick", "tick", timestamp=10)
        assert drain(d, "output", "string") == [("A", "(null,1)", 0), ("B", "(null,1)", 0)]
        right.pipe("A", "2", timestamp=11)
        assert drain(d, "output", "string") == []
        left.pipe("A", "a", timestamp=12)  # joins the right side as last emitted
        assert drain(d, "output", "string") == [("A", "(a,1)", 12)]
        left.pipe("B", "b", timestamp=12)  # not buffered: reads through to the table
        assert drain(d, "output", "string") == [("B", "(b,1)", 12)]
        left.pipe("A", "b", timestamp=13)
        assert drain(d, "output", "string") == [("A", "(b,1)", 13)]
        right.pipe("tick", "tick1", timestamp=21)
        assert drain(d, "output", "string") == [
            ("tick", "(null,tick1)", 21),
            ("A", "(b,2)", 13),
        ]


def test_should_work_before_join_left() -> None:
    """SuppressScenarioTest.shouldWorkBeforeJoinLeft"""
    with TopologyTestDriver(_joined(suppress_left=True)) as d:
        right = d.input_topic("right", "string", "string")
        left = d.input_topic("left", "string", "string")
        left.pipe("B", "1", timestamp=0)
        left.pipe("A", "1", timestamp=0)
        assert drain(d, "output", "string") == []
        left.pipe("tick", "tick", timestamp=10)
        assert drain(d, "output", "string") == [("A", "(1,null)", 0), ("B", "(1,null)", 0)]
        left.pipe("A", "2", timestamp=11)
        assert drain(d, "output", "string") == []
        right.pipe("A", "a", timestamp=12)
        assert drain(d, "output", "string") == [("A", "(1,a)", 12)]
        right.pipe("B", "b", timestamp=12)
        assert drain(d, "output", "string") == [("B", "(1,b)", 12)]
        right.pipe("A", "b", timestamp=13)
        assert drain(d, "output", "string") == [("A", "(1,b)", 13)]
        left.pipe("tick", "tick1", timestamp=21)
        assert drain(d, "output", "string") == [
            ("tick", "(tick1,null)", 21),
            ("A", "(2,b)", 13),
        ]


# --- KTableSuppressProcessorTest ---------------------------------------------------------------


def _table_suppressed(suppressed: Suppressed) -> StreamBuilder:
    b = StreamBuilder()
    t = b.table("in", "string", "long")
    t.suppress(suppressed).to_stream().to("out", "string", "long")
    return b


def test_zero_time_limit_should_immediately_emit() -> None:
    """KTableSuppressProcessorTest.zeroTimeLimitShouldImmediatelyEmit"""
    with TopologyTestDriver(_table_suppressed(until_time_limit(0, unbounded()))) as d:
        d.input_topic("in", "string", "long").pipe("hey", 42, timestamp=7)
        assert drain(d, "out") == [("hey", 42, 7)]


def test_intermediate_suppression_should_buffer_and_emit_later() -> None:
    """KTableSuppressProcessorTest.intermediateSuppressionShouldBufferAndEmitLater"""
    with TopologyTestDriver(_table_suppressed(until_time_limit(1, unbounded()))) as d:
        src = d.input_topic("in", "string", "long")
        src.pipe("hey", 1, timestamp=0)
        assert drain(d, "out") == []
        src.pipe("tick", 0, timestamp=1)
        assert drain(d, "out") == [("hey", 1, 0)]


def test_suppress_should_not_drop_tombstones_for_ktable() -> None:
    """KTableSuppressProcessorTest.suppressShouldNotDropTombstonesForKTable"""
    limit = until_time_limit(0, BufferConfig.max_records(0))
    with TopologyTestDriver(_table_suppressed(limit)) as d:
        src = d.input_topic("in", "string", "long")
        src.pipe("hey", 5, timestamp=100)
        src.pipe("hey", None, timestamp=100)
        assert drain(d, "out") == [("hey", 5, 100), ("hey", None, 100)]


def test_final_results_drop_tombstones_but_time_limit_does_not() -> None:
    """KTableSuppressProcessorTest.finalResultsShouldDropTombstonesForSessionWindows and
    suppressShouldNotDropTombstonesForSessionWindows: a merged-away session's delete is
    dropped by until_window_closes, forwarded by until_time_limit."""
    for suppressed, expected in (
        (until_window_closes(unbounded()), [("[k@0/3]", 2, 3)]),
        (
            until_time_limit(0, BufferConfig.max_records(0)),
            [("[k@0/0]", 1, 0), ("[k@0/0]", None, 0), ("[k@0/3]", 2, 3), ("[z@100/100]", 1, 100)],
        ),
    ):
        b = StreamBuilder()
        counts = (
            b.stream("input", "string", "string")
            .group_by_key()
            .windowed_by(SessionWindows.with_gap(5))
            .count()
        )
        counts.suppress(suppressed).to_stream(windowed_name).to("out", "string", "long")
        with TopologyTestDriver(b) as d:
            _pipe_all(d, [("k", 0), ("k", 3), ("z", 100)])
            assert drain(d, "out") == expected


def test_final_results_with_zero_grace_buffer_until_window_end() -> None:
    """KTableSuppressProcessorTest.finalResultsWithZeroGraceShouldStillBufferUntilTheWindowEnd
    and finalResultsWithZeroGraceAtWindowEndShouldImmediatelyEmit"""
    b = StreamBuilder()
    counts = _windowed_counts(b, TimeWindows.of(100))
    counts.suppress(until_window_closes(unbounded())).to_stream(windowed_name).to(
        "out", "string", "long"
    )
    with TopologyTestDriver(b) as d:
        _pipe_all(d, [("hey", 5)])
        assert drain(d, "out") == []
        _pipe_all(d, [("dummy", 100)])
        assert drain(d, "out") == [("[hey@0/100]", 1, 5)]


def test_suppress_should_emit_when_over_byte_capacity() -> None:
    """KTableSuppressProcessorTest.suppressShouldEmitWhenOverByteCapacity: maxBytes(60), the
    key "hey" takes 8 (time) + 3 + 8 (prior = old) + 20 (context) + the topic name."""
    limit = until_time_limit(100 * 86_400_000, BufferConfig.max_bytes(60 + 2 * len("in")))
    with TopologyTestDriver(_table_suppressed(limit)) as d:
        src = d.input_topic("in", "string", "long")
        src.pipe("hey", 1, timestamp=100)
        src.pipe("hey", None, timestamp=100)  # buffered: new None, old 1
        src.pipe("dummyKey", 1, timestamp=101)
        src.pipe("dummyKey", None, timestamp=101)
        assert drain(d, "out") == [("hey", None, 100)]


@pytest.mark.parametrize("limit", [BufferConfig.max_records(1), BufferConfig.max_bytes(60)])
def test_suppress_should_shut_down_when_over_capacity(limit: BufferConfig) -> None:
    """KTableSuppressProcessorTest.suppressShouldShutDownWhenOverRecordCapacity and
    suppressShouldShutDownWhenOverByteCapacity"""
    sup = until_time_limit(100 * 86_400_000, limit.shut_down_when_full())
    with TopologyTestDriver(_table_suppressed(sup)) as d:
        src = d.input_topic("in", "string", "long")
        src.pipe("hey", 1, timestamp=100)
        src.pipe("hey", None, timestamp=100)
        with pytest.raises(BufferFullError, match="buffer exceeded its max capacity"):
            src.pipe("dummyKey", 1, timestamp=100)
            src.pipe("dummyKey", None, timestamp=100)


# --- building ----------------------------------------------------------------------------------


def test_names_follow_kafka() -> None:
    """KTableImpl.suppress: `KTABLE-SUPPRESS-<n>` and `KTABLE-SUPPRESS-STATE-STORE-<n>`, or the
    given name and `<name>-store`."""
    b = StreamBuilder()
    t = b.table("in", "string", "long")
    s = t.suppress(until_time_limit(1, unbounded()))
    n = int(s._node.rsplit("-", 1)[1])
    assert s._node == f"KTABLE-SUPPRESS-{n:010d}"
    assert f"KTABLE-SUPPRESS-STATE-STORE-{n + 1:010d}" in b.build().stores
    named = t.suppress(until_time_limit(1, unbounded()).with_name("rate"))
    assert named._node == "rate"
    assert "rate-store" in b.build().stores


def test_until_window_closes_needs_a_windowed_table_and_a_strict_buffer() -> None:
    b = StreamBuilder()
    with pytest.raises(TopologyError, match="windowed aggregations"):
        b.table("in").suppress(until_window_closes(unbounded()))
    with pytest.raises(ConfigError, match="strict buffer"):
        until_window_closes(BufferConfig.max_records(3))
    with pytest.raises(ConfigError, match="negative"):
        until_time_limit(-1, unbounded())
    # a filter between the aggregation and the suppression keeps the window's grace
    counts = _windowed_counts(b, TimeWindows.of(10, grace=3))
    filtered = counts.filter(lambda k, v: v > 0)
    assert filtered.suppress(until_window_closes(unbounded()))._node.startswith("KTABLE-SUPPRESS")


def test_restart_restores_the_buffer(tmp_path: Any) -> None:
    """A buffered update survives a restart of the task on the same state (lmdb backend) and
    is emitted once, when stream time passes it."""
    b = _table_suppressed(until_time_limit(10, unbounded()))
    state = str(tmp_path)
    with TopologyTestDriver(b, state_dir=state, default_backend="lmdb") as d:
        src = d.input_topic("in", "string", "long")
        src.pipe("a", 1, timestamp=0)
        src.pipe("a", 2, timestamp=5)
        assert drain(d, "out") == []
    with TopologyTestDriver(b, state_dir=state, default_backend="lmdb") as d:
        d.input_topic("in", "string", "long").pipe("b", 3, timestamp=10)
        assert drain(d, "out") == [("a", 2, 5)]


def test_suppress_builds_on_spark() -> None:
    """Spark runs suppress, its buffer in Spark's state (tests/spark/test_suppress_on_spark.py):
    its plan builds, the suppressing sub-topology stateful."""
    from kstream.spark.tasks import build_task_plan

    b = _table_suppressed(until_time_limit(10, unbounded()))
    plan = build_task_plan(b.build(), "app")
    assert plan.stateful
