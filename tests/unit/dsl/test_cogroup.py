"""`KGroupedStream.cogroup`: outputs and topologies equal to Kafka Streams' own tests.

Each test names the Kafka test it mirrors (`CogroupedKStreamImplTest`,
`TimeWindowedCogroupedKStreamImplTest`, `SessionWindowedCogroupedKStreamImplTest`,
`SlidingWindowedCogroupedKStreamImplTest`); the expected (key, value, timestamp) triples are
Kafka's. Kafka's `MockAggregator.TOSTRING_ADDER` / `TOSTRING_REMOVER` and
`MockInitializer.STRING_INIT` are `adder`, `remover` and `"0"` here.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream.dsl import KTable, StreamBuilder
from kstream.dsl.grouped import KGroupedStream
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.errors import TopologyError
from kstream.testing.driver import TopologyTestDriver
from kstream.topology.topology import SinkDef

KVT = tuple[Any, Any, int]


def adder(_k: Any, v: Any, agg: Any) -> str:
    return f"{agg}+{v}"


def remover(_k: Any, v: Any, agg: Any) -> str:
    return f"{agg}-{v}"


def init() -> str:
    return "0"


def merger(_k: Any, a: Any, b: Any) -> str:
    return f"{a}+{b}"


def two_grouped() -> tuple[StreamBuilder, KGroupedStream, KGroupedStream]:
    b = StreamBuilder()
    one = b.stream("one", "string", "string").group_by_key()
    two = b.stream("two", "string", "string").group_by_key()
    return b, one, two


def run(
    b: StreamBuilder, table: KTable, events: list[tuple[str, str, Any, int]], windowed: bool = False
) -> list[KVT]:
    """Pipe (topic, key, value, ts) events; return the output's (key, value, ts), windowed
    keys reduced to their key as Kafka's tests compare them."""
    stream = table.to_stream(lambda w, _v: w.key) if windowed else table.to_stream()
    stream.to("output", "string", "string")
    with TopologyTestDriver(b) as d:
        for topic, k, v, ts in events:
            d.input_topic(topic, "string", "string").pipe(k, v, timestamp=ts)
        return [
            (r.key, r.value, r.timestamp)
            for r in d.output_topic("output", "string", "string").read_records()
        ]


def parents(nodes: dict[str, Any], name: str) -> list[str]:
    return list(nodes[name].parents)


# --- CogroupedKStreamImplTest ------------------------------------------------------------------


def test_should_name_processors_and_store_based_on_named_parameter() -> None:
    """CogroupedKStreamImplTest.shouldNameProcessorsAndStoreBasedOnNamedParameter"""
    b, one, two = two_grouped()
    t = one.cogroup(adder).cogroup(two, adder).aggregate(init, store="store", name="test")
    t.to_stream().to("output")
    nodes = b.build().nodes
    assert parents(nodes, "test-cogroup-agg-0") == ["KSTREAM-SOURCE-0000000000"]
    assert parents(nodes, "test-cogroup-agg-1") == ["KSTREAM-SOURCE-0000000001"]
    assert parents(nodes, "test-cogroup-merge") == ["test-cogroup-agg-0", "test-cogroup-agg-1"]
    assert parents(nodes, "KTABLE-TOSTREAM-0000000005") == ["test-cogroup-merge"]
    assert "KSTREAM-SINK-0000000006" in nodes
    assert set(b.build().stores) == {"store"}


def test_should_insert_repartition_topic_for_upstream_key_modification() -> None:
    """CogroupedKStreamImplTest.shouldInsertRepartitionsTopicForUpstreamKeyModification: the
    re-keyed input goes through `<store>-repartition`, named after the store."""
    b = StreamBuilder()
    s1, s2 = b.stream("one", "string", "string"), b.stream("two", "string", "string")
    one = s1.map(lambda k, v: (v, k)).group_by_key()
    two = s2.group_by_key()
    t = one.cogroup(adder).cogroup(two, adder).aggregate(init, store="store", name="test")
    t.to_stream().to("output")
    nodes = b.build().nodes
    assert parents(nodes, "store-repartition-filter") == ["KSTREAM-MAP-0000000002"]
    sink = nodes["store-repartition-sink"]
    assert isinstance(sink, SinkDef) and sink.topic == "store-repartition"
    assert parents(nodes, "test-cogroup-agg-0") == ["store-repartition-source"]
    assert parents(nodes, "test-cogroup-agg-1") == ["KSTREAM-SOURCE-0000000001"]
    assert "KTABLE-TOSTREAM-0000000009" in nodes and "KSTREAM-SINK-0000000010" in nodes


def test_generated_names_follow_kafka() -> None:
    """CogroupedKStreamImplTest.shouldNameRepartitionTopic (its generated names): store
    COGROUPKSTREAM-AGGREGATE-STATE-STORE-3 names the repartition topic, then one
    COGROUPKSTREAM-AGGREGATE per input and COGROUPKSTREAM-MERGE."""
    b = StreamBuilder()
    s1, s2 = b.stream("one", "string", "string"), b.stream("two", "string", "string")
    one = s1.map(lambda k, v: (v, k)).group_by_key()
    two = s2.group_by_key()
    one.cogroup(adder).cogroup(two, adder).aggregate(init).to_stream().to("output")
    topo = b.build()
    store = "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003"
    assert set(topo.stores) == {store}
    assert parents(topo.nodes, "COGROUPKSTREAM-AGGREGATE-0000000007") == [
        f"{store}-repartition-source"
    ]
    assert parents(topo.nodes, "COGROUPKSTREAM-AGGREGATE-0000000008") == [
        "KSTREAM-SOURCE-0000000001"
    ]
    assert parents(topo.nodes, "COGROUPKSTREAM-MERGE-0000000009") == [
        "COGROUPKSTREAM-AGGREGATE-0000000007",
        "COGROUPKSTREAM-AGGREGATE-0000000008",
    ]
    assert "KTABLE-TOSTREAM-0000000010" in topo.nodes


def test_should_cogroup_and_aggregate_single_kstreams() -> None:
    """CogroupedKStreamImplTest.shouldCogroupAndAggregateSingleKStreams (STRING_AGGREGATOR
    appends the value to the aggregate, STRING_INITIALIZER is "")"""
    b, one, _ = two_grouped()
    t = one.cogroup(lambda k, v, a: a + v).aggregate(str)
    events = [
        ("one", "k1", "A", 0),
        ("one", "k2", "B", 0),
        ("one", "k2", "B", 0),
        ("one", "k1", "A", 0),
    ]
    assert run(b, t, events) == [("k1", "A", 0), ("k2", "B", 0), ("k2", "BB", 0), ("k1", "AA", 0)]


def test_cogroup_handle_null_values() -> None:
    """CogroupedKStreamImplTest.testCogroupHandleNullValues"""
    b, one, _ = two_grouped()
    t = one.cogroup(lambda k, v, a: a + v).aggregate(str)
    events = [("one", "k1", "A", 0), ("one", "k2", "B", 0), ("one", "k2", None, 0)]
    events += [("one", "k2", "B", 0), ("one", "k1", "A", 0)]
    assert run(b, t, events) == [("k1", "A", 0), ("k2", "B", 0), ("k2", "BB", 0), ("k1", "AA", 0)]


def test_should_cogroup_and_aggregate_two_kstreams_with_distinct_keys() -> None:
    """CogroupedKStreamImplTest.shouldCogroupAndAggregateTwoKStreamsWithDistinctKeys"""
    b, one, two = two_grouped()
    t = one.cogroup(lambda k, v, a: a + v).cogroup(two, lambda k, v, a: a + v).aggregate(str)
    events = [("one", "k1", "A", ts) for ts in (0, 1, 10, 100)]
    events += [("two", "k2", "B", ts) for ts in (100, 200, 1, 500, 500, 100)]
    assert run(b, t, events) == [
        ("k1", "A", 0),
        ("k1", "AA", 1),
        ("k1", "AAA", 10),
        ("k1", "AAAA", 100),
        ("k2", "B", 100),
        ("k2", "BB", 200),
        ("k2", "BBB", 200),
        ("k2", "BBBB", 500),
        ("k2", "BBBBB", 500),
        ("k2", "BBBBBB", 500),
    ]


def test_should_cogroup_and_aggregate_two_kstreams_with_shared_keys() -> None:
    """CogroupedKStreamImplTest.shouldCogroupAndAggregateTwoKStreamsWithSharedKeys"""
    b, one, two = two_grouped()
    t = one.cogroup(lambda k, v, a: a + v).cogroup(two, lambda k, v, a: a + v).aggregate(str)
    events = [("one", "k1", "A", 0), ("one", "k2", "A", 1), ("one", "k1", "A", 10)]
    events += [("one", "k2", "A", 100), ("two", "k2", "B", 100), ("two", "k2", "B", 200)]
    events += [("two", "k1", "B", 1), ("two", "k2", "B", 500), ("two", "k1", "B", 500)]
    events += [("two", "k2", "B", 500), ("two", "k3", "B", 500), ("two", "k2", "B", 100)]
    assert run(b, t, events)[:10] == [
        ("k1", "A", 0),
        ("k2", "A", 1),
        ("k1", "AA", 10),
        ("k2", "AA", 100),
        ("k2", "AAB", 100),
        ("k2", "AABB", 200),
        ("k1", "AAB", 10),
        ("k2", "AABBB", 500),
        ("k1", "AABB", 500),
        ("k2", "AABBBB", 500),
    ]


def test_cogroup_needs_callables_and_one_builder() -> None:
    """CogroupedKStreamImplTest.shouldNotHaveNullAggregatorOnCogroup (and mixing builders)"""
    _, one, _ = two_grouped()
    with pytest.raises(TopologyError, match="aggregator"):
        one.cogroup(None)  # type: ignore[arg-type]
    other = StreamBuilder().stream("x").group_by_key()
    with pytest.raises(TopologyError, match="different builders"):
        one.cogroup(adder).cogroup(other, adder)
    with pytest.raises(TopologyError, match="windowed_by expects"):
        one.cogroup(adder).windowed_by(3)  # type: ignore[call-overload]


# --- TimeWindowedCogroupedKStreamImplTest ------------------------------------------------------


def windowed_two() -> tuple[StreamBuilder, Any]:
    b, one, two = two_grouped()
    return b, one.cogroup(adder).cogroup(two, remover)


def test_time_window_aggregate_test_streams() -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateTestStreamsTest"""
    b, co = windowed_two()
    t = co.windowed_by(TimeWindows.of(500)).aggregate(init)
    events = [("one", k, v, ts) for k, v, ts in (("k1", "A", 0), ("k2", "A", 0), ("k2", "A", 1))]
    events += [("one", k, v, ts) for k, v, ts in (("k1", "A", 2), ("k1", "B", 3), ("k2", "B", 3))]
    events += [("one", "k2", "B", 4), ("one", "k1", "B", 4)]
    assert run(b, t, events, windowed=True) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k2", "0+A+A", 1),
        ("k1", "0+A+A", 2),
        ("k1", "0+A+A+B", 3),
        ("k2", "0+A+A+B", 3),
        ("k2", "0+A+A+B+B", 4),
        ("k1", "0+A+A+B+B", 4),
    ]


def test_time_window_mix_aggregators_many_windows() -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowMixAggregatorsManyWindowsTest"""
    b, co = windowed_two()
    t = co.windowed_by(TimeWindows.of(500)).aggregate(init)
    events = [("one", k, "A", ts) for k, ts in (("k1", 0), ("k2", 0), ("k2", 1), ("k1", 2))]
    events += [("two", k, "B", ts) for k, ts in (("k1", 3), ("k2", 3), ("k2", 501), ("k1", 501))]
    assert run(b, t, events, windowed=True) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k2", "0+A+A", 1),
        ("k1", "0+A+A", 2),
        ("k1", "0+A+A-B", 3),
        ("k2", "0+A+A-B", 3),
        ("k2", "0-B", 501),
        ("k1", "0-B", 501),
    ]


def test_time_window_aggregate_overlapping_windows() -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateOverlappingWindowsTest"""
    b, one, _ = two_grouped()
    t = one.cogroup(adder).windowed_by(TimeWindows.of(500, advance=200)).aggregate(init)
    events = [("one", k, v, ts) for k, v, ts in (("k1", "A", 0), ("k2", "A", 0), ("k1", "B", 250))]
    events += [("one", k, v, ts) for k, v, ts in (("k2", "B", 250), ("k2", "A", 500))]
    events += [("one", "k1", "A", 500)]
    assert run(b, t, events, windowed=True) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k1", "0+A+B", 250),
        ("k1", "0+B", 250),
        ("k2", "0+A+B", 250),
        ("k2", "0+B", 250),
        ("k2", "0+B+A", 500),
        ("k2", "0+A", 500),
        ("k1", "0+B+A", 500),
        ("k1", "0+A", 500),
    ]


def test_each_input_keeps_its_own_stream_time() -> None:
    """Kafka's KStreamWindowAggregate keeps `observedStreamTime` per processor, and a cogroup
    has one per input: a record is late only against its own input's stream time. D is late
    for input two (stream time 30) and dropped; C is on time for input one (stream time 3),
    but the shared window store has expired window 0 by its own stream time (30), so, as with
    Kafka's segmented store, the aggregate starts again from the initializer."""
    b, co = windowed_two()
    t = co.windowed_by(TimeWindows.of(10)).aggregate(init)
    events = [
        ("one", "k", "A", 3),
        ("two", "k", "B", 30),
        ("one", "k", "C", 5),
        ("two", "k", "D", 5),
    ]
    assert run(b, t, events, windowed=True) == [("k", "0+A", 3), ("k", "0-B", 30), ("k", "0+C", 5)]


# --- SessionWindowedCogroupedKStreamImplTest ---------------------------------------------------


def test_session_window_aggregate_2() -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregate2Test"""
    b, one, _ = two_grouped()
    t = one.cogroup(adder).windowed_by(SessionWindows.with_gap(500)).aggregate(init, merger)
    events = [("one", "k1", "A", 0), ("one", "k1", "A", 0), ("one", "k2", "B", 599)]
    events += [("one", "k1", "B", 607)]
    assert run(b, t, events, windowed=True) == [
        ("k1", "0+A", 0),
        ("k1", "0+0+A+A", 0),
        ("k2", "0+B", 599),
        ("k1", "0+B", 607),
    ]


def test_session_window_mix_aggregators() -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowMixAggregatorsTest"""
    b, co = windowed_two()
    t = co.windowed_by(SessionWindows.with_gap(100, grace="1d")).aggregate(init, merger)
    events = [("one", k, "A", ts) for k, ts in (("k1", 0), ("k2", 0), ("k2", 1), ("k1", 2))]
    events += [("two", k, "B", ts) for k, ts in (("k1", 3), ("k2", 3), ("k2", 444), ("k1", 444))]
    assert run(b, t, events, windowed=True) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k2", None, 0),
        ("k2", "0+0+A+A", 1),
        ("k1", None, 0),
        ("k1", "0+0+A+A", 2),
        ("k1", None, 2),
        ("k1", "0+0+0+A+A-B", 3),
        ("k2", None, 1),
        ("k2", "0+0+0+A+A-B", 3),
        ("k2", "0-B", 444),
        ("k1", "0-B", 444),
    ]


# --- SlidingWindowedCogroupedKStreamImplTest ---------------------------------------------------


def test_sliding_window_aggregate_overlapping_windows() -> None:
    """SlidingWindowedCogroupedKStreamImplTest.slidingWindowAggregateOverlappingWindowsTest"""
    b, one, _ = two_grouped()
    t = one.cogroup(adder).windowed_by(SlidingWindows.of(500, grace=2000)).aggregate(init)
    events = [("one", k, v, ts) for k, v, ts in (("k1", "A", 500), ("k2", "A", 500))]
    events += [("one", k, v, ts) for k, v, ts in (("k1", "B", 750), ("k2", "B", 750))]
    events += [("one", "k2", "A", 1000), ("one", "k1", "A", 1000)]
    assert run(b, t, events, windowed=True) == [
        ("k1", "0+A", 500),
        ("k2", "0+A", 500),
        ("k1", "0+B", 750),
        ("k1", "0+A+B", 750),
        ("k2", "0+B", 750),
        ("k2", "0+A+B", 750),
        ("k2", "0+B+A", 1000),
        ("k2", "0+A", 1000),
        ("k2", "0+A+B+A", 1000),
        ("k1", "0+B+A", 1000),
        ("k1", "0+A", 1000),
        ("k1", "0+A+B+A", 1000),
    ]


def test_windowed_cogroup_names_follow_kafka() -> None:
    """TimeWindowedCogroupedKStreamImplTest.namedParamShouldSetName (and the session and
    sliding ones): `<name>-cogroup-agg-0`, `<name>-cogroup-merge`, a generated store."""
    for windows in (TimeWindows.of(500), SlidingWindows.of(500), SessionWindows.with_gap(1)):
        b = StreamBuilder()
        g = b.stream("topic", "string", "string").group_by_key().cogroup(adder)
        if isinstance(windows, SessionWindows):
            t = g.windowed_by(windows).aggregate(init, merger, name="foo")
        else:
            t = g.windowed_by(windows).aggregate(init, name="foo")
        topo = b.build()
        assert t._node == "foo-cogroup-merge"
        assert parents(topo.nodes, "foo-cogroup-agg-0") == ["KSTREAM-SOURCE-0000000000"]
        assert "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000001" in topo.stores


def test_cogroup_runs_as_a_spark_task() -> None:
    """The Spark engine plans a cogroup like any aggregation and its task (run here in-process,
    as a Spark worker runs it) gives the same results as the native one."""
    from kstream.records import Record
    from kstream.serde import serde
    from kstream.spark.tasks import TaskRun, build_task_plan

    b, co = windowed_two()
    co.aggregate(init).to_stream().to("output", "string", "string")
    plan = build_task_plan(b.build(), "app")
    plan.partitions = {"one": 1, "two": 1, "output": 1}
    ss = serde("string")
    events = [("one", "k", "A", 1), ("two", "k", "B", 2), ("one", "k", "C", 3)]
    records = [
        Record(ss.to_bytes(k), ss.to_bytes(v), ts, (), t, 0, i)
        for i, (t, k, v, ts) in enumerate(events)
    ]
    (sid,) = plan.order
    task = TaskRun(plan, sid, 0, {})
    try:
        cols = task.run(records)
    finally:
        task.close()
    assert [ss.from_bytes(v) for v in cols["v"]] == ["0+A", "0+A-B", "0+A-B+C"]


def test_should_name_repartition_topic() -> None:
    """CogroupedKStreamImplTest.shouldNameRepartitionTopic: a grouping's name (`Grouped.as`)
    names the input's repartition topic; the rest keeps the generated names."""
    b = StreamBuilder()
    s1, s2 = b.stream("one", "string", "string"), b.stream("two", "string", "string")
    one = s1.map(lambda k, v: (v, k)).group_by_key(name="repartition-test")
    two = s2.group_by_key()
    one.cogroup(adder).cogroup(two, adder).aggregate(init).to_stream().to("output")
    topo = b.build()
    sink = topo.nodes["repartition-test-repartition-sink"]
    assert isinstance(sink, SinkDef) and sink.topic == "repartition-test-repartition"
    assert parents(topo.nodes, "repartition-test-repartition-filter") == ["KSTREAM-MAP-0000000002"]
    assert parents(topo.nodes, "COGROUPKSTREAM-AGGREGATE-0000000007") == [
        "repartition-test-repartition-source"
    ]
    assert parents(topo.nodes, "COGROUPKSTREAM-AGGREGATE-0000000008") == [
        "KSTREAM-SOURCE-0000000001"
    ]
    assert set(topo.stores) == {"COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003"}
    assert "KTABLE-TOSTREAM-0000000010" in topo.nodes and "KSTREAM-SINK-0000000011" in topo.nodes
