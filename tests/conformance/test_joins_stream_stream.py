"""Stream-stream joins against Kafka Streams' own tests, record by record.

Each case is a port of a test method of Kafka's `KStreamKStreamJoinTest`,
`KStreamKStreamLeftJoinTest` or `KStreamKStreamOuterJoinTest` (named in its id): the same
records piped in the same order, and the same `(key, value, timestamp)` outputs in the same
order after each group. Kafka's driver checks the processor's output; here the join is
written to a topic, which adds nothing in between.
"""

from __future__ import annotations

from typing import Any

import pytest
from join_harness import (
    INTEGRATION_INPUT_IN_ORDER,
    INTEGRATION_LEFT,
    INTEGRATION_RIGHT,
    KEYS,
    LEFT,
    OUTPUT,
    RIGHT,
    SELF_JOIN_INPUT,
    Expected,
    Step,
    each,
    integration_joiner,
    kafka_joiner,
    left,
    right,
    run_integration,
    run_steps,
    stream_stream,
)

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.testing.driver import TopologyTestDriver

LONG_RIGHT = {LEFT: ("long", "string"), RIGHT: ("long", "long")}


def all_at_zero_steps() -> list[Step]:
    """`testJoin` and `testOuterJoin`: every record at timestamp 0, so every pair joins."""
    return [
        (each(LEFT, "A", 0, KEYS[:2]), []),
        (each(RIGHT, "a", 0, KEYS[:2]), [(0, "A0+a0", 0), (1, "A1+a1", 0)]),
        (each(LEFT, "B", 0), [(0, "B0+a0", 0), (1, "B1+a1", 0)]),
        (
            each(RIGHT, "b", 0),
            [
                (0, "A0+b0", 0),
                (0, "B0+b0", 0),
                (1, "A1+b1", 0),
                (1, "B1+b1", 0),
                (2, "B2+b2", 0),
                (3, "B3+b3", 0),
            ],
        ),
        (
            each(LEFT, "C", 0),
            [
                (0, "C0+a0", 0),
                (0, "C0+b0", 0),
                (1, "C1+a1", 0),
                (1, "C1+b1", 0),
                (2, "C2+b2", 0),
                (3, "C3+b3", 0),
            ],
        ),
        (
            each(RIGHT, "c", 0, KEYS[:2]),
            [
                (0, "A0+c0", 0),
                (0, "B0+c0", 0),
                (0, "C0+c0", 0),
                (1, "A1+c1", 0),
                (1, "B1+c1", 0),
                (1, "C1+c1", 0),
            ],
        ),
    ]


def joined_with(prefix: str, other: str, keys: tuple[int, ...], base: int, ts: int | None):
    """`prefix<k>+other<k>` for `keys`, at `ts` or (None) at `base + k`."""
    return [(k, f"{prefix}{k}+{other}{k}", base + k if ts is None else ts) for k in keys]


def inner_windowing_steps() -> list[Step]:
    """`KStreamKStreamJoinTest.testWindowing`: both bounds, out-of-order records included."""
    return [
        (each(LEFT, "A", 0, KEYS[:2]), []),
        (each(RIGHT, "a", 0, KEYS[:2]), [(0, "A0+a0", 0), (1, "A1+a1", 0)]),
        (each(LEFT, "B", 1000, stagger=True), []),
        (each(RIGHT, "b", 1100), joined_with("B", "b", KEYS, 0, 1100)),
        (each(RIGHT, "c", 1101), joined_with("B", "c", (1, 2, 3), 0, 1101)),
        (each(RIGHT, "d", 1102), joined_with("B", "d", (2, 3), 0, 1102)),
        (each(RIGHT, "e", 1103), joined_with("B", "e", (3,), 0, 1103)),
        (each(RIGHT, "f", 1104), []),
        # out of order by up to 205 ms: they still join what the left store retains
        (each(RIGHT, "g", 899), []),
        (each(RIGHT, "h", 900), joined_with("B", "h", (0,), 1000, None)),
        (each(RIGHT, "i", 901), joined_with("B", "i", (0, 1), 1000, None)),
        (each(RIGHT, "j", 902), joined_with("B", "j", (0, 1, 2), 1000, None)),
        (each(RIGHT, "k", 903), joined_with("B", "k", KEYS, 1000, None)),
        (each(RIGHT, "l", 2000, stagger=True), []),
        (each(LEFT, "C", 2100), joined_with("C", "l", KEYS, 0, 2100)),
        (each(LEFT, "D", 2101), joined_with("D", "l", (1, 2, 3), 0, 2101)),
        (each(LEFT, "E", 2102), joined_with("E", "l", (2, 3), 0, 2102)),
        (each(LEFT, "F", 2103), joined_with("F", "l", (3,), 0, 2103)),
        (each(LEFT, "G", 2104), []),
        (each(LEFT, "H", 1899), []),
        (each(LEFT, "I", 1900), joined_with("I", "l", (0,), 2000, None)),
        (each(LEFT, "J", 1901), joined_with("J", "l", (0, 1), 2000, None)),
        (each(LEFT, "K", 1902), joined_with("K", "l", (0, 1, 2), 2000, None)),
        (each(LEFT, "L", 1903), joined_with("L", "l", KEYS, 2000, None)),
    ]


def asymmetric_after_steps() -> list[Step]:
    """`KStreamKStreamJoinTest.testAsymmetricWindowingAfter`: before 0, after 100."""
    return [
        (each(LEFT, "A", 1000, stagger=True), []),
        (each(RIGHT, "a", 999), []),
        (each(RIGHT, "b", 1000), [(0, "A0+b0", 1000)]),
        (each(RIGHT, "c", 1001), [(0, "A0+c0", 1001), (1, "A1+c1", 1001)]),
        (each(RIGHT, "d", 1002), [(k, f"A{k}+d{k}", 1002) for k in (0, 1, 2)]),
        (each(RIGHT, "e", 1003), [(k, f"A{k}+e{k}", 1003) for k in KEYS]),
        (each(RIGHT, "f", 1100), [(k, f"A{k}+f{k}", 1100) for k in KEYS]),
        (each(RIGHT, "g", 1101), [(k, f"A{k}+g{k}", 1101) for k in (1, 2, 3)]),
        (each(RIGHT, "h", 1102), [(k, f"A{k}+h{k}", 1102) for k in (2, 3)]),
        (each(RIGHT, "i", 1103), [(3, "A3+i3", 1103)]),
        (each(RIGHT, "j", 1104), []),
    ]


def asymmetric_before_steps() -> list[Step]:
    """`KStreamKStreamJoinTest.testAsymmetricWindowingBefore`: before 100, after 0."""
    return [
        (each(LEFT, "A", 1000, stagger=True), []),
        (each(RIGHT, "a", 899), []),
        (each(RIGHT, "b", 900), [(0, "A0+b0", 1000)]),
        (each(RIGHT, "c", 901), joined_with("A", "c", (0, 1), 1000, None)),
        (each(RIGHT, "d", 902), joined_with("A", "d", (0, 1, 2), 1000, None)),
        (each(RIGHT, "e", 903), joined_with("A", "e", KEYS, 1000, None)),
        (each(RIGHT, "f", 1000), joined_with("A", "f", KEYS, 1000, None)),
        (each(RIGHT, "g", 1001), joined_with("A", "g", (1, 2, 3), 1000, None)),
        (each(RIGHT, "h", 1002), joined_with("A", "h", (2, 3), 1000, None)),
        (each(RIGHT, "i", 1003), joined_with("A", "i", (3,), 1000, None)),
        (each(RIGHT, "j", 1004), []),
    ]


INNER_CASES = [
    pytest.param(
        JoinWindows.of(100), all_at_zero_steps(), {}, id="KStreamKStreamJoinTest.testJoin"
    ),
    pytest.param(
        JoinWindows.of(100),
        inner_windowing_steps(),
        # 10 out-of-order records per side are too old for their own store and found nothing
        {"expired_window": 20},
        id="KStreamKStreamJoinTest.testWindowing",
    ),
    pytest.param(
        JoinWindows.of(0, after=100),
        asymmetric_after_steps(),
        {},
        id="KStreamKStreamJoinTest.testAsymmetricWindowingAfter",
    ),
    pytest.param(
        JoinWindows.of(100, after=0),
        asymmetric_before_steps(),
        {},
        id="KStreamKStreamJoinTest.testAsymmetricWindowingBefore",
    ),
]


@pytest.mark.parametrize(("window", "steps", "dropped"), INNER_CASES)
def test_inner_join(window: JoinWindows, steps: list[Step], dropped: dict[str, int]) -> None:
    assert run_steps(stream_stream("inner", window), steps) == dropped


def test_outer_join_with_a_long_grace_gives_the_inner_results() -> None:
    """KStreamKStreamJoinTest.testOuterJoin: grace 24 h, so no unmatched record is emitted."""
    window = JoinWindows.of(100, grace=24 * 3600 * 1000)
    assert run_steps(stream_stream("outer", window), all_at_zero_steps()) == {}


def test_null_value_and_null_key_are_dropped_and_counted_in_an_inner_join() -> None:
    """KStreamKStreamJoinTest.shouldLogAndMeterOnSkippedRecordsWithNullValue...: metered drops."""
    steps: list[Step] = [
        (left(0, None, 0) + left(None, "A", 0) + right(None, "a", 0) + right(0, None, 0), []),
        (left(0, "A0", 1) + right(0, "a0", 1), [(0, "A0+a0", 1)]),
    ]
    dropped = run_steps(stream_stream("inner", JoinWindows.of(100)), steps)
    assert dropped == {"null_value": 2, "null_key": 2}


# --- left joins (KStreamKStreamLeftJoinTest) ----------------------------------------------------

LEFT_CASES = [
    pytest.param(
        JoinWindows.of(100, grace=10),
        [
            (
                left(0, "A0", 0) + left(0, "A0-0", 0) + right(1, "a0", 111) + right(2, "d", 500),
                [(0, "A0+null", 0), (0, "A0-0+null", 0)],
            ),
            (
                left(2, "A2", 1000) + left(2, "A2-0", 1000) + right(2, "a2", 1001),
                [(2, "A2+a2", 1001), (2, "A2-0+a2", 1001)],
            ),
            (right(3, "a3", 315), []),
        ],
        {"expired_window": 1},  # a3 is too old to be kept and a right record is never emitted
        id="KStreamKStreamLeftJoinTest.testLeftJoinDuplicates",
    ),
    pytest.param(
        JoinWindows.of(100, grace=0),
        [
            (left(0, "A0", 1) + left(1, "A1", 2) + left(0, "A0-0", 3), []),
            (right(1, "a1", 3), [(1, "A1+a1", 3)]),
            (left(2, "dummy", 401), [(0, "A0+null", 1), (0, "A0-0+null", 3)]),
            (right(2, "dummy", 401), [(2, "dummy+dummy", 401)]),
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor",
    ),
    pytest.param(
        JoinWindows.of(100, grace=0),
        [
            (left(0, "A0", 1) + left(1, "A1", 2) + left(0, "A0-0", 3), []),
            (right(1, "a1", 3), [(1, "A1+a1", 3)]),
            (right(2, "dummy", 401), [(0, "A0+null", 1), (0, "A0-0+null", 3)]),
            (left(2, "dummy", 402), [(2, "dummy+dummy", 402)]),
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor",
    ),
    pytest.param(
        JoinWindows.of(100, grace=0),
        [
            (right(0, "A0", 1) + right(1, "A1", 2) + right(0, "A0-0", 3), []),
            (left(1, "a1", 3), [(1, "a1+A1", 3)]),
            (left(2, "dummy", 401), []),
            (right(2, "dummy", 402), [(2, "dummy+dummy", 402)]),
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testRightNonJoinedRecordsAreNeverEmittedByTheLeftProcessor",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (right(0, "A0", 1) + right(1, "A1", 2) + right(0, "A0-0", 3), []),
            (left(1, "a1", 3), [(1, "a1+A1", 3)]),
            (right(2, "dummy", 401), []),
            (left(2, "dummy", 402), [(2, "dummy+dummy", 402)]),
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testRightNonJoinedRecordsAreNeverEmittedByTheRightProcessor",
    ),
    pytest.param(
        JoinWindows.of(100, after=0),
        [
            (
                each(LEFT, "A", 1000, stagger=True),
                [(0, "A0+null", 1000), (1, "A1+null", 1001), (2, "A2+null", 1002)],
            ),
            (each(RIGHT, "a", 999), joined_with("A", "a", KEYS, 1000, None)),
            (each(RIGHT, "b", 1000), joined_with("A", "b", KEYS, 1000, None)),
            (each(RIGHT, "c", 1001), joined_with("A", "c", (1, 2, 3), 1000, None)),
            (each(RIGHT, "d", 1002), joined_with("A", "d", (2, 3), 1000, None)),
            (each(RIGHT, "e", 1003), joined_with("A", "e", (3,), 1000, None)),
            (each(RIGHT, "f", 1100), []),
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testLeftJoinedRecordsWithZeroAfterAreEmitted",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (
                each(LEFT, "A", 0, KEYS[:2]) + each(RIGHT, "a", 0, KEYS[:2]),
                [(0, "A0+a0", 0), (1, "A1+a1", 0)],
            ),
            (each(LEFT, "B", 0, KEYS[:3]), [(0, "B0+a0", 0), (1, "B1+a1", 0)]),
            (
                each(RIGHT, "b", 0),
                [
                    (0, "A0+b0", 0),
                    (0, "B0+b0", 0),
                    (1, "A1+b1", 0),
                    (1, "B1+b1", 0),
                    (2, "B2+b2", 0),
                ],
            ),
            (
                each(LEFT, "C", 0),
                [
                    (0, "C0+a0", 0),
                    (0, "C0+b0", 0),
                    (1, "C1+a1", 0),
                    (1, "C1+b1", 0),
                    (2, "C2+b2", 0),
                    (3, "C3+b3", 0),
                ],
            ),
            (left(0, "dummy", 1000), []),  # everything found a partner: nothing to emit
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testLeftJoinWithDefaultSuppliers",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (
                left(0, "A0", 0) + left(1, "A1", 100) + right(1, "a1", 110),
                [(0, "A0+null", 0), (1, "A1+a1", 110)],
            )
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testOrdering",
    ),
    pytest.param(
        JoinWindows.of(100, grace=10),
        [
            (
                each(LEFT, "A", 0, KEYS[:2]) + each(RIGHT, "a", 101) + right(0, "dummy", 1201),
                [(0, "A0+null", 0), (1, "A1+null", 0)],
            )
        ],
        {},
        id="KStreamKStreamLeftJoinTest.testGracePeriod",
    ),
    pytest.param(
        JoinWindows.of(0, after=100),
        [
            (each(LEFT, "A", 0, KEYS[:2], stagger=True), []),
            (right(0, "a0", 100), [(0, "A0+a0", 100)]),
            (right(1, "a1", 102), [(1, "A1+null", 1)]),
        ],
        {},
        id="KStreamKStreamLeftJoinTest.shouldNotEmitLeftJoinResultForAsymmetricWindow",
    ),
]


def left_windowing_steps() -> list[Step]:
    """`KStreamKStreamLeftJoinTest.testWindowing` with its upper and lower bound halves."""
    unmatched = [(0, "C0+null", 1101), (0, "D0+null", 1102), (1, "D1+null", 1102)]
    unmatched += [(k, f"E{k}+null", 1103) for k in (0, 1, 2)]
    unmatched += [(k, f"F{k}+null", 1104) for k in KEYS]
    return [
        (
            each(LEFT, "A", 0, KEYS[:2]) + each(RIGHT, "a", 0),
            [(0, "A0+a0", 0), (1, "A1+a1", 0)],
        ),
        # testUpperWindowBound
        (each(RIGHT, "b", 1000, stagger=True), []),
        (each(LEFT, "B", 1100), joined_with("B", "b", KEYS, 0, 1100)),
        (each(LEFT, "C", 1101), joined_with("C", "b", (1, 2, 3), 0, 1101)),
        (each(LEFT, "D", 1102), joined_with("D", "b", (2, 3), 0, 1102)),
        (each(LEFT, "E", 1103), joined_with("E", "b", (3,), 0, 1103)),
        (each(LEFT, "F", 1104), []),
        (left(0, "dummy", 1405), unmatched),
        # testLowerWindowBound: out-of-order records whose window has ended come out at once
        (each(LEFT, "G", 899), [(k, f"G{k}+null", 899) for k in KEYS]),
        (
            each(LEFT, "H", 900),
            [(0, "H0+b0", 1000)] + [(k, f"H{k}+null", 900) for k in (1, 2, 3)],
        ),
        (
            each(LEFT, "I", 901),
            [*joined_with("I", "b", (0, 1), 1000, None), (2, "I2+null", 901), (3, "I3+null", 901)],
        ),
        (
            each(LEFT, "J", 902),
            [*joined_with("J", "b", (0, 1, 2), 1000, None), (3, "J3+null", 902)],
        ),
        (each(LEFT, "K", 903), joined_with("K", "b", KEYS, 1000, None)),
        (left(0, "dummy", 1203), [(0, "dummy+null", 1203)]),
    ]


LEFT_CASES.append(
    pytest.param(
        JoinWindows.of(100),
        left_windowing_steps(),
        {},
        id="KStreamKStreamLeftJoinTest.testWindowing",
    )
)


def first_scan_steps() -> list[Step]:
    """Not a port: `KStreamImplJoin.TimeTracker` starts its pending minimum at Long.MAX_VALUE
    and the first pending record sets it, so the first scan waits, as every later one, until
    that record's time plus the arriving side's look-ahead and grace is behind stream time.
    The right side looks ahead by `before` (2 here): at stream time 2 nothing is emitted yet;
    a record at 3 emits the unmatched left record."""
    return [
        (right(0, None, 1), []),  # dropped, but stream time is 1
        (left(0, "A", 0), []),  # window [0, 1] not closed at stream time 1: pending
        (right(0, "b", 2), []),  # no partner (ts 2 > 0 + after); 0 + 2 + 0 >= 2: no scan
        (right(0, "c", 3), [(0, "A+null", 0)]),
    ]


LEFT_CASES.append(
    pytest.param(
        JoinWindows.of(2, after=1, grace=0),
        first_scan_steps(),
        {"null_value": 1},
        id="KStreamImplJoin.TimeTracker-first-scan",
    )
)


@pytest.mark.parametrize(("window", "steps", "dropped"), LEFT_CASES)
def test_left_join(window: JoinWindows, steps: list[Step], dropped: dict[str, int]) -> None:
    assert run_steps(stream_stream("left", window), steps) == dropped


# --- outer joins (KStreamKStreamOuterJoinTest); the right side has Long values -----------------


def outer_windowing_steps() -> list[Step]:
    """`KStreamKStreamOuterJoinTest.testWindowing` with its upper and lower bound halves."""
    unmatched = [(0, "C0+null", 1101), (0, "D0+null", 1102), (1, "D1+null", 1102)]
    unmatched += [(k, f"E{k}+null", 1103) for k in (0, 1, 2)]
    unmatched += [(k, f"F{k}+null", 1104) for k in KEYS]

    def plus20(prefix: str, keys: tuple[int, ...], ts: int | None) -> list[tuple[int, str, int]]:
        return [(k, f"{prefix}{k}+{k + 20}", 1000 + k if ts is None else ts) for k in keys]

    return [
        (each(LEFT, "A", 0, KEYS[:2]), []),
        (each(RIGHT, "", 0, numeric=10), [(0, "A0+10", 0), (1, "A1+11", 0)]),
        # testUpperWindowBound
        (
            each(RIGHT, "", 1000, stagger=True, numeric=20),
            [(2, "null+12", 0), (3, "null+13", 0)],
        ),
        (each(LEFT, "B", 1100), plus20("B", KEYS, 1100)),
        (each(LEFT, "C", 1101), plus20("C", (1, 2, 3), 1101)),
        (each(LEFT, "D", 1102), plus20("D", (2, 3), 1102)),
        (each(LEFT, "E", 1103), plus20("E", (3,), 1103)),
        (each(LEFT, "F", 1104), []),
        (left(0, "dummy", 1405), unmatched),
        # testLowerWindowBound
        (each(LEFT, "G", 899), [(k, f"G{k}+null", 899) for k in KEYS]),
        (
            each(LEFT, "H", 900),
            plus20("H", (0,), None) + [(k, f"H{k}+null", 900) for k in (1, 2, 3)],
        ),
        (
            each(LEFT, "I", 901),
            [*plus20("I", (0, 1), None), (2, "I2+null", 901), (3, "I3+null", 901)],
        ),
        (each(LEFT, "J", 902), [*plus20("J", (0, 1, 2), None), (3, "J3+null", 902)]),
        (each(LEFT, "K", 903), plus20("K", KEYS, None)),
        (left(0, "dummy", 1103), [(0, "dummy+null", 1103)]),
    ]


OUTER_CASES = [
    pytest.param(
        JoinWindows.of(100, grace=10),
        [
            (
                left(0, "A0", 0)
                + left(0, "A0-0", 0)
                + right(1, 11, 0)
                + right(1, 12, 0)
                + right(1, 10, 111)
                + right(3, 100, 211),
                [(1, "null+11", 0), (1, "null+12", 0), (0, "A0+null", 0), (0, "A0-0+null", 0)],
            ),
            (
                left(2, "A2", 200) + left(2, "A2-0", 200) + right(2, 13, 201) + right(2, 14, 201),
                [(2, "A2+13", 201), (2, "A2-0+13", 201), (2, "A2+14", 201), (2, "A2-0+14", 201)],
            ),
            (right(3, 100, 1500), [(1, "null+10", 111), (3, "null+100", 211)]),
        ],
        id="KStreamKStreamOuterJoinTest.testOuterJoinDuplicates",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (left(0, "A0", 1) + left(1, "A1", 2) + left(0, "A0-0", 3), []),
            (right(1, 11, 3), [(1, "A1+11", 3)]),
            (left(2, "dummy", 401), [(0, "A0+null", 1), (0, "A0-0+null", 3)]),
            (right(2, 100, 401), [(2, "dummy+100", 401)]),
        ],
        id="KStreamKStreamOuterJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor",
    ),
    pytest.param(
        JoinWindows.of(100, grace=0),
        [
            (left(0, "A0", 1) + left(1, "A1", 2) + left(0, "A0-0", 3), []),
            (right(1, 11, 3), [(1, "A1+11", 3)]),
            (right(2, 100, 401), [(0, "A0+null", 1), (0, "A0-0+null", 3)]),
            (left(2, "dummy", 402), [(2, "dummy+100", 402)]),
        ],
        id="KStreamKStreamOuterJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (right(0, 10, 1) + right(1, 11, 2) + right(0, 12, 3), []),
            (left(1, "A1", 3), [(1, "A1+11", 3)]),
            (left(2, "dummy", 401), [(0, "null+10", 1), (0, "null+12", 3)]),
            (right(2, 100, 402), [(2, "dummy+100", 402)]),
        ],
        id="KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor",
    ),
    pytest.param(
        JoinWindows.of(100, grace=0),
        [
            (right(0, 10, 1) + right(1, 11, 2) + right(0, 12, 3), []),
            (left(1, "A1", 3), [(1, "A1+11", 3)]),
            (right(2, 100, 401), [(0, "null+10", 1), (0, "null+12", 3)]),
            (left(2, "dummy", 402), [(2, "dummy+100", 402)]),
        ],
        id="KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedByTheRightProcessor",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (left(0, "A0", 0) + left(1, "A1", 100), []),
            (right(1, 11, 110), [(0, "A0+null", 0), (1, "A1+11", 110)]),
        ],
        id="KStreamKStreamOuterJoinTest.testOrdering",
    ),
    pytest.param(
        JoinWindows.of(100, grace=10),
        [
            (left(0, "A0", 0) + right(1, 11, 0), []),
            (left(1, "A1", 101) + right(0, 10, 101), []),
            (right(0, 100, 112), [(1, "null+11", 0), (0, "A0+null", 0)]),
        ],
        id="KStreamKStreamOuterJoinTest.testGracePeriod",
    ),
    pytest.param(
        JoinWindows.of(5, after=20),
        [
            (left(0, "A0", 29), []),
            (left(1, "A1", 30), []),
            (right(2, 12, 31), []),
            (right(3, 13, 36), []),
            (right(4, 14, 37), [(2, "null+12", 31)]),
            (right(5, 15, 50), [(0, "A0+null", 29), (3, "null+13", 36), (4, "null+14", 37)]),
        ],
        id="KStreamKStreamOuterJoinTest.testEmitAllNonJoinedResultsForAsymmetricWindow",
    ),
    pytest.param(
        JoinWindows.of(100),
        [
            (each(LEFT, "A", 0, KEYS[:2]), []),
            (each(RIGHT, "", 0, KEYS[:2], numeric=10), [(0, "A0+10", 0), (1, "A1+11", 0)]),
            (each(LEFT, "B", 0, KEYS[:3]), [(0, "B0+10", 0), (1, "B1+11", 0)]),
            (
                each(RIGHT, "", 0, numeric=20),
                [
                    (0, "A0+20", 0),
                    (0, "B0+20", 0),
                    (1, "A1+21", 0),
                    (1, "B1+21", 0),
                    (2, "B2+22", 0),
                ],
            ),
            (
                each(LEFT, "C", 0),
                [
                    (0, "C0+10", 0),
                    (0, "C0+20", 0),
                    (1, "C1+11", 0),
                    (1, "C1+21", 0),
                    (2, "C2+22", 0),
                    (3, "C3+23", 0),
                ],
            ),
            (left(0, "dummy", 400), []),
        ],
        id="KStreamKStreamOuterJoinTest.testOuterJoinWithDefaultSuppliers",
    ),
    pytest.param(
        JoinWindows.of(100), outer_windowing_steps(), id="KStreamKStreamOuterJoinTest.testWindowing"
    ),
    pytest.param(
        JoinWindows.of(0, after=100),
        [
            (each(LEFT, "A", 0, KEYS[:2], stagger=True), []),
            (right(0, 10, 100), [(0, "A0+10", 100)]),
            (right(1, 11, 102), [(1, "A1+null", 1)]),
            (right(2, 12, 103), [(1, "null+11", 102)]),
            (left(2, "A2", 103), [(2, "A2+12", 103)]),
        ],
        id="KStreamKStreamOuterJoinTest.testShouldNotEmitLeftJoinResultForAsymmetricBeforeWindow",
    ),
    pytest.param(
        JoinWindows.of(100, after=0),
        [
            (each(LEFT, "A", 0, KEYS[:2], stagger=True), [(0, "A0+null", 0)]),
            (right(1, 11, 1), [(1, "A1+11", 1)]),
            (right(2, 12, 101) + right(3, 13, 101), []),
            (left(2, "A2", 201), [(2, "A2+12", 201)]),
        ],
        id="KStreamKStreamOuterJoinTest.testShouldNotEmitLeftJoinResultForAsymmetricAfterWindow",
    ),
]


@pytest.mark.parametrize(("window", "steps"), OUTER_CASES)
def test_outer_join(window: JoinWindows, steps: list[Step]) -> None:
    builder = stream_stream("outer", window, right_values="long")
    assert run_steps(builder, steps, LONG_RIGHT) == {}


def test_outer_join_results_carry_the_headers_of_the_record_being_processed() -> None:
    """KStreamKStreamOuterJoinTest.testShouldForwardCurrentHeaders."""
    builder = stream_stream("outer", JoinWindows.of(100, grace=10), right_values="long")
    with TopologyTestDriver(builder) as d:
        t1 = d.input_topic(LEFT, "long", "string")
        t2 = d.input_topic(RIGHT, "long", "long")
        out = d.output_topic(OUTPUT, "long", "string")
        t1.pipe(0, "A0", timestamp=0, headers=[("h", b"\x01")])
        t2.pipe(1, 10, timestamp=0, headers=[("h", b"\x02")])
        t2.pipe(3, 100, timestamp=211, headers=[("h", b"\x03")])
        assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in out.read_records()] == [
            (1, "null+10", 0, [("h", b"\x03")]),
            (0, "A0+null", 0, [("h", b"\x03")]),
        ]
        t1.pipe(2, "A2", timestamp=200, headers=[("h", b"\x04")])
        t2.pipe(2, 12, timestamp=200, headers=[("h", b"\x05")])
        assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in out.read_records()] == [
            (2, "A2+12", 200, [("h", b"\x05")])
        ]


def test_a_zero_window_without_grace_never_joins_as_in_kafka() -> None:
    """Kafka's window store for `JoinWindows.ofTimeDifferenceWithNoGrace(ZERO)` has retention 0
    and hides every record (it returns `ts > newest - retention` only), so even records with
    equal timestamps do not join; one millisecond of grace is enough to make them join.
    """
    steps: list[Step] = [(left(0, "A0", 5) + right(0, "a0", 5), [])]
    assert run_steps(stream_stream("inner", JoinWindows.of(0)), steps) == {"expired_window": 2}
    steps = [(left(0, "A0", 5) + right(0, "a0", 5), [(0, "A0+a0", 5)])]
    assert run_steps(stream_stream("inner", JoinWindows.of(0, grace=1)), steps) == {}


def test_self_join_matches_every_pair_within_the_window() -> None:
    """A stream joined with itself (Kafka's `KStreamKStreamSelfJoinTest` without the
    single-store optimization, which kstream does not apply): each record meets itself and
    the earlier records of its key."""
    b = StreamBuilder()
    s = b.stream(LEFT, "long", "string")
    s.join(s, kafka_joiner, window=JoinWindows.of(100)).to(OUTPUT, "long", "string")
    steps: list[Step] = [
        (left(0, "A", 1), [(0, "A+A", 1)]),
        (left(0, "B", 2), [(0, "B+A", 2), (0, "A+B", 2), (0, "B+B", 2)]),
    ]
    assert run_steps(b, steps, {LEFT: ("long", "string")}) == {}


# --- StreamStreamJoinIntegrationTest (through the TopologyTestDriver, caching off) -----------

K = 0
INTEGRATION_WINDOW = JoinWindows.of(10_000, grace=24 * 3600 * 1000)

COMMON: list[list[Expected] | None] = [
    None,
    None,
    None,
    [(K, "A-a", 4)],
    [(K, "B-a", 5)],
    [(K, "A-b", 6), (K, "B-b", 6)],
    None,
    None,
    [(K, "C-a", 9), (K, "C-b", 9)],
    [(K, "A-c", 10), (K, "B-c", 10), (K, "C-c", 10)],
    None,
    None,
    None,
    [(K, "A-d", 14), (K, "B-d", 14), (K, "C-d", 14)],
    [(K, "D-a", 15), (K, "D-b", 15), (K, "D-c", 15), (K, "D-d", 15)],
]
INTEGRATION_EXPECTED: dict[str, list[list[Expected] | None]] = {
    "inner": [*COMMON, None, None],
    "left": [*COMMON, [(None, "E-null", 16)], None],
    "outer": [*COMMON, [(None, "E-null", 16)], [(None, "null-e", 17)]],
}
# None values on both sides (7), plus the None keys a join does not take
INTEGRATION_DROPS = {
    "inner": {"null_value": 7, "null_key": 2},
    "left": {"null_value": 7, "null_key": 1},
    "outer": {"null_value": 7},
}


def integration_streams(repartitioned: bool) -> tuple[StreamBuilder, Any, Any]:
    b = StreamBuilder()
    left = b.stream(INTEGRATION_LEFT, "long", "string")
    right = b.stream(INTEGRATION_RIGHT, "long", "string")
    if repartitioned:  # MockMapper.noOpKeyValueMapper / noOpFlatKeyValueMapper
        left = left.map(lambda k, v: (k, v))
        right = right.flat_map(lambda k, v: [(k, v)])
    return b, left, right


@pytest.mark.parametrize("repartitioned", [False, True], ids=["", "Repartitioned"])
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("inner", id="StreamStreamJoinIntegrationTest.testInner"),
        pytest.param("left", id="StreamStreamJoinIntegrationTest.testLeft"),
        pytest.param("outer", id="StreamStreamJoinIntegrationTest.testOuter"),
    ],
)
def test_integration(kind: str, repartitioned: bool) -> None:
    b, left, right = integration_streams(repartitioned)
    method = "join" if kind == "inner" else f"{kind}_join"
    joined = getattr(left, method)(right, integration_joiner, window=INTEGRATION_WINDOW)
    joined.to("outputTopic", "long", "string")
    dropped = run_integration(b, INTEGRATION_INPUT_IN_ORDER, INTEGRATION_EXPECTED[kind])
    assert dropped == INTEGRATION_DROPS[kind]


def test_integration_multi_inner() -> None:
    """StreamStreamJoinIntegrationTest.testMultiInner: `left ⋈ right ⋈ right`; each result
    of the first join reaches the second before the record enters the second's store."""
    b, left, right = integration_streams(False)
    first = left.join(right, integration_joiner, window=INTEGRATION_WINDOW)
    first.join(right, integration_joiner, window=INTEGRATION_WINDOW).to(
        "outputTopic", "long", "string"
    )
    letters = "abc"

    def triples(spec: list[str], ts: int) -> list[Expected]:
        return [(K, s, ts) for s in spec]

    expected: list[list[Expected] | None] = [
        None,
        None,
        None,
        triples(["A-a-a"], 4),
        triples(["B-a-a"], 5),
        triples(["A-b-a", "B-b-a", "A-a-b", "B-a-b", "A-b-b", "B-b-b"], 6),
        None,
        None,
        triples(["C-a-a", "C-a-b", "C-b-a", "C-b-b"], 9),
        triples(
            [f"{x}-c-{y}" for x in "ABC" for y in "ab"]
            + [f"{x}-{y}-c" for x, y in ("Aa", "Ba", "Ab", "Bb", "Ca", "Cb", "Ac", "Bc", "Cc")],
            10,
        ),
        None,
        None,
        None,
        triples(
            [f"{x}-d-{y}" for x in "ABC" for y in letters]
            + [
                f"{x}-{y}-d"
                for x, y in ("Aa", "Ba", "Ab", "Bb", "Ca", "Cb", "Ac", "Bc", "Cc", "Ad", "Bd", "Cd")
            ],
            14,
        ),
        triples([f"D-{x}-{y}" for x in "abcd" for y in "abcd"], 15),
        None,
        None,
    ]
    run_integration(b, INTEGRATION_INPUT_IN_ORDER, expected)


def test_integration_self_join() -> None:
    """StreamStreamJoinIntegrationTest.testSelfJoin (Kafka runs it with its single-store
    self-join optimization; the outputs are the same as the plain join's)."""
    b = StreamBuilder()
    s = b.stream(INTEGRATION_LEFT, "long", "string")
    s.join(s, integration_joiner, window=INTEGRATION_WINDOW).to("outputTopic", "long", "string")
    expected: list[list[Expected] | None] = [
        None,
        [(K, "A-A", 2)],
        [(K, "B-A", 3), (K, "A-B", 3), (K, "B-B", 3)],
        None,
        [(K, v, 5) for v in ("C-A", "C-B", "A-C", "B-C", "C-C")],
        None,
        [(K, v, 7) for v in ("D-A", "D-B", "D-C", "A-D", "B-D", "C-D", "D-D")],
    ]
    run_integration(b, SELF_JOIN_INPUT, expected)
