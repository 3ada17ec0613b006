"""What the Spark compiler accepts, and the clear errors for what it cannot map."""

from __future__ import annotations

from typing import Any

import pytest

from examples.word_count import build_topology as word_count
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError, TopologyError
from kstream.spark.plan import ENTRY, build_plan
from kstream.topology.processor import Processor


def test_word_count_has_one_stateful_step() -> None:
    plan = build_plan(word_count("lines", "counts"))
    assert plan.external_topics == ["lines"]
    assert plan.sink_topics == ["counts"]
    assert plan.stateful == ["KSTREAM-AGGREGATE-0000000003"]
    assert plan.feeds == {"KSTREAM-AGGREGATE-0000000003": [ENTRY]}
    assert plan.reaches_sink == {"KSTREAM-AGGREGATE-0000000003"}


class Upper(Processor):
    def process(self, record: Any) -> None:
        self.ctx.forward(record.with_value(record.value.upper()))


def test_user_processor_is_rejected_naming_it() -> None:
    b = StreamBuilder()
    b.stream("in").process(Upper, name="shout").to("out")
    with pytest.raises(
        TopologyError, match=r"operator shout \(node 'shout', a user Processor Upper\)"
    ):
        build_plan(b.build())


def test_chained_aggregations_are_rejected_naming_both() -> None:
    b = StreamBuilder()
    counts = b.stream("in", key_serde="string").group_by_key().count()
    counts.to_stream().group_by(lambda _k, n: n).count().to_stream().to("out")
    with pytest.raises(TopologyError, match="chained stateful operators") as e:
        build_plan(b.build())
    assert "KSTREAM-AGGREGATE-0000000001" in str(e.value)


def test_global_table_is_rejected() -> None:
    b = StreamBuilder()
    g = b.global_table("products", store="products")
    b.stream("orders").join(g, lambda _k, v: v, lambda v, p: (v, p)).to("out")
    with pytest.raises(TopologyError, match="global tables cannot run on Spark"):
        build_plan(b.build())


def test_unmapped_example_operators_fail_at_build_time() -> None:
    from examples import clicks_per_minute, payments_dedup

    for module in (clicks_per_minute, payments_dedup):
        with pytest.raises(TopologyError, match="cannot run on Spark"):
            build_plan(module.build_topology())


def test_plan_pickles_builtin_serdes_by_name() -> None:
    cloudpickle = pytest.importorskip("pyspark.cloudpickle")

    plan = build_plan(word_count("lines", "counts"))
    again = cloudpickle.loads(cloudpickle.dumps(plan))
    src = again.nodes[again.source_of_topic["lines"]]
    from kstream.serde import BUILTIN

    assert src.value_serde is BUILTIN["string"]


def test_trigger_parsing() -> None:
    from kstream.spark.runner import parse_trigger

    assert parse_trigger("availableNow") == {"availableNow": True}
    assert parse_trigger("processingTime=1s") == {"processingTime": "1000 milliseconds"}
    with pytest.raises(ConfigError, match="trigger"):
        parse_trigger("once")


def test_task_path_takes_every_example_and_orders_queries_upstream_first() -> None:
    pytest.importorskip("pyspark")
    from examples import clicks_per_minute, orders_enriched, payments_dedup
    from kstream.spark.tasks import build_task_plan

    for module in (clicks_per_minute, payments_dedup, orders_enriched):
        build_task_plan(module.build_topology(), "app")
    plan = build_task_plan(orders_enriched.build_topology(), "app")
    compiled = plan.compiled
    rekey = compiled.subtopology_for_topic("orders").id
    join = compiled.subtopology_for_topic("customers").id
    assert plan.order == [rekey, join]
    assert plan.stateful == {join}  # the re-keying side runs without state
    assert plan.repartition_topics == ["app-orders-by-customer-repartition"]
    assert plan.global_topics == ["products"]


class FakeQuery:
    """A streaming query that runs until the test finishes it."""

    def __init__(self, sid: int, started: list[int]) -> None:
        self.sid, self.isActive = sid, True
        started.append(sid)

    def exception(self) -> None:
        return None

    def awaitTermination(self, timeout: float) -> bool:
        return not self.isActive


def test_available_now_starts_a_query_once_its_upstream_finished_and_others_side_by_side() -> None:
    pytest.importorskip("pyspark")
    from kstream.spark.runner import TaskQueries
    from kstream.spark.tasks import build_task_plan

    builder = StreamBuilder()
    builder.stream("lines").group_by(lambda _k, v: v).count(store="counts").to_stream().to("out")
    builder.stream("clicks").group_by_key().count(store="clicks").to_stream().to("cpm")
    plan = build_task_plan(builder.build(), "app")
    rekey = plan.compiled.subtopology_for_topic("lines").id
    count = next(sid for sid in plan.order if plan.upstream.get(sid))
    other = plan.compiled.subtopology_for_topic("clicks").id
    assert plan.upstream == {rekey: set(), count: {rekey}, other: set()}

    started: list[int] = []
    queries: dict[int, FakeQuery] = {}

    def starter(sid: int) -> Any:
        def start() -> tuple[FakeQuery, None]:
            queries[sid] = FakeQuery(sid, started)
            return queries[sid], None

        return start

    tq = TaskQueries(plan, {sid: starter(sid) for sid in plan.order}, sequential=True)
    assert sorted(started) == sorted([rekey, other])  # independent ones side by side
    queries[other].isActive = False
    tq._start_ready()
    assert count not in started  # its upstream still runs
    queries[rekey].isActive = False
    tq._start_ready()
    assert started[-1] == count
    queries[count].isActive = False
    tq.wait()  # every query has finished: returns

    started.clear()
    TaskQueries(plan, {sid: starter(sid) for sid in plan.order}, sequential=False)
    assert sorted(started) == sorted(plan.order)  # processingTime: all at once


def test_task_path_rejects_topic_loops() -> None:
    pytest.importorskip("pyspark")
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("a").process(Upper).to("b")
    b.stream("b").filter(lambda _k, v: v).to("a")
    with pytest.raises(TopologyError, match="loop"):
        build_task_plan(b.build(), "app")


def test_merge_by_time_keeps_partition_order() -> None:
    pytest.importorskip("pyspark")
    from kstream.records import Record
    from kstream.spark.tasks import merge_by_time

    a = [Record("k", i, ts, (), "a", 0, i) for i, ts in enumerate([5, 1, 9])]
    b = [Record("k", i, ts, (), "b", 0, i) for i, ts in enumerate([3, 7])]
    got = [(r.topic, r.offset) for r in merge_by_time(b + a)]
    assert got == [("b", 0), ("a", 0), ("a", 1), ("b", 1), ("a", 2)]


def test_grouping_labels_spread_evenly_over_spark_partitions(spark: Any) -> None:
    """Label i lands in Spark partition i mod P for every P dividing the modulus."""
    from kstream.spark.execute import BUCKET_LABELS, STATE_BUCKETS, spread_labels

    labels = spread_labels(6, 1024)
    assert labels[:4] == spread_labels(4, 1024)  # a longer list keeps the labels it had
    rows = spark.createDataFrame([(x,) for x in BUCKET_LABELS + labels], "x int")
    hashes = [r.h for r in rows.selectExpr("hash(x) as h").collect()]
    assert [h % STATE_BUCKETS for h in hashes[:STATE_BUCKETS]] == list(range(STATE_BUCKETS))
    assert [h % 1024 for h in hashes[STATE_BUCKETS:]] == list(range(6))


def test_slots_computed_by_spark_are_the_sinks_own(spark: Any) -> None:
    """The task path's sink places rows with a Spark expression: the same slot as `slot_of`
    gives for the row's destination, for every topic name, partition and a missing one."""
    from kstream.spark.execute import ROW_SCHEMA
    from kstream.spark.sink import slot_of, with_slots

    topics = ["out", "counts-app-repartition", "ümlaut-topic", "x" * 200, ""]
    rows = [
        (None, t, b"k", b"v", 0, part, "in", 0, i, 0, None, None)
        for i, (t, part) in enumerate((t, p) for t in topics for p in (None, 0, 1, 7, 63))
    ]
    df = spark.createDataFrame(rows, ROW_SCHEMA)
    for slots in (1, 2, 5, 64):
        got = [(r.poff, r.slot) for r in with_slots(df, slots).collect()]
        want = [(r[8], slot_of(r[1], -1 if r[5] is None else r[5], slots)) for r in rows]
        assert sorted(got) == sorted(want)
