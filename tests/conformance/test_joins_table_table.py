"""Table-table joins against Kafka Streams' own tests, timestamps included.

Ports of `testJoin` from Kafka's `KTableKTableInnerJoinTest`, `KTableKTableLeftJoinTest` and
`KTableKTableOuterJoinTest` (`joined.toStream().to(output)`, read back in order). A result
carries the larger of the update's timestamp and the timestamp of the other side's current
value (only the update's own when the other side has none), deletes included.
"""

from __future__ import annotations

import pytest
from join_harness import KEYS, LEFT, OUTPUT, RIGHT, Event, Expected, Step, kafka_joiner, run_steps

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
