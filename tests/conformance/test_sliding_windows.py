"""Sliding windowed aggregations, ported from Kafka Streams' `KStreamSlidingWindowAggregateTest`.

Kafka's own assertions compare, per window start, the set of (value, timestamp) updates, or a
list sorted by key and window start. Here each case asserts the full output in the order
kstream forwards it, which is the order of Kafka's `processReverse` (the windows the record
falls into from the latest start down, then the previous record's new right window, the
record's left window, the record's right window). The contents match Kafka's expectations
exactly; the large input is compared the way Kafka compares it (sorted by key and start).
Kafka's cache-disabled results are used: every update is forwarded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import SlidingWindows
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

W = Windowed
S = SlidingWindows
Out = list[tuple[Any, Any, int]]
Events = list[tuple[str, str, int]]


def concat(g: Any, windows: SlidingWindows, emit: str) -> Any:
    """Kafka's MockInitializer.STRING_INIT with MockAggregator.TOSTRING_ADDER."""
    return g.windowed_by(windows).aggregate(lambda: "0", lambda _k, v, a: f"{a}+{v}", emit=emit)


def reduce(g: Any, windows: SlidingWindows, emit: str) -> Any:
    """Kafka's MockReducer.STRING_ADDER."""
    return g.windowed_by(windows).reduce(lambda a, b: f"{a}+{b}", emit=emit)


OPS: dict[str, Callable[[Any, SlidingWindows, str], Any]] = {"concat": concat, "reduce": reduce}


def run(events: Events, build: Callable[[Any], Any]) -> tuple[Out, dict[str, int]]:
    """Pipe (key, value, ts) events; the emitted (key, value, ts) and dropped-record counts."""
    b = StreamBuilder()
    build(b.stream("in", "string", "string").group_by_key()).to_stream().to("out", "auto", "auto")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe_many(events)
        records = d.output_topic("out", "auto", "auto").read_records()
        return [(r.key, r.value, r.timestamp) for r in records], d.dropped_records()


CASES = [
    pytest.param(
        [
            ("A", "1", 10),
            ("A", "2", 10),
            ("A", "3", 14),
            ("A", "4", 15),
            ("A", "5", 20),
            ("A", "6", 22),
            ("A", "7", 30),
        ],
        S.of(10, grace=5),
        "update",
        "concat",
        [
            (W("A", 0, 10), "0+1", 10),
            (W("A", 0, 10), "0+1+2", 10),
            (W("A", 11, 21), "0+3", 14),
            (W("A", 4, 14), "0+1+2+3", 14),
            (W("A", 11, 21), "0+3+4", 15),
            (W("A", 15, 25), "0+4", 15),
            (W("A", 5, 15), "0+1+2+3+4", 15),
            (W("A", 15, 25), "0+4+5", 20),
            (W("A", 11, 21), "0+3+4+5", 20),
            (W("A", 16, 26), "0+5", 20),
            (W("A", 10, 20), "0+1+2+3+4+5", 20),
            (W("A", 16, 26), "0+5+6", 22),
            (W("A", 15, 25), "0+4+5+6", 22),
            (W("A", 21, 31), "0+6", 22),
            (W("A", 12, 22), "0+3+4+5+6", 22),
            (W("A", 21, 31), "0+6+7", 30),
            (W("A", 23, 33), "0+7", 30),
            (W("A", 20, 30), "0+5+6+7", 30),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testAggregateSmallInput[update]",
    ),
    pytest.param(
        [
            ("A", "1", 10),
            ("A", "2", 10),
            ("A", "3", 14),
            ("A", "4", 15),
            ("A", "5", 20),
            ("A", "6", 22),
            ("A", "7", 30),
        ],
        S.of(10, grace=5),
        "final",
        "concat",
        [
            (W("A", 0, 10), "0+1+2", 10),
            (W("A", 4, 14), "0+1+2+3", 14),
            (W("A", 5, 15), "0+1+2+3+4", 15),
            (W("A", 10, 20), "0+1+2+3+4+5", 20),
            (W("A", 11, 21), "0+3+4+5", 20),
            (W("A", 12, 22), "0+3+4+5+6", 22),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testAggregateSmallInput[final]",
    ),
    pytest.param(
        [
            ("A", "1", 10),
            ("A", "2", 14),
            ("A", "3", 15),
            ("A", "4", 22),
            ("A", "5", 26),
            ("A", "6", 30),
        ],
        S.of(10, grace=5),
        "update",
        "reduce",
        [
            (W("A", 0, 10), "1", 10),
            (W("A", 11, 21), "2", 14),
            (W("A", 4, 14), "1+2", 14),
            (W("A", 11, 21), "2+3", 15),
            (W("A", 15, 25), "3", 15),
            (W("A", 5, 15), "1+2+3", 15),
            (W("A", 15, 25), "3+4", 22),
            (W("A", 16, 26), "4", 22),
            (W("A", 12, 22), "2+3+4", 22),
            (W("A", 16, 26), "4+5", 26),
            (W("A", 23, 33), "5", 26),
            (W("A", 23, 33), "5+6", 30),
            (W("A", 27, 37), "6", 30),
            (W("A", 20, 30), "4+5+6", 30),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testReduceSmallInput[update]",
    ),
    pytest.param(
        [
            ("A", "1", 10),
            ("A", "2", 14),
            ("A", "3", 15),
            ("A", "4", 22),
            ("A", "5", 26),
            ("A", "6", 30),
        ],
        S.of(10, grace=5),
        "final",
        "reduce",
        [
            (W("A", 0, 10), "1", 10),
            (W("A", 4, 14), "1+2", 14),
            (W("A", 5, 15), "1+2+3", 15),
            (W("A", 11, 21), "2+3", 15),
            (W("A", 12, 22), "2+3+4", 22),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testReduceSmallInput[final]",
    ),
    pytest.param(
        [
            ("A", "1", 0),
            ("A", "2", 5),
            ("A", "3", 6),
            ("A", "4", 3),
            ("A", "5", 13),
            ("A", "6", 10),
            ("A", "7", 70),
        ],
        S.of(50, grace=0),
        "update",
        "concat",
        [
            (W("A", 0, 50), "0+1", 0),
            (W("A", 1, 51), "0+2", 5),
            (W("A", 0, 50), "0+1+2", 5),
            (W("A", 1, 51), "0+2+3", 6),
            (W("A", 6, 56), "0+3", 6),
            (W("A", 0, 50), "0+1+2+3", 6),
            (W("A", 1, 51), "0+2+3+4", 6),
            (W("A", 4, 54), "0+2+3", 6),
            (W("A", 0, 50), "0+1+2+3+4", 6),
            (W("A", 1, 51), "0+2+3+4+5", 13),
            (W("A", 4, 54), "0+2+3+5", 13),
            (W("A", 6, 56), "0+3+5", 13),
            (W("A", 7, 57), "0+5", 13),
            (W("A", 0, 50), "0+1+2+3+4+5", 13),
            (W("A", 1, 51), "0+2+3+4+5+6", 13),
            (W("A", 4, 54), "0+2+3+5+6", 13),
            (W("A", 6, 56), "0+3+5+6", 13),
            (W("A", 7, 57), "0+5+6", 13),
            (W("A", 11, 61), "0+5", 13),
            (W("A", 0, 50), "0+1+2+3+4+5+6", 13),
            (W("A", 20, 70), "0+7", 70),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput[update]",
    ),
    pytest.param(
        [
            ("A", "1", 0),
            ("A", "2", 5),
            ("A", "3", 6),
            ("A", "4", 3),
            ("A", "5", 13),
            ("A", "6", 10),
            ("A", "7", 70),
        ],
        S.of(50, grace=0),
        "final",
        "concat",
        [
            (W("A", 0, 50), "0+1+2+3+4+5+6", 13),
            (W("A", 1, 51), "0+2+3+4+5+6", 13),
            (W("A", 4, 54), "0+2+3+5+6", 13),
            (W("A", 6, 56), "0+3+5+6", 13),
            (W("A", 7, 57), "0+5+6", 13),
            (W("A", 11, 61), "0+5", 13),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput[final]",
    ),
    pytest.param(
        [
            ("A", "1", 0),
            ("A", "2", 2),
            ("A", "3", 4),
            ("A", "4", 0),
            ("A", "5", 2),
            ("A", "6", 2),
            ("A", "7", 0),
            ("A", "8", 7),
        ],
        S.of(5, grace=0),
        "update",
        "concat",
        [
            (W("A", 0, 5), "0+1", 0),
            (W("A", 1, 6), "0+2", 2),
            (W("A", 0, 5), "0+1+2", 2),
            (W("A", 1, 6), "0+2+3", 4),
            (W("A", 3, 8), "0+3", 4),
            (W("A", 0, 5), "0+1+2+3", 4),
            (W("A", 0, 5), "0+1+2+3+4", 4),
            (W("A", 1, 6), "0+2+3+5", 4),
            (W("A", 0, 5), "0+1+2+3+4+5", 4),
            (W("A", 1, 6), "0+2+3+5+6", 4),
            (W("A", 0, 5), "0+1+2+3+4+5+6", 4),
            (W("A", 0, 5), "0+1+2+3+4+5+6+7", 4),
            (W("A", 3, 8), "0+3+8", 7),
            (W("A", 5, 10), "0+8", 7),
            (W("A", 2, 7), "0+2+3+5+6+8", 7),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testEarlyRecordsRepeatedInput[update]",
    ),
    pytest.param(
        [
            ("A", "1", 0),
            ("A", "2", 2),
            ("A", "3", 4),
            ("A", "4", 0),
            ("A", "5", 2),
            ("A", "6", 2),
            ("A", "7", 0),
            ("A", "8", 7),
        ],
        S.of(5, grace=0),
        "final",
        "concat",
        [
            (W("A", 0, 5), "0+1+2+3+4+5+6+7", 4),
            (W("A", 1, 6), "0+2+3+5+6", 4),
        ],
        {},
        id="KStreamSlidingWindowAggregateTest.testEarlyRecordsRepeatedInput[final]",
    ),
    pytest.param(
        [
            ("A", "1", 100),
            ("A", "2", 105),
            ("A", "3", 106),
            ("A", "4", 103),
            ("A", "5", 113),
            ("A", "6", 110),
        ],
        S.of(50, grace=0),
        "update",
        "concat",
        [
            (W("A", 50, 100), "0+1", 100),
            (W("A", 101, 151), "0+2", 105),
            (W("A", 55, 105), "0+1+2", 105),
            (W("A", 101, 151), "0+2+3", 106),
            (W("A", 106, 156), "0+3", 106),
            (W("A", 56, 106), "0+1+2+3", 106),
            (W("A", 101, 151), "0+2+3+4", 106),
            (W("A", 56, 106), "0+1+2+3+4", 106),
            (W("A", 104, 154), "0+2+3", 106),
            (W("A", 106, 156), "0+3+5", 113),
            (W("A", 104, 154), "0+2+3+5", 113),
            (W("A", 101, 151), "0+2+3+4+5", 113),
            (W("A", 107, 157), "0+5", 113),
            (W("A", 63, 113), "0+1+2+3+4+5", 113),
            (W("A", 107, 157), "0+5+6", 113),
            (W("A", 106, 156), "0+3+5+6", 113),
            (W("A", 104, 154), "0+2+3+5+6", 113),
            (W("A", 101, 151), "0+2+3+4+5+6", 113),
            (W("A", 63, 113), "0+1+2+3+4+5+6", 113),
            (W("A", 111, 161), "0+5", 113),
        ],
        {"expired_window": 3},
        id="KStreamSlidingWindowAggregateTest.testNoGracePeriodSmallInput[update]",
    ),
    pytest.param(
        [
            ("A", "1", 100),
            ("A", "2", 105),
            ("A", "3", 106),
            ("A", "4", 103),
            ("A", "5", 113),
            ("A", "6", 110),
        ],
        S.of(50, grace=0),
        "final",
        "concat",
        [
            (W("A", 50, 100), "0+1", 100),
            (W("A", 55, 105), "0+1+2", 105),
            (W("A", 56, 106), "0+1+2+3+4", 106),
        ],
        {"expired_window": 3},
        id="KStreamSlidingWindowAggregateTest.testNoGracePeriodSmallInput[final]",
    ),
    pytest.param(
        [
            ("k", "100", 200),
            ("k", "0", 100),
            ("k", "1", 101),
            ("k", "2", 102),
            ("k", "3", 103),
            ("k", "4", 104),
            ("k", "5", 105),
            ("k", "6", 15),
            ("k", "101", 300),
            ("k", "102", 400),
        ],
        S.of(10, grace=90),
        "update",
        "concat",
        [
            (W("k", 190, 200), "0+100", 200),
            (W("k", 290, 300), "0+101", 300),
            (W("k", 390, 400), "0+102", 400),
        ],
        {"expired_window": 6, "late_record": 1},
        id="KStreamSlidingWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace[update]",
    ),
    pytest.param(
        [
            ("k", "100", 200),
            ("k", "0", 100),
            ("k", "1", 101),
            ("k", "2", 102),
            ("k", "3", 103),
            ("k", "4", 104),
            ("k", "5", 105),
            ("k", "6", 15),
            ("k", "101", 300),
            ("k", "102", 400),
        ],
        S.of(10, grace=90),
        "final",
        "concat",
        [
            (W("k", 190, 200), "0+100", 200),
            (W("k", 290, 300), "0+101", 300),
        ],
        {"expired_window": 6, "late_record": 1},
        id="KStreamSlidingWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace[final]",
    ),
]


@pytest.mark.parametrize(("events", "windows", "emit", "op", "expected", "dropped"), CASES)
def test_kafka_sliding_window_case(
    events: Events,
    windows: SlidingWindows,
    emit: str,
    op: str,
    expected: Out,
    dropped: dict[str, int],
) -> None:
    out, drops = run(events, lambda g: OPS[op](g, windows, emit))
    assert out == expected
    assert drops == dropped


LARGE_INPUT = [
    ("A", "1", 10), ("A", "2", 20), ("A", "3", 22), ("A", "4", 15),
    ("B", "1", 12), ("B", "2", 13), ("B", "3", 18), ("B", "4", 19), ("B", "5", 25), ("B", "6", 14),
    ("C", "1", 11), ("C", "2", 15), ("C", "3", 16), ("C", "4", 21), ("C", "5", 23),
    ("D", "4", 11), ("D", "2", 12), ("D", "3", 29), ("D", "5", 16),
]  # fmt: skip

LARGE_FINAL = [
    (W("A", 0, 10), "0+1", 10),
    (W("A", 5, 15), "0+1+4", 15),
    (W("B", 2, 12), "0+1", 12),
    (W("B", 3, 13), "0+1+2", 13),
    (W("B", 8, 18), "0+1+2+3+6", 18),
    (W("C", 5, 15), "0+2", 15),
    (W("C", 6, 16), "0+2+3", 16),
]
LARGE_UPDATE = [
    (W("A", 0, 10), "0+1", 10),
    (W("A", 5, 15), "0+1+4", 15),
    (W("A", 10, 20), "0+1+2", 20),
    (W("A", 10, 20), "0+1+2+4", 20),
    (W("A", 11, 21), "0+2", 20),
    (W("A", 11, 21), "0+2+4", 20),
    (W("A", 12, 22), "0+2+3", 22),
    (W("A", 12, 22), "0+2+3+4", 22),
    (W("A", 16, 26), "0+2+3", 22),
    (W("A", 21, 31), "0+3", 22),
    (W("B", 2, 12), "0+1", 12),
    (W("B", 3, 13), "0+1+2", 13),
    (W("B", 4, 14), "0+1+2+6", 14),
    (W("B", 8, 18), "0+1+2+3", 18),
    (W("B", 8, 18), "0+1+2+3+6", 18),
    (W("B", 9, 19), "0+1+2+3+4", 19),
    (W("B", 9, 19), "0+1+2+3+4+6", 19),
    (W("B", 13, 23), "0+2", 13),
    (W("B", 13, 23), "0+2+3", 18),
    (W("B", 13, 23), "0+2+3+4", 19),
    (W("B", 13, 23), "0+2+3+4+6", 19),
    (W("B", 14, 24), "0+3", 18),
    (W("B", 14, 24), "0+3+4", 19),
    (W("B", 14, 24), "0+3+4+6", 19),
    (W("B", 15, 25), "0+3+4+5", 25),
    (W("B", 19, 29), "0+4", 19),
    (W("B", 19, 29), "0+4+5", 25),
    (W("B", 20, 30), "0+5", 25),
    (W("C", 1, 11), "0+1", 11),
    (W("C", 5, 15), "0+1+2", 15),
    (W("C", 6, 16), "0+1+2+3", 16),
    (W("C", 11, 21), "0+1+2+3+4", 21),
    (W("C", 12, 22), "0+2", 15),
    (W("C", 12, 22), "0+2+3", 16),
    (W("C", 12, 22), "0+2+3+4", 21),
    (W("C", 13, 23), "0+2+3+4+5", 23),
    (W("C", 16, 26), "0+3", 16),
    (W("C", 16, 26), "0+3+4", 21),
    (W("C", 16, 26), "0+3+4+5", 23),
    (W("C", 17, 27), "0+4", 21),
    (W("C", 17, 27), "0+4+5", 23),
    (W("C", 22, 32), "0+5", 23),
    (W("D", 1, 11), "0+4", 11),
    (W("D", 2, 12), "0+4+2", 12),
    (W("D", 6, 16), "0+4+2+5", 16),
    (W("D", 12, 22), "0+2", 12),
    (W("D", 12, 22), "0+2+5", 16),
    (W("D", 13, 23), "0+5", 16),
    (W("D", 19, 29), "0+3", 29),
]


def by_key_and_start(out: Out) -> Out:
    """Kafka's comparator in testAggregateLargeInput: key, then window start (stable)."""
    return sorted(out, key=lambda e: (e[0].key, e[0].start))


def test_aggregate_large_input_updates() -> None:
    """KStreamSlidingWindowAggregateTest.testAggregateLargeInput (update, grace 50): e.g.
    A@15 arrives after A@20 and A@22 and is folded in last ("0+1+2+4")."""
    out, dropped = run(LARGE_INPUT, lambda g: concat(g, S.of(10, grace=50), "update"))
    assert by_key_and_start(out) == LARGE_UPDATE
    assert dropped == {}


def test_aggregate_large_input_final() -> None:
    """KStreamSlidingWindowAggregateTest.testAggregateLargeInput (window close, grace 10):
    B@14, C@11, D@11, D@12 and D@16 skip windows that already closed."""
    out, dropped = run(LARGE_INPUT, lambda g: concat(g, S.of(10, grace=10), "final"))
    assert by_key_and_start(out) == LARGE_FINAL
    assert [w.start for w, _, _ in out] == [0, 2, 3, 5, 5, 6, 8]
    assert dropped == {"expired_window": 5}


def test_out_of_order_record_is_folded_last_and_neighbours_are_not_reemitted() -> None:
    """Sliding windows fold records in arrival order (Kafka derives windows incrementally): 4
    arriving before 2 and 3 gives "0+1+4+2+3", and a record next to an existing window emits
    no update for a window it is not in."""
    events = [("k", "1", 10), ("k", "4", 18), ("k", "2", 12), ("k", "3", 14)]
    out, _ = run(events, lambda g: concat(g, S.of(10, grace=20), "update"))
    assert out == [
        (W("k", 0, 10), "0+1", 10),
        # 4@18: the right window of 1@10, then 4's left window seeded from [0,10]
        (W("k", 11, 21), "0+4", 18),
        (W("k", 8, 18), "0+1+4", 18),
        # 2@12: the windows holding it, latest start first, then its left and right windows
        (W("k", 11, 21), "0+4+2", 18),
        (W("k", 8, 18), "0+1+4+2", 18),
        (W("k", 2, 12), "0+1+2", 12),
        (W("k", 13, 23), "0+4", 18),
        # 3@14: [0,10] and [2,12] do not hold it and are not re-emitted
        (W("k", 13, 23), "0+4+3", 18),
        (W("k", 11, 21), "0+4+2+3", 18),
        (W("k", 8, 18), "0+1+4+2+3", 18),
        (W("k", 4, 14), "0+1+2+3", 14),
        (W("k", 15, 25), "0+4", 18),
    ]
