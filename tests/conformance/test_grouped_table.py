"""KTable re-grouping (`KTable.group_by` + count/reduce/aggregate) against Kafka's tests.

Kafka (`KTableRepartitionMap`, `KTableAggregate`, `KTableReduce`, cache disabled): a row that
moves to another group sends the subtractor to the old group before the adder to the new one;
a row staying in its group sends one record (subtract, then add); a result's timestamp is the
larger of the record's and the stored aggregate's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.dsl import KTable, StreamBuilder
from kstream.dsl.grouped_table import KGroupedTable
from kstream.testing.driver import TopologyTestDriver

Triple = tuple[Any, Any, int]


def run(
    regroup: Callable[[KTable], KGroupedTable],
    aggregate: Callable[[KGroupedTable], KTable],
    records: list[Triple],
    *,
    in_values: str = "string",
    out_values: str = "string",
) -> tuple[list[Triple], dict[str, int]]:
    b = StreamBuilder()
    table = b.table("topic1", key_serde="string", value_serde=in_values)
    aggregate(regroup(table)).to_stream().to("out", key_serde="string", value_serde=out_values)
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic1", key_serde="string", value_serde=in_values)
        for k, v, ts in records:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde=out_values).read_records()
        return [(r.key, r.value, r.timestamp) for r in out], d.dropped_records()


def same_key(t: KTable) -> KGroupedTable:
    """Kafka's `MockMapper.noOpKeyValueMapper()`."""
    return t.group_by(lambda k, v: (k, v), key_serde="string", value_serde="string")


def by_value(t: KTable) -> KGroupedTable:
    """Kafka's `MockMapper.selectValueKeyValueMapper()`."""
    return t.group_by(lambda _k, v: (v, v), key_serde="string", value_serde="string")


def tostring_aggregate(g: KGroupedTable) -> KTable:
    """`MockInitializer.STRING_INIT`, `MockAggregator.TOSTRING_ADDER` / `TOSTRING_REMOVER`."""
    return g.aggregate(
        lambda: "0",
        lambda _k, v, agg: f"{agg}+{v}",
        lambda _k, v, agg: f"{agg}-{v}",
        value_serde="string",
    )


def test_aggregate_subtracts_then_adds_in_one_record() -> None:
    """KTableAggregateTest.testAggBasic."""
    out, _ = run(
        same_key,
        tostring_aggregate,
        [
            ("A", "1", 10),
            ("B", "2", 15),
            ("A", "3", 20),
            ("B", "4", 18),
            ("C", "5", 5),
            ("D", "6", 25),
            ("B", "7", 15),
            ("C", "8", 10),
        ],
    )
    assert out == [
        ("A", "0+1", 10),
        ("B", "0+2", 15),
        ("A", "0+1-1+3", 20),
        ("B", "0+2-2+4", 18),
        ("C", "0+5", 5),
        ("D", "0+6", 25),
        ("B", "0+2-2+4-4+7", 18),
        ("C", "0+5-5+8", 10),
    ]


def test_count_subtracts_from_the_old_group_before_adding_to_the_new() -> None:
    """KTableAggregateTest.testCount (testCountHelper)."""
    out, _ = run(
        by_value,
        lambda g: g.count(),
        [
            ("A", "green", 10),
            ("B", "green", 9),
            ("A", "blue", 12),
            ("C", "yellow", 15),
            ("D", "green", 11),
        ],
        out_values="long",
    )
    assert out == [
        ("green", 1, 10),
        ("green", 2, 10),
        ("green", 1, 12),
        ("blue", 1, 12),
        ("yellow", 1, 15),
        ("green", 2, 12),
    ]


def test_tombstone_removes_the_row_from_its_group() -> None:
    """KTableAggregateTest.testRemoveOldBeforeAddNew."""
    out, _ = run(
        lambda t: t.group_by(lambda k, _v: (k[0], k[1]), key_serde="string", value_serde="string"),
        lambda g: g.aggregate(
            lambda: "",
            lambda _k, v, agg: agg + v,
            lambda _k, v, agg: agg.replace(v, ""),
            value_serde="string",
        ),
        [("11", "A", 10), ("12", "B", 8), ("11", None, 12), ("12", "C", 6)],
    )
    assert out == [("1", "1", 10), ("1", "12", 10), ("1", "2", 12), ("1", "2", 12)]


def test_reduce_with_adder_and_subtractor() -> None:
    """KGroupedTableImplTest.shouldReduce (assertReduced, with every intermediate result):
    `intProjection` keeps the key and truncates the double; INTEGER_ADDER / INTEGER_SUBTRACTOR."""
    out, _ = run(
        lambda t: t.group_by(lambda k, v: (k, int(v)), key_serde="string", value_serde="long"),
        lambda g: g.reduce(lambda agg, v: agg + v, lambda agg, v: agg - v),
        [
            ("A", 1.1, 10),
            ("B", 2.2, 11),
            ("A", 2.6, 30),
            ("B", 1.3, 30),
            ("A", 5.7, 50),
            ("B", 6.2, 20),
        ],
        in_values="double",
        out_values="long",
    )
    assert out == [
        ("A", 1, 10),
        ("B", 2, 11),
        ("A", 2, 30),
        ("B", 1, 30),
        ("A", 5, 50),
        ("B", 6, 30),
    ]


def test_regroup_by_value_with_null_selections() -> None:
    """KTableAggregateTest.testAggRepartition: rows move between groups (the old group's
    subtractor before the new group's adder), a selected null key or a null pair is skipped."""

    def select(k: str, v: str) -> Any:
        if k == "null":
            return (None, v)
        if k == "NULL":
            return None
        return (v, v)

    out, dropped = run(
        lambda t: t.group_by(select, key_serde="string", value_serde="string"),
        tostring_aggregate,
        [
            ("A", "1", 10),
            ("A", None, 15),
            ("A", "1", 12),
            ("B", "2", 20),
            ("null", "3", 25),
            ("B", "4", 23),
            ("NULL", "5", 24),
            ("B", "7", 22),
        ],
    )
    assert out == [
        ("1", "0+1", 10),
        ("1", "0+1-1", 15),
        ("1", "0+1-1+1", 15),
        ("2", "0+2", 20),
        ("2", "0+2-2", 23),
        ("4", "0+4", 23),
        ("4", "0+4-4", 23),
        ("7", "0+7", 22),
    ]
    assert dropped == {"null_key": 2}


def test_selector_returning_null_key_or_value_is_skipped() -> None:
    """KTableRepartitionMap: a selected pair with a null key or value is not forwarded (here
    also counted as dropped). docs/streams/developer-guide/dsl-api.html, "Aggregating": records
    with null keys are ignored."""
    out, dropped = run(
        lambda t: t.group_by(
            lambda k, v: (None if v == "nokey" else "all", None if v == "noval" else v),
            key_serde="string",
            value_serde="string",
        ),
        lambda g: g.count(),
        [("A", "x", 1), ("B", "nokey", 2), ("C", "noval", 3), ("A", "y", 4), ("A", "nokey", 5)],
        out_values="long",
    )
    assert out == [("all", 1, 1), ("all", 1, 4), ("all", 0, 5)]
    assert dropped == {"null_key": 2, "null_value": 1}
