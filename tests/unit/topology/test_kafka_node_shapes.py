"""The DSL builds Kafka Streams' nodes, store connections and name counter where describe()
shows them: stream-stream joins, stores of kstream's own, joins sharing a repartition."""

from __future__ import annotations

from pathlib import Path

from support.mock_runtime import running

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows, TimeWindows
from kstream.testing import MockCluster, MockProducer, TopologyTestDriver
from kstream.topology.topology import ProcessorDef


def _processors(b: StreamBuilder) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """Each processor's parents and stores."""
    return {
        name: (node.parents, sorted(node.stores))
        for name, node in b.build().nodes.items()
        if isinstance(node, ProcessorDef)
    }


def test_a_left_join_of_streams_has_kafkas_nodes_and_stores() -> None:
    b = StreamBuilder()
    left, right = b.stream("l"), b.stream("r")
    left.left_join(right, lambda a, c: [a, c], window=JoinWindows.of(5)).to("out")
    this, other = "KSTREAM-JOINTHIS-0000000004", "KSTREAM-OUTEROTHER-0000000005"
    shared = "KSTREAM-OUTERSHARED-0000000004-store"
    assert _processors(b) == {
        "KSTREAM-WINDOWED-0000000002": (("KSTREAM-SOURCE-0000000000",), [f"{this}-store"]),
        "KSTREAM-WINDOWED-0000000003": (("KSTREAM-SOURCE-0000000001",), [f"{other}-store"]),
        this: (("KSTREAM-WINDOWED-0000000002",), [f"{other}-store", shared]),
        other: (("KSTREAM-WINDOWED-0000000003",), [f"{this}-store", shared]),
        "KSTREAM-MERGE-0000000006": ((this, other), []),
    }
    assert b.build().children["KSTREAM-MERGE-0000000006"] == ["KSTREAM-SINK-0000000007"]


def test_an_outer_join_of_streams_names_both_sides_outer() -> None:
    b = StreamBuilder()
    b.stream("l").outer_join(b.stream("r"), lambda a, c: [a, c], window=JoinWindows.of(5)).to("o")
    assert sorted(b.build().stores) == [
        "KSTREAM-OUTEROTHER-0000000005-store",
        "KSTREAM-OUTERSHARED-0000000004-store",
        "KSTREAM-OUTERTHIS-0000000004-store",
    ]


def test_the_two_sides_of_a_join_share_one_stream_time() -> None:
    """The right side's record moves the stream time the left side works with: a later left
    record whose window has already ended by it is emitted unmatched at once."""
    b = StreamBuilder()
    left, right = b.stream("l", "string", "string"), b.stream("r", "string", "string")
    joined = left.left_join(right, lambda a, c: [a, c], window=JoinWindows.of(5, grace=0))
    joined.to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("l", "string", "string").pipe("k", "a", timestamp=10)
        d.input_topic("r", "string", "string").pipe("x", "b", timestamp=30)
        d.input_topic("l", "string", "string").pipe("z", "c", timestamp=20)
        out = d.output_topic("out", "string", "json").read_records()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("k", ["a", None], 10),
        ("z", ["c", None], 20),
    ]


def test_stores_of_kstreams_own_work_but_are_not_described() -> None:
    b = StreamBuilder()
    counts = b.stream("in").group_by_key().windowed_by(TimeWindows.of(10)).count(store="counts")
    counts.to_stream().to("out")
    topo = b.build()
    assert topo.undescribed_stores == {"counts-stream-time"}
    assert "app-counts-stream-time-changelog" in topo.compile("app").changelog_topics
    text = str(topo.describe())
    assert "(stores: [counts])" in text and "stream-time" not in text


def test_joins_of_one_rekeyed_stream_share_its_repartition_topic() -> None:
    """As Kafka: the second join reads the first one's topic, and still takes the three
    numbers of a repartition, so the names after it are Kafka's."""
    b = StreamBuilder()
    rekeyed = b.stream("in").select_key(lambda k, v: v)
    t1, t2 = b.table("t1"), b.table("t2")
    rekeyed.join(t1, lambda a, c: [a, c]).to("o1")
    rekeyed.left_join(t2, lambda a, c: [a, c]).to("o2")
    topo = b.build()
    assert list(topo.repartition_topics) == ["KSTREAM-KEY-SELECT-0000000001-repartition"]
    source = "KSTREAM-SOURCE-0000000010"
    # 8..10 the repartition, 11 the join, 12 its sink, 13..15 burned, 16 the left join
    assert topo.children[source] == ["KSTREAM-JOIN-0000000011", "KSTREAM-LEFTJOIN-0000000016"]


def test_a_join_after_a_global_table_runs_with_kafkas_task_ids(tmp_path: Path) -> None:
    """On the runtime: the global table's part is sub-topology 0, so the join's tasks are
    1_0 and 1_1, and each task's two join sides share that task's join state."""
    cluster = MockCluster()
    for topic, partitions in (("regions", 1), ("l", 2), ("r", 2), ("out", 2)):
        cluster.create_topic(topic, partitions)
    b = StreamBuilder()
    b.global_table("regions", "string", "string", store="regions")
    left, right = b.stream("l", "string", "string"), b.stream("r", "string", "string")
    joined = left.join(right, lambda a, c: a + c, window=JoinWindows.of(5))
    joined.to("out", "string", "string")
    p = MockProducer(cluster)
    for topic, key, value, ts in (("l", "k", "a", 10), ("l", "m", "b", 10), ("r", "k", "c", 12)):
        p.produce(topic, value.encode(), key=key.encode(), timestamp=ts)
    p.produce("r", b"d", key=b"m", timestamp=30)  # outside m's window
    p.flush()
    with running(cluster, tmp_path, "exactly_once", topology=b) as r:
        r.turn(3)
        assert sorted(r.thread.tasks) == [(1, 0), (1, 1)]
    out = [(m.key(), m.value()) for m in cluster.messages("out")]
    assert out == [(b"k", b"ac")]
