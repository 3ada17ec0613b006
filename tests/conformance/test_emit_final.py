"""Final window results (`emit="final"`), ported from Kafka Streams' own cases.

kstream's `emit="final"` is Kafka's `EmitStrategy.onWindowClose()`; for these topologies it
gives the same records as `suppress(untilWindowCloses(unbounded()))`, so the window-close cases
of `SuppressScenarioTest` apply, with their raw (emit on update, cache disabled) outputs. The
`KStreamWindowAggregateTest` emit-final cases run with Kafka's emit interval 0 (every record
checks for closed windows), which is what kstream does. A final result carries the window's
largest record timestamp (a session: its end).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

W = Windowed
Out = list[tuple[Any, Any, int]]
Events = list[tuple[str, str, int]]


def topology(build: Callable[[Any], Any]) -> StreamBuilder:
    b = StreamBuilder()
    build(b.stream("in", "string", "string").group_by_key()).to_stream().to("out", "auto", "auto")
    return b


def pipe(d: TopologyTestDriver, events: Events) -> Out:
    d.input_topic("in", "string", "string").pipe_many(events)
    records = d.output_topic("out", "auto", "auto").read_records()
    return [(r.key, r.value, r.timestamp) for r in records]


def run(events: Events, build: Callable[[Any], Any]) -> tuple[Out, dict[str, int]]:
    """Pipe (key, value, ts) events; the emitted (key, value, ts) and dropped-record counts."""
    with TopologyTestDriver(topology(build)) as d:
        return pipe(d, events), d.dropped_records()


def counts(windows: Any, emit: str) -> Callable[[Any], Any]:
    return lambda g: g.windowed_by(windows).count(emit=emit)


def concat(windows: Any, emit: str) -> Callable[[Any], Any]:
    """Kafka's MockInitializer.STRING_INIT with MockAggregator.TOSTRING_ADDER."""
    return lambda g: g.windowed_by(windows).aggregate(
        lambda: "0", lambda _k, v, agg: f"{agg}+{v}", emit=emit
    )


K1 = "k1"
TIME_EVENTS = [(K1, "v1", t) for t in (0, 1, 2, 1, 0, 5, 0)]
LARGE_JUMP_EVENTS = [(K1, "v1", t) for t in (0, 1, 2, 0, 3, 0, 4, 0, 30)]
SLIDING_EVENTS = [(K1, "v1", t) for t in (10, 11, 10, 13, 10, 24, 5, 7, 90)]
# the second k1@5 arrives after k2@11 closed k1's session [0, 5]: it is late
SESSION_EVENTS = [
    (K1, "v1", 0), (K1, "v1", 5), (K1, "v1", 1), ("k2", "v1", 11), (K1, "v1", 5), (K1, "v1", 30),
]  # fmt: skip

CASES = [
    pytest.param(
        TIME_EVENTS,
        TimeWindows.of(2, grace=1),
        [
            (W(K1, 0, 2), 1, 0),
            (W(K1, 0, 2), 2, 1),
            (W(K1, 2, 4), 1, 2),
            (W(K1, 0, 2), 3, 1),
            (W(K1, 0, 2), 4, 1),
            (W(K1, 4, 6), 1, 5),
        ],
        [(W(K1, 0, 2), 4, 1), (W(K1, 2, 4), 1, 2)],
        {"late_record": 1},
        id="SuppressScenarioTest.shouldSupportFinalResultsForTimeWindows",
    ),
    pytest.param(
        LARGE_JUMP_EVENTS,
        TimeWindows.of(2, grace=2),
        [
            (W(K1, 0, 2), 1, 0),
            (W(K1, 0, 2), 2, 1),
            (W(K1, 2, 4), 1, 2),
            (W(K1, 0, 2), 3, 1),
            (W(K1, 2, 4), 2, 3),
            (W(K1, 0, 2), 4, 1),
            (W(K1, 4, 6), 1, 4),
            (W(K1, 30, 32), 1, 30),
        ],
        [(W(K1, 0, 2), 4, 1), (W(K1, 2, 4), 2, 3), (W(K1, 4, 6), 1, 4)],
        {"late_record": 1},
        id="SuppressScenarioTest.shouldSupportFinalResultsForTimeWindowsWithLargeJump",
    ),
    pytest.param(
        SLIDING_EVENTS,
        SlidingWindows.of(5, grace=15),
        [
            (W(K1, 5, 10), 1, 10),
            (W(K1, 11, 16), 1, 11),
            (W(K1, 6, 11), 2, 11),
            (W(K1, 6, 11), 3, 11),
            (W(K1, 5, 10), 2, 10),
            (W(K1, 11, 16), 2, 13),
            (W(K1, 12, 17), 1, 13),
            (W(K1, 8, 13), 4, 13),
            (W(K1, 8, 13), 5, 13),
            (W(K1, 6, 11), 4, 11),
            (W(K1, 5, 10), 3, 10),
            (W(K1, 19, 24), 1, 24),
            (W(K1, 5, 10), 4, 10),
            (W(K1, 6, 11), 5, 11),
            (W(K1, 5, 10), 5, 10),
            (W(K1, 85, 90), 1, 90),
        ],
        [
            (W(K1, 5, 10), 5, 10),
            (W(K1, 6, 11), 5, 11),
            (W(K1, 8, 13), 5, 13),
            (W(K1, 11, 16), 2, 13),
            (W(K1, 12, 17), 1, 13),
            (W(K1, 19, 24), 1, 24),
        ],
        # 5 and 7 arrive at stream time 24: their own left windows [0,5] and [2,7] are closed
        {"expired_window": 2},
        id="SuppressScenarioTest.shouldSupportFinalResultsForSlidingWindows",
    ),
    pytest.param(
        SESSION_EVENTS,
        SessionWindows.with_gap(5),
        [
            (W(K1, 0, 0), 1, 0),
            (W(K1, 0, 0), None, 0),
            (W(K1, 0, 5), 2, 5),
            (W(K1, 0, 5), None, 5),
            (W(K1, 0, 5), 3, 5),
            (W("k2", 11, 11), 1, 11),
            (W(K1, 30, 30), 1, 30),
        ],
        [(W(K1, 0, 5), 3, 5), (W("k2", 11, 11), 1, 11)],
        {"late_record": 1},
        id="SuppressScenarioTest.shouldSupportFinalResultsForSessionWindows",
    ),
]


@pytest.mark.parametrize(("events", "windows", "raw", "final", "dropped"), CASES)
def test_final_results_match_suppress_until_window_closes(
    events: Events, windows: Any, raw: Out, final: Out, dropped: dict[str, int]
) -> None:
    assert run(events, counts(windows, "update")) == (raw, dropped)
    assert run(events, counts(windows, "final")) == (final, dropped)


HOPPING = TimeWindows.of(10, advance=5, grace=5)


def test_emit_with_interval_0() -> None:
    """KStreamWindowAggregateTest.shouldEmitWithInterval0 (window close)."""
    events = [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)]
    out, _ = run(events, concat(HOPPING, "final"))
    assert out == [
        (W("A", 0, 10), "0+1+1", 5),
        (W("A", 5, 15), "0+1", 5),
        (W("B", 5, 15), "0+2", 10),
    ]


def test_no_final_results_while_stream_time_does_not_close_a_window() -> None:
    """KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough (window close): D@15
    does not move stream time, E@19 moves it without closing another window."""
    with TopologyTestDriver(topology(concat(HOPPING, "final"))) as d:
        assert pipe(d, [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]) == [
            (W("A", 0, 10), "0+1", 0),
            (W("B", 0, 10), "0+2", 5),
        ]
        assert pipe(d, [("D", "4", 15)]) == []
        assert pipe(d, [("E", "5", 19)]) == []


def test_emit_from_last_emit_time_after_a_restart() -> None:
    """KStreamWindowAggregateTest.shouldEmitFromLastEmitTime: a restarted task resumes from
    the close time it last emitted up to (kept in a changelogged store), so no window is
    emitted twice or skipped; the stored window timestamps survive the restart too."""
    state_dir = tempfile.mkdtemp(prefix="kstream-emit-final-")
    build = topology(concat(HOPPING, "final"))
    with TopologyTestDriver(build, state_dir=state_dir, default_backend="lmdb") as d:
        assert pipe(d, [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]) == [
            (W("A", 0, 10), "0+1", 0),
            (W("B", 0, 10), "0+2", 5),
        ]
    with TopologyTestDriver(build, state_dir=state_dir, default_backend="lmdb") as d:
        assert pipe(d, [("D", "4", 25)]) == [
            (W("B", 5, 15), "0+2", 5),
            (W("C", 10, 20), "0+3", 15),
        ]


def test_join_input_emits_final_windows_with_their_largest_timestamp() -> None:
    """KStreamWindowAggregateTest.testJoin (window close, grace 5), the first table's output:
    A's window [0,10) holds A@0 and A@9, so its final result is stamped 9."""
    with TopologyTestDriver(topology(concat(TimeWindows.of(10, 5, grace=5), "final"))) as d:
        first = [("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 9)]
        assert pipe(d, [*first, ("A", "1", 15)]) == [
            (W("A", 0, 10), "0+1+1", 9),
            (W("B", 0, 10), "0+2", 1),
            (W("C", 0, 10), "0+3", 2),
            (W("D", 0, 10), "0+4", 3),
        ]
        second = [("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14)]
        assert pipe(d, [*second, ("A", "1", 20)]) == [
            (W("A", 5, 15), "0+1+1", 10),
            (W("B", 5, 15), "0+2+2", 13),
            (W("C", 5, 15), "0+3", 14),
            (W("D", 5, 15), "0+4", 12),
        ]


def test_session_final_results_merge_order() -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging
    (window close), without the store's longer retention: sessions close in end order."""
    gap = 5 * 60 * 1000
    events = [
        ("a", "1", 0), ("b", "1", 0), ("c", "1", 0), ("d", "1", 0), ("d", "2", gap // 2),
        ("a", "2", gap + 1), ("b", "2", gap + 1),
        ("a", "3", gap + 1 + gap // 2), ("c", "3", gap + 1 + gap // 2),
    ]  # fmt: skip
    out, dropped = run(events, counts(SessionWindows.with_gap(gap), "final"))
    assert out == [
        (W("a", 0, 0), 1, 0),
        (W("b", 0, 0), 1, 0),
        (W("c", 0, 0), 1, 0),
        (W("d", 0, gap // 2), 2, gap // 2),
    ]
    assert dropped == {}


# docs/differences.md, "Output and emission": a record that jumps ahead makes Kafka's store
# expire closed windows before it reads their final results; kstream emits them all. Each case:
# windows, the two records' times, and the final results kstream emits (Kafka Streams gives
# only those marked True: tests/oracle/test_oracle.py `KAFKA_LOSES` checks that against it).
JUMPS = [
    pytest.param(
        TimeWindows.of(10_000, advance=5_000, grace=2_000),
        (1_000_000_000, 1_000_012_000),
        [(W("a", 999_995_000, 1_000_005_000), False), (W("a", 1_000_000_000, 1_000_010_000), True)],
        id="hopping",
    ),
    pytest.param(
        SlidingWindows.of(4_000, grace=2_000),
        (1_000_000_000, 1_000_012_000),
        [(W("a", 999_996_000, 1_000_000_000), False)],
        id="sliding",
    ),
    pytest.param(TimeWindows.of(5), (1, 12), [(W("a", 0, 5), False)], id="tumbling"),
    pytest.param(
        SessionWindows.with_gap(3),
        (59_999, 60_003),
        [(W("a", 59_999, 59_999), False)],
        id="session",
    ),
]


@pytest.mark.parametrize(("windows", "times", "finals"), JUMPS)
def test_a_jump_in_stream_time_loses_no_final_result(
    windows: Any, times: tuple[int, int], finals: list[tuple[W, bool]]
) -> None:
    """Every window closed by the second record gets its final result (stamped with its
    record's time, 1 record each), although Kafka Streams' default stores have expired the
    ones marked False by the time it reads them (issue 47: kstream keeps its choice)."""
    out, dropped = run([("a", "x", t) for t in times], counts(windows, "final"))
    assert out == [(w, 1, times[0]) for w, _ in finals]
    assert dropped == {}
