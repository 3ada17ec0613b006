"""Table-table joins against Kafka Streams' own tests, timestamps included.

Ports of `testJoin` from Kafka's `KTableKTableInnerJoinTest`, `KTableKTableLeftJoinTest` and
`KTableKTableOuterJoinTest` (`joined.toStream().to(output)`, read back in order). A result
carries the larger of the update's timestamp and the timestamp of the other side's current
value (only the update's own when the other side has none), deletes included.
"""

from __future__ import annotations

import pytest
from join_harness import (
    INTEGRATION_INPUT,
    INTEGRATION_INPUT_IN_ORDER,
    INTEGRATION_LEFT,
    INTEGRATION_RIGHT,
    KEYS,
    LEFT,
    OUTPUT,
    RIGHT,
    Event,
    Expected,
    Step,
    integration_joiner,
    kafka_joiner,
    run_integration,
    run_steps,
)

from kstream.dsl import StreamBuilder


def table_table(kind: str) -> StreamBuilder:
    b = StreamBuilder()
    t1 = b.table(LEFT, "long", "string")
    t2 = b.table(RIGHT, "long", "string")
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(t1, method)(t2, kafka_joiner).to_stream().to(OUTPUT, "long", "string")
    return b


def t1(key: int | None, value: str | None, ts: int) -> Event:
    return (LEFT, key, value, ts)


def t2(key: int | None, value: str | None, ts: int) -> Event:
    return (RIGHT, key, value, ts)


def do_test_join_inputs() -> list[list[Event]]:
    """The input groups of Kafka's `testJoin` (the same in all three tests)."""
    return [
        [t1(0, "X0", 5), t1(1, "X1", 6), t1(None, "SomeVal", 42)],
        [t2(0, "Y0", 0), t2(1, "Y1", 10), t2(None, "AnotherVal", 73)],
        [t1(k, f"XX{k}", 7) for k in KEYS],
        [t2(k, f"YY{k}", k * 5) for k in KEYS],
        [t1(k, f"XXX{k}", 6) for k in KEYS],
        [t2(0, None, 5), t2(1, None, 7)],
        [t1(k, f"XXXX{k}", 13) for k in KEYS],
        [t1(0, None, 0), t1(1, None, 42), t1(2, None, 5), t1(3, None, 20)],
    ]


def expected_outputs(kind: str) -> list[list[Expected]]:
    inner = kind == "inner"
    return [
        [] if inner else [(0, "X0+null", 5), (1, "X1+null", 6)],
        [(0, "X0+Y0", 5), (1, "X1+Y1", 10)],
        [(0, "XX0+Y0", 7), (1, "XX1+Y1", 10)]
        + ([] if inner else [(2, "XX2+null", 7), (3, "XX3+null", 7)]),
        [(0, "XX0+YY0", 7), (1, "XX1+YY1", 7), (2, "XX2+YY2", 10), (3, "XX3+YY3", 15)],
        [(0, "XXX0+YY0", 6), (1, "XXX1+YY1", 6), (2, "XXX2+YY2", 10), (3, "XXX3+YY3", 15)],
        [(0, None, 6), (1, None, 7)] if inner else [(0, "XXX0+null", 6), (1, "XXX1+null", 7)],
        ([] if inner else [(0, "XXXX0+null", 13), (1, "XXXX1+null", 13)])
        + [(2, "XXXX2+YY2", 13), (3, "XXXX3+YY3", 15)],
        {
            "inner": [(2, None, 10), (3, None, 20)],
            "left": [(0, None, 0), (1, None, 42), (2, None, 10), (3, None, 20)],
            "outer": [(0, None, 0), (1, None, 42), (2, "null+YY2", 10), (3, "null+YY3", 20)],
        }[kind],
    ]


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("inner", id="KTableKTableInnerJoinTest.testJoin"),
        pytest.param("left", id="KTableKTableLeftJoinTest.testJoin"),
        pytest.param("outer", id="KTableKTableOuterJoinTest.testJoin"),
    ],
)
def test_table_table_join(kind: str) -> None:
    steps: list[Step] = list(zip(do_test_join_inputs(), expected_outputs(kind), strict=True))
    dropped = run_steps(table_table(kind), steps)
    # the None-key records never reach the join: the table sources drop them
    assert set(dropped) <= {"null_key"}


def test_a_filtered_table_joins_with_the_timestamp_of_its_last_visible_update() -> None:
    """The other side's timestamp is that of the update that gave it its current value, also
    when that side is a derived table (Kafka reads it from the source's timestamped store)."""
    b = StreamBuilder()
    left = b.table(LEFT, "long", "string")
    right = b.table(RIGHT, "long", "string").filter(lambda _k, v: not v.startswith("skip"))
    left.join(right, kafka_joiner).to_stream().to(OUTPUT, "long", "string")
    steps: list[Step] = [
        ([t2(0, "Y0", 50)], []),
        ([t1(0, "X0", 10)], [(0, "X0+Y0", 50)]),
        ([t2(0, "skip", 70)], [(0, None, 70)]),  # filtered out: a delete, at max(70, 10)
        ([t1(0, "X1", 20)], []),
        ([t2(0, "Y1", 15)], [(0, "X1+Y1", 20)]),
    ]
    assert run_steps(b, steps) == {}


def test_chained_table_joins_carry_the_largest_timestamp_of_all_sides() -> None:
    """`(t1 ⋈ t2) ⋈ t3`: Kafka's joined-table getter returns the max of both timestamps."""
    b = StreamBuilder()
    tables = [b.table(topic, "long", "string") for topic in (LEFT, RIGHT, "topic3")]
    first = tables[0].join(tables[1], kafka_joiner)
    first.left_join(tables[2], kafka_joiner).to_stream().to(OUTPUT, "long", "string")
    steps: list[Step] = [
        ([t1(0, "A", 30), t2(0, "B", 10)], [(0, "A+B+null", 30)]),
        ([("topic3", 0, "C", 20)], [(0, "A+B+C", 30)]),
        ([t2(0, "BB", 40)], [(0, "A+BB+C", 40)]),
        ([("topic3", 0, "CC", 35)], [(0, "A+BB+CC", 40)]),
        ([t1(0, None, 5)], [(0, None, 40)]),
    ]
    serdes = {t: ("long", "string") for t in (LEFT, RIGHT, "topic3")}
    assert run_steps(b, steps, serdes) == {}


# --- TableTableJoinIntegrationTest (caching off) ---------------------------------------------

K = 0
TABLE_TABLE_INTEGRATION: dict[str, list[list[Expected] | None]] = {
    "inner": [None, None, None, [(K, "A-a", 4)], [(K, "B-a", 5)], [(K, "B-b", 6)], [(K, None, 7)],
              None, None, [(K, "C-c", 10)], [(K, None, 11)], None, None, None, [(K, "D-d", 7)],
              [(K, None, 7)], None, None, [(K, "E-e", 15)], [(K, None, 14)], None, None,
              [(K, "F-f", 4)]],
    "left": [None, None, [(K, "A-null", 3)], [(K, "A-a", 4)], [(K, "B-a", 5)], [(K, "B-b", 6)],
             [(K, None, 7)], None, [(K, "C-null", 9)], [(K, "C-c", 10)], [(K, "C-null", 11)],
             [(K, None, 12)], None, None, [(K, "D-d", 7)], [(K, None, 7)], None, None,
             [(K, "E-e", 15)], [(K, None, 14)], None, [(K, "F-null", 4)], [(K, "F-f", 4)]],
    "outer": [None, None, [(K, "A-null", 3)], [(K, "A-a", 4)], [(K, "B-a", 5)], [(K, "B-b", 6)],
              [(K, "null-b", 7)], [(K, None, 8)], [(K, "C-null", 9)], [(K, "C-c", 10)],
              [(K, "C-null", 11)], [(K, None, 12)], None, [(K, "null-d", 7)], [(K, "D-d", 7)],
              [(K, "null-d", 7)], [(K, None, 3)], [(K, "null-e", 14)], [(K, "E-e", 15)],
              [(K, "null-e", 14)], [(K, None, 9)], [(K, "F-null", 4)], [(K, "F-f", 4)]],
}  # fmt: skip


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("inner", id="TableTableJoinIntegrationTest.testInner"),
        pytest.param("left", id="TableTableJoinIntegrationTest.testLeft"),
        pytest.param("outer", id="TableTableJoinIntegrationTest.testOuter"),
    ],
)
def test_table_table_integration(kind: str) -> None:
    """Out-of-order updates: a result's timestamp is the max of both sides' latest updates."""
    b = StreamBuilder()
    left = b.table(INTEGRATION_LEFT, "long", "string")
    right = b.table(INTEGRATION_RIGHT, "long", "string")
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(left, method)(right, integration_joiner).to_stream().to("outputTopic", "long", "string")
    assert run_integration(b, INTEGRATION_INPUT, TABLE_TABLE_INTEGRATION[kind]) == {}


def twice(value: str | None, ts: int) -> list[Expected]:
    return [(K, value, ts), (K, value, ts)]


# `left ⋈ right ⋈ right` with the same right table twice: an update of the right table
# reaches the second join both directly and through the first (Kafka's KAFKA-6443
# duplicates), and is already in the right table's store when the first join's result
# arrives (so Kafka's inner-inner misses the delete at 11).
MULTI_JOIN: dict[tuple[str, str], list[list[Expected] | None]] = {
    ("inner", "inner"): [None, None, None, twice("A-a-a", 4), [(K, "B-a-a", 5)],
                         twice("B-b-b", 6), [(K, None, 7)], None, None, twice("C-c-c", 10),
                         None, None, None, None, [(K, "D-d-d", 15)], None, None],
    ("inner", "left"): [None, None, None, twice("A-a-a", 4), [(K, "B-a-a", 5)],
                        twice("B-b-b", 6), [(K, None, 7)], None, None, twice("C-c-c", 10),
                        [(K, None, 11)], None, None, None, [(K, "D-d-d", 15)], None, None],
    ("inner", "outer"): [None, None, None, twice("A-a-a", 4), [(K, "B-a-a", 5)],
                         twice("B-b-b", 6), [(K, "null-b", 7)], [(K, None, 8)], None,
                         twice("C-c-c", 10), twice(None, 11), None, None, [(K, "null-d", 14)],
                         [(K, "D-d-d", 15)], None, None],
    ("left", "inner"): [None, None, None, twice("A-a-a", 4), [(K, "B-a-a", 5)],
                        twice("B-b-b", 6), [(K, None, 7)], None, None, twice("C-c-c", 10),
                        [(K, None, 11)], None, None, None, [(K, "D-d-d", 15)], None, None],
    ("left", "left"): [None, None, [(K, "A-null-null", 3)], twice("A-a-a", 4),
                       [(K, "B-a-a", 5)], twice("B-b-b", 6), [(K, None, 7)], None,
                       [(K, "C-null-null", 9)], twice("C-c-c", 10), twice("C-null-null", 11),
                       [(K, None, 12)], None, None, [(K, "D-d-d", 15)], None, None],
    ("left", "outer"): [None, None, [(K, "A-null-null", 3)], twice("A-a-a", 4),
                        [(K, "B-a-a", 5)], twice("B-b-b", 6), [(K, "null-b", 7)], [(K, None, 8)],
                        [(K, "C-null-null", 9)], twice("C-c-c", 10), twice("C-null-null", 11),
                        [(K, None, 12)], None, [(K, "null-d", 14)], [(K, "D-d-d", 15)], None,
                        None],
    ("outer", "inner"): [None, None, None, twice("A-a-a", 4), [(K, "B-a-a", 5)],
                         twice("B-b-b", 6), [(K, "null-b-b", 7)], None, None,
                         twice("C-c-c", 10), [(K, None, 11)], None, None, twice("null-d-d", 14),
                         [(K, "D-d-d", 15)], None, None],
    ("outer", "left"): [None, None, [(K, "A-null-null", 3)], twice("A-a-a", 4),
                        [(K, "B-a-a", 5)], twice("B-b-b", 6), [(K, "null-b-b", 7)],
                        [(K, None, 8)], [(K, "C-null-null", 9)], twice("C-c-c", 10),
                        twice("C-null-null", 11), [(K, None, 12)], None, twice("null-d-d", 14),
                        [(K, "D-d-d", 15)], None, None],
    ("outer", "outer"): [None, None, [(K, "A-null-null", 3)], twice("A-a-a", 4),
                         [(K, "B-a-a", 5)], twice("B-b-b", 6), [(K, "null-b-b", 7)],
                         twice(None, 8), [(K, "C-null-null", 9)], twice("C-c-c", 10),
                         twice("C-null-null", 11), [(K, None, 12)], None,
                         twice("null-d-d", 14), [(K, "D-d-d", 15)], None, None],
}  # fmt: skip


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(a, b, id=f"TableTableJoinIntegrationTest.test{a.title()}{b.title()}")
        for a, b in MULTI_JOIN
    ],
)
def test_table_table_multi_join_integration(first: str, second: str) -> None:
    b = StreamBuilder()
    left = b.table(INTEGRATION_LEFT, "long", "string")
    right = b.table(INTEGRATION_RIGHT, "long", "string")
    joined = getattr(left, "join" if first == "inner" else f"{first}_join")(
        right, integration_joiner
    )
    joined = getattr(joined, "join" if second == "inner" else f"{second}_join")(
        right, integration_joiner
    )
    joined.to_stream().to("outputTopic", "long", "string")
    dropped = run_integration(b, INTEGRATION_INPUT_IN_ORDER, MULTI_JOIN[(first, second)])
    assert set(dropped) <= {"null_key"}  # the two None keys stop at the table sources
