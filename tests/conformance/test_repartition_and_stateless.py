"""Stateless stream operators, repartition and table basics against Kafka Streams' tests.

Each case pipes what the Kafka test pipes and checks `(key, value, timestamp)` in order; where
Kafka's test uses one timestamp for every record, records here get distinct timestamps so that
the case also shows which timestamp every output keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.dsl import KStream, StreamBuilder
from kstream.testing.driver import TopologyTestDriver

Triple = tuple[Any, Any, int]


def run_stream(
    build: Callable[[KStream], KStream],
    records: list[Triple],
    *,
    keys: str = "integer",
    values: str = "string",
    out_keys: str = "string",
    out_values: str = "string",
) -> tuple[list[Triple], dict[str, int]]:
    b = StreamBuilder()
    build(b.stream("topic", key_serde=keys, value_serde=values)).to(
        "out", key_serde=out_keys, value_serde=out_values
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic", key_serde=keys, value_serde=values)
        for k, v, ts in records:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde=out_keys, value_serde=out_values).read_records()
        return [(r.key, r.value, r.timestamp) for r in out], d.dropped_records()


def numbered(keys: list[int]) -> list[Triple]:
    """`pipeInput(key, "V" + key)` for each key, at timestamp 100 * position."""
    return [(k, f"V{k}", 100 * i) for i, k in enumerate(keys)]


def test_filter() -> None:
    """KStreamFilterTest.testFilter: keys 1..7, `key % 3 == 0`."""
    out, _ = run_stream(
        lambda s: s.filter(lambda k, _v: k % 3 == 0),
        numbered(list(range(1, 8))),
        out_keys="integer",
    )
    assert out == [(3, "V3", 200), (6, "V6", 500)]


def test_filter_not() -> None:
    """KStreamFilterTest.testFilterNot."""
    out, _ = run_stream(
        lambda s: s.filter_not(lambda k, _v: k % 3 == 0),
        numbered(list(range(1, 8))),
        out_keys="integer",
    )
    assert out == [(1, "V1", 0), (2, "V2", 100), (4, "V4", 300), (5, "V5", 400), (7, "V7", 600)]


def test_map_keeps_the_timestamp() -> None:
    """KStreamMapTest.testMap: `(key, value) -> (value, key)`, piped at `10 - key`."""
    out, _ = run_stream(
        lambda s: s.map(lambda k, v: (v, k)),
        [(k, f"V{k}", 10 - k) for k in range(4)],
        out_values="integer",
    )
    assert out == [("V0", 0, 10), ("V1", 1, 9), ("V2", 2, 8), ("V3", 3, 7)]


def test_flat_map_outputs_keep_their_input_timestamp() -> None:
    """KStreamFlatMapTest.testFlatMap: key k gives k records `(str(k * 10 + i), value)`."""
    out, _ = run_stream(
        lambda s: s.flat_map(lambda k, v: [(str(k * 10 + i), v) for i in range(k)]),
        numbered([0, 1, 2, 3]),
    )
    assert out == [
        ("10", "V1", 100),
        ("20", "V2", 200),
        ("21", "V2", 200),
        ("30", "V3", 300),
        ("31", "V3", 300),
        ("32", "V3", 300),
    ]


def test_flat_map_values() -> None:
    """KStreamFlatMapValuesTest.testFlatMapValues: each value v gives `["v" + v, "V" + v]`."""
    out, _ = run_stream(
        lambda s: s.flat_map_values(lambda v: [f"v{v}", f"V{v}"]),
        [(k, k, 10 * k) for k in range(4)],
        values="integer",
        out_keys="integer",
    )
    assert out == [
        (0, "v0", 0),
        (0, "V0", 0),
        (1, "v1", 10),
        (1, "V1", 10),
        (2, "v2", 20),
        (2, "V2", 20),
        (3, "v3", 30),
        (3, "V3", 30),
    ]


def test_select_key() -> None:
    """KStreamSelectKeyTest.testSelectKey: the value picks the key ("ONE", "TWO", "THREE")."""
    names = {1: "ONE", 2: "TWO", 3: "THREE"}
    out, _ = run_stream(
        lambda s: s.select_key(lambda _k, v: names[v]),
        [(None, 1, 7), (None, 2, 3), (None, 3, 9)],
        keys="string",
        values="integer",
        out_values="integer",
    )
    assert out == [("ONE", 1, 7), ("TWO", 2, 3), ("THREE", 3, 9)]


def test_peek_observes_and_forwards() -> None:
    """KStreamPeekTest.shouldObserveStreamElements."""
    seen: list[tuple[Any, Any]] = []
    out, _ = run_stream(
        lambda s: s.peek(lambda k, v: seen.append((k, v))),
        [(k, str(k), 5 - k) for k in range(5)],
        out_keys="integer",
    )
    assert seen == [(k, str(k)) for k in range(5)]
    assert out == [(k, str(k), 5 - k) for k in range(5)]


def test_merge_keeps_arrival_order() -> None:
    """KStreamImplTest.shouldMergeMultipleStreams."""
    b = StreamBuilder()
    topics = ["topic-1", "topic-2", "topic-3", "topic-4"]
    s1, s2, s3, s4 = (b.stream(t, key_serde="string", value_serde="string") for t in topics)
    s1.merge(s2).merge(s3).merge(s4).to("out", key_serde="string", value_serde="string")
    piped = [
        ("topic-1", "A", "aa", 1),
        ("topic-2", "B", "bb", 9),
        ("topic-3", "C", "cc", 2),
        ("topic-4", "D", "dd", 8),
        ("topic-4", "E", "ee", 3),
        ("topic-3", "F", "ff", 7),
        ("topic-2", "G", "gg", 4),
        ("topic-1", "H", "hh", 6),
    ]
    with TopologyTestDriver(b) as d:
        for topic, k, v, ts in piped:
            d.input_topic(topic, key_serde="string", value_serde="string").pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="string").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == [(k, v, ts) for _, k, v, ts in piped]


def test_branch_first_matching_predicate_wins() -> None:
    """KStreamSplitTest.testKStreamSplit: isEven, isMultipleOfThree, isMultipleOfFive, no
    default branch (keys -1..7; 6 goes to the first branch only, -1, 1 and 7 to none)."""
    b = StreamBuilder()
    even, three, five = b.stream("topic", key_serde="integer", value_serde="string").branch(
        lambda k, _v: k % 2 == 0, lambda k, _v: k % 3 == 0, lambda k, _v: k % 5 == 0
    )
    for stream, topic in ((even, "x2"), (three, "x3"), (five, "x5")):
        stream.to(topic, key_serde="integer", value_serde="string")
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic", key_serde="integer", value_serde="string")
        for i, k in enumerate([-1, 0, 1, 2, 3, 4, 5, 6, 7]):
            src.pipe(k, f"V{k}", i)

        def read(topic: str) -> list[Triple]:
            out = d.output_topic(topic, key_serde="integer", value_serde="string").read_records()
            return [(r.key, r.value, r.timestamp) for r in out]

        assert read("x2") == [(0, "V0", 1), (2, "V2", 3), (4, "V4", 5), (6, "V6", 7)]
        assert read("x3") == [(3, "V3", 4)]
        assert read("x5") == [(5, "V5", 6)]


def test_repartition_drops_null_keys() -> None:
    """KStreamImplTest.shouldSendDataThroughRepartitionTopicUsingRepartitioned, with null keys:
    `KStreamImpl.createRepartitionedSource` puts a null-key filter in front of the repartition
    topic (InternalStreamsBuilder enables it unless a left/outer join follows, KIP-962)."""
    out, dropped = run_stream(
        lambda s: s.repartition(name="through"),
        [("a", "1", 10), (None, "2", 11), ("b", "3", 5), (None, "4", 12), ("a", "5", 13)],
        keys="string",
    )
    assert out == [("a", "1", 10), ("b", "3", 5), ("a", "5", 13)]
    assert dropped == {"null_key": 2}


def test_table_source_to_stream_with_tombstones() -> None:
    """KTableSourceTest.testKTable."""
    b = StreamBuilder()
    b.table("topic1", key_serde="string", value_serde="integer").to_stream().to(
        "out", key_serde="string", value_serde="integer"
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic1", key_serde="string", value_serde="integer")
        piped = [("A", 1, 10), ("B", 2, 11), ("C", 3, 12), ("D", 4, 13), ("A", None, 14)]
        for k, v, ts in [*piped, ("B", None, 15)]:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="integer").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == [*piped, ("B", None, 15)]


def test_table_source_skips_null_keys() -> None:
    """KTableSourceTest.kTableShouldLogAndMeterOnSkippedRecords."""
    b = StreamBuilder()
    b.table("topic", key_serde="string", value_serde="string").to_stream().to(
        "out", key_serde="string", value_serde="string"
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic", key_serde="string", value_serde="string")
        src.pipe(None, "value", 3)
        src.pipe("k", "v", 4)
        out = d.output_topic("out", key_serde="string", value_serde="string").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("k", "v", 4)]
        assert d.dropped_records() == {"null_key": 1}


def test_table_map_values_keeps_record_timestamps() -> None:
    """KTableMapValuesTest.testKTable: `value.charAt(0) - 48`."""
    b = StreamBuilder()
    b.table("topic1", key_serde="string", value_serde="string").map_values(
        lambda v: ord(v[0]) - 48
    ).to_stream().to("out", key_serde="string", value_serde="integer")
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic1", key_serde="string", value_serde="string")
        for k, v, ts in [("A", "1", 5), ("B", "2", 25), ("C", "3", 20), ("D", "4", 10)]:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="integer").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == [
            ("A", 1, 5),
            ("B", 2, 25),
            ("C", 3, 20),
            ("D", 4, 10),
        ]


def test_filtered_table_feeding_a_regroup_skips_rejected_rows() -> None:
    """KTableFilterTest.shouldSkipNullToRepartitionWithoutMaterialization: with a downstream
    aggregation (old values sent), a row rejected while nothing was visible sends nothing."""
    b = StreamBuilder()
    (
        b.table("topic1", key_serde="string", value_serde="string")
        .filter(lambda _k, v: v.lower() == "accept")
        .group_by(lambda k, v: (k, v), key_serde="string", value_serde="string")
        .reduce(lambda agg, v: agg + v, lambda agg, v: agg.replace(v, "", 1))
        .to_stream()
        .to("out", key_serde="string", value_serde="string")
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic1", key_serde="string", value_serde="string")
        for k, v, ts in [("A", "reject", 5), ("B", "reject", 10), ("C", "reject", 20)]:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="string")
        assert out.read_records() == []
        src.pipe("A", "accept", 30)
        src.pipe("A", "reject", 40)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("A", "accept", 30),
            ("A", "", 40),
        ]


def test_to_table_reads_upserts_and_tombstones() -> None:
    """docs/streams/developer-guide/dsl-api.html, "Stateless transformations", toTable: each
    record is an upsert (a null value deletes) and the table update keeps its timestamp."""
    b = StreamBuilder()
    b.stream("topic", key_serde="string", value_serde="string").to_table(store="t").to_stream().to(
        "out", key_serde="string", value_serde="string"
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic", key_serde="string", value_serde="string")
        piped = [("A", "1", 10), ("B", "2", 4), ("A", "3", 7), ("A", None, 12), (None, "x", 13)]
        for k, v, ts in piped:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="string").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == piped[:4]
        assert d.get_store("t").get("A") is None
        assert d.get_store("t").get("B") == "2"
        assert d.dropped_records() == {"null_key": 1}


def run_join(kind: str, records: list[Triple]) -> tuple[list[Triple], dict[str, int]]:
    b = StreamBuilder()
    table = b.table("table", key_serde="string", value_serde="string")
    stream = b.stream("topic", key_serde="string", value_serde="string").repartition()
    joined = stream.map_values(str.upper)
    join = joined.left_join if kind == "left" else joined.join
    join(table, lambda lv, rv: f"{lv}|{rv}").to("out", key_serde="string", value_serde="string")
    with TopologyTestDriver(b) as d:
        d.input_topic("table", key_serde="string", value_serde="string").pipe("a", "T", 0)
        src = d.input_topic("topic", key_serde="string", value_serde="string")
        for k, v, ts in records:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="string").read_records()
        return [(r.key, r.value, r.timestamp) for r in out], d.dropped_records()


def test_repartition_keeps_null_keys_for_a_left_join_below() -> None:
    """RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamTableJoin (with an operator
    between the repartition and the join): InternalStreamsBuilder leaves the repartition's
    null-key filter off when a left or outer join is downstream (KIP-962)."""
    out, dropped = run_join("left", [("a", "x", 3), (None, "y", 4)])
    assert out == [("a", "X|T", 3), (None, "Y|None", 4)]
    assert dropped == {}


def test_repartition_drops_null_keys_before_an_inner_join() -> None:
    """RelaxedNullKeyRequirementJoinTest
    .testDropNullKeyRecordsForRepartitionNodesWithNoRelaxedJoinDownstream."""
    out, dropped = run_join("inner", [("a", "x", 3), (None, "y", 4)])
    assert out == [("a", "X|T", 3)]
    assert dropped == {"null_key": 1}


def test_table_filter_forwards_rejected_updates_as_tombstones() -> None:
    """KTableFilterTest.testKTable (doTestKTable): with only to_stream below (no consumer
    needing old values), every update a filter rejects reaches the stream as a tombstone."""
    b = StreamBuilder()
    table = b.table("topic1", key_serde="string", value_serde="integer")
    table.filter(lambda _k, v: v % 2 == 0).to_stream().to("even", "string", "integer")
    table.filter_not(lambda _k, v: v % 2 == 0).to_stream().to("odd", "string", "integer")
    with TopologyTestDriver(b) as d:
        src = d.input_topic("topic1", key_serde="string", value_serde="integer")
        for k, v, ts in [
            ("A", 1, 10),
            ("B", 2, 5),
            ("C", 3, 8),
            ("D", 4, 14),
            ("A", None, 18),
            ("B", None, 15),
        ]:
            src.pipe(k, v, ts)

        def read(topic: str) -> list[Triple]:
            out = d.output_topic(topic, key_serde="string", value_serde="integer").read_records()
            return [(r.key, r.value, r.timestamp) for r in out]

        assert read("even") == [
            ("A", None, 10),
            ("B", 2, 5),
            ("C", None, 8),
            ("D", 4, 14),
            ("A", None, 18),
            ("B", None, 15),
        ]
        assert read("odd") == [
            ("A", 1, 10),
            ("B", None, 5),
            ("C", 3, 8),
            ("D", None, 14),
            ("A", None, 18),
            ("B", None, 15),
        ]
