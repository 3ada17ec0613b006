"""Operators ported Kafka Streams 4.x apps use (issue 37, items 5 and 6): `to()` with a topic
chooser, `materialized=` on table filter / map_values / joins, custom timestamp extractors and
the timestamp type, `KTable.transform_values` with stores, and names that fix internal topics."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.errors import ProcessingError, TopicError, TopologyError
from kstream.records import KAFKA_TIMESTAMP_TYPES, Record, TimestampType
from kstream.testing.driver import TopologyTestDriver
from kstream.topology.processor import ProcessorContext

# --- to() with a topic chooser -------------------------------------------------------------


def test_to_with_a_chooser_routes_each_record_and_sees_its_context() -> None:
    seen: list[tuple[str | None, int | None, int]] = []

    def choose(k: str, v: dict[str, Any], ctx: Record) -> str:
        seen.append((ctx.topic, ctx.offset, ctx.timestamp))
        return f"orders-{v['region']}"

    b = StreamBuilder()
    b.stream("orders", "str", "json").to(choose, value_serde="json")
    with TopologyTestDriver(b) as d:
        d.input_topic("orders", "str", "json").pipe_many(
            [("a", {"region": "eu"}, 5), ("b", {"region": "us"}, 6), ("c", {"region": "eu"}, 7)]
        )
        eu = d.output_topic("orders-eu", "str", "json").read_records()
        us = d.output_topic("orders-us", "str", "json").read_key_values()
    assert [(r.key, r.timestamp) for r in eu] == [("a", 5), ("c", 7)]
    assert us == [("b", {"region": "us"})]
    assert seen == [("orders", 0, 5), ("orders", 1, 6), ("orders", 2, 7)]
    # a sink in Kafka's naming: it takes the counter's next SINK name
    assert "KSTREAM-SINK-0000000001" in str(b.build().describe())


def test_to_with_a_chooser_refuses_a_non_topic_through_the_error_handler() -> None:
    b = StreamBuilder()
    b.stream("in", "str", "str").to(lambda k, v, ctx: None)  # type: ignore[arg-type, return-value]
    with (
        TopologyTestDriver(b) as d,
        pytest.raises(ProcessingError, match="returned None, not a topic name"),
    ):
        d.input_topic("in", "str", "str").pipe("k", "v")


class _KnownTopics:
    """A collector that knows only some topics, as the runtime's (its partition counts
    come from the broker's metadata): `partitions_for` raises KeyError for the others."""

    def __init__(self, inner: Any, topics: dict[str, int]) -> None:
        self.inner = inner
        self.topics = topics

    def send(self, *args: Any) -> None:
        self.inner.send(*args)

    def partitions_for(self, topic: str) -> int:
        return self.topics[topic]


def test_to_with_a_chooser_fails_the_task_for_a_missing_topic() -> None:
    b = StreamBuilder()
    b.stream("in", "str", "str").to(lambda k, v, ctx: v)
    with TopologyTestDriver(b) as d:
        for t in d.tasks:
            t.collector = _KnownTopics(t.collector, {"there": 1})
        d.input_topic("in", "str", "str").pipe("k", "there")
        assert d.output_topic("there", "str", "str").read_value() == "there"
        with pytest.raises(TopicError, match="'missing', which does not exist"):
            d.input_topic("in", "str", "str").pipe("k", "missing")


def test_to_with_a_chooser_uses_the_partitioner() -> None:
    calls: list[tuple[Any, Any, int]] = []

    def partitioner(k: Any, v: Any, n: int) -> int:
        calls.append((k, v, n))
        return 0

    b = StreamBuilder()
    b.stream("in", "str", "str").to(lambda k, v, ctx: "out", partitioner=partitioner)
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "str", "str").pipe("k", "v")
    assert calls == [("k", "v", 1)]


def test_to_with_a_chooser_builds_on_spark() -> None:
    """Spark runs a topic chooser (tests/spark/test_topic_chooser_on_spark.py writes through
    it): its plan builds."""
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("in", "str", "str").to(lambda k, v, ctx: "out")
    assert build_task_plan(b.build(), "app").order


# --- materialized= -------------------------------------------------------------------------


def test_materialized_filter_is_queryable_changelogged_and_emits_as_unmaterialized() -> None:
    def build(materialized: str | None) -> StreamBuilder:
        b = StreamBuilder()
        t = b.table("users", "str", "long")
        t.filter(lambda k, v: v > 10, materialized=materialized).to_stream().to(
            "out", value_serde="long"
        )
        return b

    inputs = [("a", 20), ("a", 5), ("b", 1), ("a", 30)]
    outs = []
    for m in (None, "big"):
        with TopologyTestDriver(build(m), app_id="app") as d:
            d.input_topic("users", "str", "long").pipe_many(inputs)
            outs.append(d.output_topic("out", "str", "long").read_key_values())
            if m is not None:
                assert d.get_store("big").get("a") == 30
                assert d.get_store("big").get("b") is None
                assert "app-big-changelog" in d.compiled.changelog_topics
    # not materialized or materialized, Kafka's KTableFilter forwards the same updates
    assert outs[0] == outs[1] == [("a", 20), ("a", None), ("b", None), ("a", 30)]


def test_materialized_filter_not_and_a_spec_choose_the_store() -> None:
    b = StreamBuilder()
    t = b.table("users", "str", "long", store="users")
    small = t.filter_not(
        lambda k, v: v > 10,
        materialized=stores.key_value("small", value_serde="long", changelog=False),
    )
    assert small.store_name == "small"
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("users", "str", "long").pipe_many([("a", 3), ("b", 50), ("c", 4)])
        assert d.get_store("small").get("a") == 3
        assert d.get_store("small").get("b") is None
        d.input_topic("users", "str", "long").pipe("a", 40)
        assert d.get_store("small").get("a") is None
        assert d.get_store("small").get("c") == 4
        assert "app-small-changelog" not in d.compiled.changelog_topics


def test_materialized_map_values_and_the_filter_below_it_are_quiet() -> None:
    # a filter below a materialized table is quiet (Kafka: enableSendingOldValues on a
    # materialized parent): an update invisible before and after is not forwarded
    b = StreamBuilder()
    doubled = b.table("t", "str", "long").map_values(lambda v: v * 2, materialized="doubled")
    doubled.filter(lambda k, v: v > 10).to_stream().to("out", value_serde="long")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "str", "long").pipe_many([("a", 1), ("a", 6), ("a", 2), ("a", 1)])
        assert d.get_store("doubled").get("a") == 2
        assert d.output_topic("out", "str", "long").read_key_values() == [("a", 12), ("a", None)]


def test_materialized_join_has_a_store_of_its_own_that_later_joins_read() -> None:
    b = StreamBuilder()
    left = b.table("l", "str", "str", store="left")
    right = b.table("r", "str", "str", store="right")
    joined = left.left_join(right, lambda a, c: f"{a}+{c}", materialized="joined")
    assert joined.store_name == "joined"  # no longer the left input's store
    clicks = b.stream("clicks", "str", "str")
    clicks.join(joined, lambda c, j: f"{c}@{j}").to("out", value_serde="str")
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("l", "str", "str").pipe("k", "x")
        assert d.get_store("joined").get("k") == "x+None"
        d.input_topic("r", "str", "str").pipe("k", "y")
        assert d.get_store("joined").get("k") == "x+y"
        d.input_topic("clicks", "str", "str").pipe("k", "c")
        assert d.output_topic("out", "str", "str").read_values() == ["c@x+y"]
        d.input_topic("l", "str", "str").pipe("k", None)
        assert d.get_store("joined").get("k") is None
        assert "app-joined-changelog" in d.compiled.changelog_topics
    # the merge node keeps Kafka's name: materializing adds no node
    assert "KTABLE-MERGE-0000000004 (stores: [joined])" in str(b.build().describe())


def test_unmaterialized_join_still_names_its_left_store() -> None:
    b = StreamBuilder()
    left = b.table("l", "str", "str", store="left")
    assert left.join(b.table("r", "str", "str"), lambda a, c: a).store_name == "left"


# --- timestamp extractors ------------------------------------------------------------------


def test_stream_timestamp_extractor_sees_partition_time_and_drops_negatives() -> None:
    seen: list[int] = []

    def extract(r: Record, partition_time: int) -> int:
        seen.append(partition_time)
        return int(r.value["at"])

    b = StreamBuilder()
    b.stream("in", "str", "json", timestamp_extractor=extract).to("out", value_serde="json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "str", "json").pipe_many(
            [("a", {"at": 50}, 1), ("b", {"at": 20}, 2), ("c", {"at": -1}, 3), ("d", {"at": 70}, 4)]
        )
        out = d.output_topic("out", "str", "json").read_records()
        assert d.dropped_records() == {"negative_timestamp": 1}
    assert [(r.key, r.timestamp) for r in out] == [("a", 50), ("b", 20), ("d", 70)]
    assert seen == [-1, 50, 50, 50]


def test_extracted_timestamps_drive_windows() -> None:
    from kstream.dsl.windows import TimeWindows

    b = StreamBuilder()
    counts = (
        b.stream("in", "str", "long", timestamp_extractor=lambda r, t: r.value)
        .group_by_key()
        .windowed_by(TimeWindows.of("10ms"))
        .count()
    )
    counts.to_stream(lambda wk, v: f"{wk.key}@{wk.start}").to("out", "str", "long")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "str", "long").pipe_many([("a", 3, 1000), ("a", 12, 1000)])
        assert d.output_topic("out", "str", "long").read_key_values() == [("a@0", 1), ("a@10", 1)]


def test_table_and_global_table_timestamp_extractors() -> None:
    b = StreamBuilder()
    t = b.table("t", "str", "long", timestamp_extractor=lambda r, pt: r.value * 10)
    t.to_stream().to("out", value_serde="long")
    g = b.global_table("g", "str", "long", timestamp_extractor=lambda r, pt: r.value)
    b.stream("s", "str", "str").join(g, lambda k, v: k, lambda v, gv: gv).to(
        "joined", value_serde="long"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "str", "long").pipe("a", 4, timestamp=1)
        assert d.output_topic("out", "str", "long").read_record().timestamp == 40
        d.input_topic("g", "str", "long").pipe_many([("k", -5), ("j", 7)])
        assert d.get_store(g.store_name).get("k") is None  # extracted negative: not loaded
        d.input_topic("s", "str", "str").pipe_many([("k", "x"), ("j", "y")])
        assert d.output_topic("joined", "str", "long").read_values() == [7]
    # the extractor belongs to the source, as in Kafka: no node of its own
    described = str(b.build().describe())
    assert "timestamp-extractor" not in described
    # an unnamed table store takes its number before the nodes, as in Kafka (store 0)
    assert "--> KTABLE-SOURCE-0000000002" in described


def test_timestamp_extractor_must_be_callable() -> None:
    with pytest.raises(TopologyError, match="timestamp_extractor must be a function"):
        StreamBuilder().stream("in", timestamp_extractor=5)  # type: ignore[arg-type]


def test_timestamp_types_follow_confluent_kafkas_codes() -> None:
    assert KAFKA_TIMESTAMP_TYPES[confluent_kafka.TIMESTAMP_NOT_AVAILABLE] is (
        TimestampType.NOT_AVAILABLE
    )
    assert KAFKA_TIMESTAMP_TYPES[confluent_kafka.TIMESTAMP_CREATE_TIME] is (
        TimestampType.CREATE_TIME
    )
    assert KAFKA_TIMESTAMP_TYPES[confluent_kafka.TIMESTAMP_LOG_APPEND_TIME] is (
        TimestampType.LOG_APPEND_TIME
    )


# --- KTable.transform_values ---------------------------------------------------------------


class Versioned:
    """Numbers each update of a key (a store of its own); deletes stay deletes."""

    def init(self, ctx: ProcessorContext) -> None:
        self.versions = ctx.get_store("versions")

    def transform(self, key: str, value: Any) -> Any:
        if value is None:
            return None
        n = (self.versions.get(key) or 0) + 1
        self.versions.put(key, n)
        return f"{value}#{n}"


def _versions() -> Any:
    return stores.key_value("versions", key_serde="str", value_serde="long")


def test_transform_values_uses_its_store_and_sees_deletes() -> None:
    nones: list[str] = []

    class Spy(Versioned):
        def transform(self, key: str, value: Any) -> Any:
            if value is None:
                nones.append(key)
            return super().transform(key, value)

    b = StreamBuilder()
    t = b.table("t", "str", "str").transform_values(Spy, stores=[_versions()], name="tv")
    t.to_stream().to("out", value_serde="str")
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("t", "str", "str").pipe_many([("a", "x"), ("a", "y"), ("a", None)])
        assert d.output_topic("out", "str", "str").read_values() == ["x#1", "y#2", None]
        assert "app-versions-changelog" in d.compiled.changelog_topics
    assert nones == ["a"]
    assert "Processor: tv " in str(b.build().describe())


def test_transform_values_sends_old_values_to_a_regroup_and_joins_through_a_getter() -> None:
    b = StreamBuilder()
    t = b.table("t", "str", "str", store="t").transform_values(lambda: _Upper())
    # a regroup needs old values: transform is called on the old value too
    t.group_by(lambda k, v: (v, 1), "str", "long").count(store="per-value")
    b.stream("s", "str", "str").join(t, lambda s, tv: f"{s}:{tv}").to("out", value_serde="str")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "str", "str").pipe_many([("a", "x"), ("b", "x"), ("a", "y")])
        assert d.get_store("per-value").get("X") == 1
        assert d.get_store("per-value").get("Y") == 1
        d.input_topic("s", "str", "str").pipe("a", "s")
        assert d.output_topic("out", "str", "str").read_values() == ["s:Y"]


class _Upper:
    def transform(self, key: str, value: str | None) -> str | None:
        return None if value is None else value.upper()


def test_transform_values_materialized_is_queryable() -> None:
    b = StreamBuilder()
    t = b.table("t", "str", "str").transform_values(
        Versioned, stores=[_versions()], materialized="numbered"
    )
    assert t.store_name == "numbered"
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "str", "str").pipe_many([("a", "x"), ("a", "y")])
        assert d.get_store("numbered").get("a") == "y#2"


def test_transform_values_cannot_forward() -> None:
    class Forwarding:
        def init(self, ctx: ProcessorContext) -> None:
            self.ctx = ctx

        def transform(self, key: str, value: Any) -> Any:
            self.ctx.forward(Record(key, value))
            return value

    b = StreamBuilder()
    b.table("t", "str", "str").transform_values(Forwarding).to_stream().to("out")
    with (
        TopologyTestDriver(b) as d,
        pytest.raises(TopologyError, match="cannot forward records"),
    ):
        d.input_topic("t", "str", "str").pipe("a", "x")


def test_transform_values_refuses_a_factory_without_transform() -> None:
    b = StreamBuilder()
    b.table("t", "str", "str").transform_values(object).to_stream().to("out")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no transform"):
        TopologyTestDriver(b)


# --- named operations ----------------------------------------------------------------------


def _named_app(extra_operator: bool) -> StreamBuilder:
    b = StreamBuilder()
    s = b.stream("in", "str", "long")
    if extra_operator:
        s = s.filter(lambda k, v: v >= 0).peek(lambda k, v: None)
    keyed = s.select_key(lambda k, v: str(v), name="by-value")
    counts = keyed.group_by_key(name="grouped").count(store="counts", name="count")
    counts.to_stream(name="counts-out").to("out", value_serde="long", name="sink")
    keyed.repartition(name="rekeyed").to_table(store="latest", name="to-table")
    t = b.table("t", "str", "long", store="t", name="t")
    t.filter(lambda k, v: v > 0, name="positive", materialized="positive").join(
        t, lambda a, c: a, name="self-join", materialized="joined"
    )
    return b


def test_names_fix_internal_topics_when_an_operator_is_added_before() -> None:
    topics = []
    described = []
    for extra in (False, True):
        with TopologyTestDriver(_named_app(extra), app_id="app") as d:
            topics.append(sorted(d.compiled.internal_topics))
        described.append(str(_named_app(extra).build().describe()))
    assert topics[0] == topics[1]
    assert topics[0] == [
        "app-counts-changelog",
        "app-grouped-repartition",
        "app-joined-changelog",
        "app-latest-changelog",
        "app-positive-changelog",
        "app-rekeyed-repartition",
        "app-self-join-timestamps-store-changelog",
        "app-t-changelog",
    ]
    for name in ("by-value", "count", "counts-out", "sink", "positive", "self-join", "to-table"):
        assert all(f": {name} " in text for text in described), name


def test_without_names_an_operator_added_before_renames_internal_topics() -> None:
    # what the names above prevent: generated names take the builder's next index
    topics = []
    for extra in (False, True):
        b = StreamBuilder()
        s = b.stream("in", "str", "long")
        if extra:
            s = s.filter(lambda k, v: v >= 0)
        s.select_key(lambda k, v: str(v)).group_by_key().count()
        with TopologyTestDriver(b, app_id="app") as d:
            topics.append(sorted(d.compiled.internal_topics))
    assert topics[0] != topics[1]
    assert all(t.startswith("app-KSTREAM-AGGREGATE-STATE-STORE-") for t in topics[0] + topics[1])


def test_grouping_names_the_repartition_topic_of_the_aggregation_below() -> None:
    from kstream.dsl.windows import TimeWindows

    b = StreamBuilder()
    s = b.stream("in", "str", "long")
    grouped = s.group_by(lambda k, v: str(v % 2), "str", "long", name="parity")
    grouped.windowed_by(TimeWindows.of("10ms")).reduce(lambda a, c: a + c, store="win")
    with TopologyTestDriver(b, app_id="app") as d:
        assert sorted(d.compiled.repartition_topics) == ["app-parity-repartition"]
        d.input_topic("in", "str", "long").pipe_many([("a", 1, 0), ("b", 3, 1), ("c", 2, 2)])
        assert d.get_store("win").get("1", 0) == 4
    assert "Processor: parity " in str(b.build().describe())
    # as Kafka without optimization: a second aggregation of the grouping would register the
    # same repartition topic again
    with pytest.raises(TopologyError, match="parity-repartition"):
        grouped.count()
