"""Grouping, aggregations, tables (tombstones included) and stores through the test driver."""

from __future__ import annotations

from typing import Any

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.dsl.processors.getter import ValueGetter
from kstream.errors import ProcessingError
from kstream.records import Record
from kstream.testing.driver import TopologyTestDriver
from kstream.topology import Processor, ProcessorContext, Topology

Pairs = list[tuple[Any, Any]]


def test_count_by_key_without_repartition() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "string").group_by_key().count(store="c").to_stream().to(
        "out", "string", "long"
    )
    topo = b.build()
    assert len(topo.compile().subtopologies) == 1
    with TopologyTestDriver(topo) as d:
        d.input_topic("in", "string", "string").pipe_many(
            [("a", "x"), ("b", "y"), ("a", "z"), (None, "skipped"), ("b", None)]
        )
        assert d.output_topic("out", "string", "long").read_key_values() == [
            ("a", 1),
            ("b", 1),
            ("a", 2),
        ]
        assert d.get_store("c").get("a") == 2


def test_to_stream_changes_an_aggregation_s_updates_only_when_it_alone_gets_them() -> None:
    """to_stream below an aggregation unwraps each update in place (the aggregation made the
    records for it alone); a table read by two operators gives each its own records."""
    b = StreamBuilder()
    counts = b.stream("in", "string", "string").group_by_key().count(store="c")
    counts.to_stream().to("out", "string", "long")
    counts.to_stream().map_values(lambda n: n * 10).to("tens", "string", "long")
    counts.filter(lambda _k, n: n > 1).to_stream().to("big", "string", "long")
    alone = StreamBuilder()
    alone.stream("in", "string", "string").group_by_key().count(store="c").to_stream().to(
        "out", "string", "long"
    )
    expected = [("a", 1), ("b", 1), ("a", 2)]
    for topo, tables in ((b.build(), True), (alone.build(), False)):
        with TopologyTestDriver(topo) as d:
            d.input_topic("in", "string", "string").pipe_many([("a", "x"), ("b", "y"), ("a", "z")])
            assert d.output_topic("out", "string", "long").read_key_values() == expected
            if tables:
                tens = d.output_topic("tens", "string", "long").read_key_values()
                assert tens == [(k, 10 * n) for k, n in expected]
                big = d.output_topic("big", "string", "long").read_key_values()
                assert big == [("a", 2)]


def test_reduce_and_aggregate_after_group_by() -> None:
    b = StreamBuilder()
    grouped = b.stream("in", "string", "json").group_by(lambda k, v: v["team"], key_serde="string")
    grouped.reduce(
        lambda agg, v: {"team": v["team"], "n": agg["n"] + v["n"]}, store="sum"
    ).to_stream().map_values(lambda v: v["n"]).to("sums", "string", "json")
    grouped.aggregate(
        list, lambda k, v, agg: [*agg, v["n"]], store=stores.key_value("hist", backend="memory")
    ).to_stream().to("hist", "string", "json")
    recs = [
        ("u1", {"team": "red", "n": 1}),
        ("u2", {"team": "blue", "n": 5}),
        ("u3", {"team": "red", "n": 2}),
    ]
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("in", "string", "json").pipe_many(recs)
        assert d.output_topic("sums", "string", "json").read_key_values() == [
            ("red", 1),
            ("blue", 5),
            ("red", 3),
        ]
        assert d.output_topic("hist", "string", "json").read_key_values() == [
            ("red", [1]),
            ("blue", [5]),
            ("red", [1, 2]),
        ]
        assert sorted(d.compiled.repartition_topics) == [
            "app-hist-repartition",
            "app-sum-repartition",
        ]


def test_aggregation_error_is_a_processing_error() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "json").group_by_key().reduce(lambda a, v: a + v).to_stream().to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        inp = d.input_topic("in", "string", "json")
        inp.pipe("a", 1)
        with pytest.raises(ProcessingError, match="KSTREAM-REDUCE") as ei:
            inp.pipe("a", "text")
        assert ei.value.offset == 1


def table_outputs(build: Any, records: Pairs, store: str | None = "ts") -> Pairs:
    b = StreamBuilder()
    table = b.table("t", "string", "json", store=store)
    build(table).to_stream().to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "json").pipe_many(records)
        return d.output_topic("out", "string", "json").read_key_values()


TABLE_INPUT: Pairs = [("a", 1), ("a", 2), ("b", 3), ("a", None), ("c", None), ("b", 0)]


def test_table_source_emits_every_update_and_tombstones() -> None:
    assert table_outputs(lambda t: t, TABLE_INPUT) == [
        ("a", 1),
        ("a", 2),
        ("b", 3),
        ("a", None),
        ("c", None),
        ("b", 0),
    ]


def test_table_filter_forwards_rejected_updates_as_tombstones() -> None:
    """As Kafka's KTableFilter below a table not materialized in Kafka's sense (no store
    named) and with no consumer needing old values: every update that does not match reaches
    to_stream as a tombstone, visible before or not."""
    assert table_outputs(lambda t: t.filter(lambda k, v: v > 1), TABLE_INPUT, None) == [
        ("a", None),  # 1 does not match
        ("a", 2),
        ("b", 3),
        ("a", None),  # deleted upstream
        ("c", None),  # deleted upstream, never visible
        ("b", None),  # stopped matching
    ]
    assert table_outputs(lambda t: t.filter_not(lambda k, v: v > 1), TABLE_INPUT, None) == [
        ("a", 1),
        ("a", None),  # 2 does not match filter_not: the visible 1 is deleted
        ("b", None),  # 3 does not match
        ("a", None),
        ("c", None),
        ("b", 0),
    ]


def test_table_filter_below_a_named_store_forwards_only_visible_changes() -> None:
    """A table given a store is materialized in Kafka's sense: its filter sends old values
    (`parent.enableSendingOldValues(false)` succeeds), so an update invisible before and
    after is not forwarded (found by the Kafka Streams oracle, tests/oracle)."""
    assert table_outputs(lambda t: t.filter(lambda k, v: v > 1), TABLE_INPUT) == [
        ("a", 2),
        ("b", 3),
        ("a", None),  # deleted upstream
        ("b", None),  # stopped matching
    ]


def _filtered_after(join: str, filter_first: bool) -> tuple[Pairs, Pairs]:
    """An unnamed source table `a` filtered (even values) and joined (`join`: a table-table
    outer or inner join with `b`, or a stream-table join of `s` with `a`), the filter made
    before or after the join; `a: x -> 1` piped. The filter's and the join's outputs."""
    b = StreamBuilder()
    a = b.table("a", "string", "long")

    def filtered() -> None:
        a.filter(lambda _k, v: v % 2 == 0).to_stream().to("filtered", "string", "long")

    if filter_first:
        filtered()
    if join == "stream":
        s = b.stream("s", "string", "long")
        s.join(a, lambda v, t: f"{v}|{t}").to("joined", "string", "string")
    else:
        t = b.table("b", "string", "long")
        pair = lambda v, o: f"{v}|{o}"  # noqa: E731
        joined = a.outer_join(t, pair) if join == "outer" else a.join(t, pair)
        joined.to_stream().to("joined", "string", "string")
    if not filter_first:
        filtered()
    with TopologyTestDriver(b) as d:
        d.input_topic("a", "string", "long").pipe("x", 1, 10)
        return (
            d.output_topic("filtered", "string", "long").read_key_values(),
            d.output_topic("joined", "string", "string").read_key_values(),
        )


@pytest.mark.parametrize("join", ["outer", "inner", "stream"])
def test_table_filter_made_after_a_join_read_its_table_forwards_only_visible_changes(
    join: str,
) -> None:
    """Issue 47: a join reading an unnamed source table (Kafka's `valueGetterSupplier()`)
    materializes it; a filter made afterwards asks it for old values
    (`parent.enableSendingOldValues(false)` now succeeds) and forwards nothing for an update
    invisible before and after. Made before the join, the filter was given no old values and
    forwards that update as a tombstone (Kafka decides when the filter is made). Both orders
    checked against Kafka Streams (tests/oracle/test_oracle.py REGRESSIONS)."""
    filtered, _ = _filtered_after(join, filter_first=False)
    assert filtered == []
    filtered, _ = _filtered_after(join, filter_first=True)
    assert filtered == [("x", None)]


def test_table_filter_below_a_map_values_made_before_the_join_forwards_only_visible_changes() -> (
    None
):
    """Kafka asks for old values when the filter is made, through the operators in between:
    a `map_values` made before the join (so before the table was materialized) passes the
    question on to the table, which the join has materialized since."""
    b = StreamBuilder()
    a = b.table("a", "string", "long")
    plus_one = a.map_values(lambda v: v + 1)
    b.stream("s", "string", "long").join(a, lambda v, t: f"{v}|{t}").to(
        "joined", "string", "string"
    )
    plus_one.filter(lambda _k, v: v % 2 == 1).to_stream().to("filtered", "string", "long")
    with TopologyTestDriver(b) as d:
        d.input_topic("a", "string", "long").pipe("x", 1, 10)
        assert d.output_topic("filtered", "string", "long").read_key_values() == []


def _source_line(b: StreamBuilder) -> str:
    text = str(b.build().describe())
    return next(line.strip() for line in text.splitlines() if "Processor: KTABLE-SOURCE" in line)


def test_an_unnamed_table_store_is_described_once_kafka_would_materialize_it() -> None:
    """Kafka adds the store of an unnamed source table to its topology only when it
    materializes the table (a join reads it, or an operator below needs old values): before
    that, `describe()` lists no store for it (found by the oracle's describe lane once it drew
    unnamed tables, issue 47). kstream keeps the store either way."""
    b = StreamBuilder()
    a = b.table("a", "string", "long")
    a.filter(lambda _k, v: v > 0).to_stream().to("filtered", "string", "long")
    assert _source_line(b) == "Processor: KTABLE-SOURCE-0000000002 (stores: [])"
    b.stream("s", "string", "long").join(a, lambda v, t: v).to("joined", "string", "long")
    assert _source_line(b) == (
        "Processor: KTABLE-SOURCE-0000000002 (stores: [a-STATE-STORE-0000000000])"
    )


def test_table_filter_below_a_regroup_forwards_only_visible_changes() -> None:
    """KTableFilterTest.shouldSkipNullToRepartitionWithoutMaterialization: a regroup needs old
    values, so the filter forwards nothing for an update invisible before and after, and the
    flag reaches filters above a map_values too."""
    b = StreamBuilder()
    table = b.table("t", "string", "json").filter(lambda _k, v: v > 1).map_values(lambda v: v)
    table.to_stream().to("direct", "string", "json")
    table.group_by(lambda k, v: ("all", v), key_serde="string", value_serde="json").reduce(
        lambda a, v: a + v, lambda a, v: a - v
    ).to_stream().to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "json").pipe_many(TABLE_INPUT)
        assert d.output_topic("direct", "string", "json").read_key_values() == [
            ("a", 2),
            ("b", 3),
            ("a", None),
            ("b", None),
        ]
        assert d.output_topic("out", "string", "json").read_key_values() == [
            ("all", 2),
            ("all", 5),
            ("all", 3),
            ("all", 0),
        ]


def test_table_map_values_keeps_tombstones() -> None:
    assert table_outputs(lambda t: t.map_values(lambda v: v * 10), TABLE_INPUT[:4]) == [
        ("a", 10),
        ("a", 20),
        ("b", 30),
        ("a", None),
    ]


def test_table_store_holds_latest_values() -> None:
    b = StreamBuilder()
    b.table("t", "string", "json", store="ts")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "json").pipe_many(TABLE_INPUT)
        with d.get_store("ts").all() as cur:
            assert list(cur) == [("b", 0)]


def test_stream_to_table_after_key_change_repartitions() -> None:
    b = StreamBuilder()
    table = (
        b.stream("in", "string", "json").select_key(lambda k, v: v["id"]).to_table(store="latest")
    )
    table.to_stream().map_values(lambda v: v["x"]).to("out", "auto", "json")
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("in", "string", "json").pipe_many(
            [("k", {"id": 7, "x": "a"}), ("k", {"id": 7, "x": "b"})]
        )
        assert d.output_topic("out", "auto", "json").read_key_values() == [(7, "a"), (7, "b")]
        assert d.get_store("latest").get(7) == {"id": 7, "x": "b"}
        # named after the processor, as Kafka names it (KStreamImpl.toTable)
        assert "app-KSTREAM-TOTABLE-0000000002-repartition" in d.compiled.repartition_topics


def test_value_getter_of_derived_table() -> None:
    """What joins use: a derived table's current value, computed from its source's store."""
    b = StreamBuilder()
    table = b.table("t", "string", "json", store="ts").filter(lambda k, v: v > 1).map_values(str)
    getter: ValueGetter = table._getter

    class Lookup(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            super().init(ctx)
            self.get = getter.bind(ctx)

        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_value(self.get(record.key)))

    b2 = b.stream("s", "string", "string")
    b2.process(Lookup, stores=getter.stores).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "json").pipe_many([("a", 1), ("b", 2)])
        d.input_topic("s", "string", "string").pipe_many([("a", "?"), ("b", "?"), ("z", "?")])
        assert d.output_topic("out", "string", "json").read_key_values() == [
            ("a", None),
            ("b", "2"),
            ("z", None),
        ]


class CountingProcessor(Processor):
    """Counts per key in a store and forwards the counts on a stream-time punctuation."""

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store("counts")
        ctx.schedule(100, "stream_time", self.emit)

    def process(self, record: Record) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def emit(self, ts: int) -> None:
        with self.store.all() as cur:
            for k, v in cur:
                self.ctx.forward(Record(k, v, ts))


def test_processor_api_with_store_and_punctuation() -> None:
    t = (
        Topology()
        .add_source("src", "in", "string", "string")
        .add_processor("count", CountingProcessor, "src")
        .add_state_store(
            stores.key_value("counts", key_serde="string", value_serde="long"), "count"
        )
        .add_sink("out", "out", "count", "string", "long")
    )
    with TopologyTestDriver(t) as d:
        inp = d.input_topic("in", "string", "string")
        inp.pipe("a", "", timestamp=0)  # first punctuation: stream time 0
        inp.pipe("b", "", timestamp=50)
        inp.pipe("a", "", timestamp=120)  # crosses 100
        out = d.output_topic("out", "string", "long")
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("a", 1, 0),
            ("a", 2, 120),
            ("b", 1, 120),
        ]
        # the driver's store is writable, and processing sees what the test wrote
        d.get_store("counts").put("b", 41)
        inp.pipe("b", "", timestamp=130)
        assert d.get_store("counts").get("b") == 42


def test_global_table_readable_from_every_processor() -> None:
    b = StreamBuilder()
    countries = b.global_table("countries", "string", "string", store="countries")

    class Enrich(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            super().init(ctx)
            self.countries = ctx.get_store(countries.store_name)

        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_value(self.countries.get(record.value)))

    b.stream("users", "string", "string").process(Enrich).to("out", "string", "string")
    with TopologyTestDriver(b) as d:
        d.input_topic("countries", "string", "string").pipe_many(
            [("fr", "France"), ("de", "Germany")]
        )
        d.input_topic("countries", "string", "string").pipe("de", None)
        d.input_topic("users", "string", "string").pipe_many([("u1", "fr"), ("u2", "de")])
        assert d.output_topic("out", "string", "string").read_key_values() == [
            ("u1", "France"),
            ("u2", None),
        ]
        assert d.get_store("countries").get("fr") == "France"


def test_interleaved_topics_in_one_batch_keep_time_order() -> None:
    """A table update and a stream lookup in one batch: each sees what came before it."""
    b = StreamBuilder()
    getter: ValueGetter = b.table("t", "string", "json", store="ts")._getter

    class Lookup(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            super().init(ctx)
            self.get = getter.bind(ctx)

        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_value(self.get(record.key)))

    b.stream("s", "string", "string").process(Lookup, stores=getter.stores).to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        task = d.tasks[0]
        batch = [
            Record(b"a", b"1", 1, (), "t", 0, 0),
            Record(b"a", b"?", 2, (), "s", 0, 0),
            Record(b"a", b"2", 3, (), "t", 0, 1),
            Record(b"a", b"?", 4, (), "s", 0, 1),
            Record(b"a", None, 5, (), "t", 0, 2),
            Record(b"a", b"?", 6, (), "s", 0, 2),
        ]
        task.process(batch)
        assert d.output_topic("out", "string", "json").read_values() == [1, 2, None]


def test_store_writes_carry_their_input_record() -> None:
    """The runtime's exactly-once restore needs the source offset of every changelog write."""
    b = StreamBuilder()
    b.stream("in", "string", "string").group_by_key().count(store="c")
    with TopologyTestDriver(b) as d:
        task = d.tasks[0]
        task.process([Record(b"k", b"v", i, (), "in", 0, 10 + i) for i in range(3)])
        task.process([Record(b"j", b"v", 5, (), "in", 0, 20)])
        entries = task.stores["c"].pending()
        assert [e.source for e in entries] == [("in", 0, 12), ("in", 0, 20)]


def test_commit_request_from_processor() -> None:
    class Committer(Processor):
        def process(self, record: Record) -> None:
            if record.value == "now":
                self.ctx.commit()

    t = Topology().add_source("src", "in", "string", "string").add_processor("p", Committer, "src")
    with TopologyTestDriver(t) as d:
        task = d.tasks[0]
        task.process([Record(b"k", b"later", 0, (), "in", 0, 0)])
        assert task.commit_requested is False
        task.process([Record(b"k", b"now", 0, (), "in", 0, 1)])
        assert task.commit_requested is True
        task.flush_stores()
        assert task.commit_requested is False


def test_plain_key_value_store_reports_no_timestamp() -> None:
    """A store that is not an aggregation's keeps no timestamps: -1, and writes keep the value."""
    t = Topology().add_source("src", "in", "string", "string")
    t.add_processor("p", lambda: _Noop(), "src")
    t.add_state_store(stores.key_value("kv", key_serde="string", value_serde="string"), "p")
    with TopologyTestDriver(t) as d:
        store = d.get_store("kv")
        store.put_with_timestamp("k", "v", 99)
        assert store.get("k") == "v"
        assert tuple(store.get_with_timestamp("k")) == ("v", -1)
        store.put_with_timestamp("k", None, 100)
        assert store.get_with_timestamp("k") is None


class _Noop(Processor):
    def process(self, record: Record) -> None:
        pass


def test_aggregation_over_a_store_of_python_objects_keeps_timestamps() -> None:
    """Engines whose stores hold Python objects (the Spark runner's state buckets) get the
    timestamps inside the stored values; a value stored without one reads as -1."""
    from kstream.dsl.processors import AggregateProcessor, count_step

    class DictStore:
        def __init__(self) -> None:
            self.data: dict[Any, Any] = {"a": 5}

        def get(self, key: Any) -> Any:
            return self.data.get(key)

        def put(self, key: Any, value: Any) -> None:
            self.data[key] = value

    class Ctx:
        task = None
        forwarded: list[Record] = []

        def __init__(self) -> None:
            self.store = DictStore()

        def get_store(self, _name: str) -> DictStore:
            return self.store

        def forward_batch(self, records: list[Record], to: str | None = None) -> None:
            self.forwarded.extend(records)

        def on_error(self, exc: BaseException, record: Record) -> None:
            raise exc

        def record_dropped(self, reason: str, record: Record | None = None) -> None:
            raise AssertionError(reason)

    ctx = Ctx()
    proc = AggregateProcessor("s", count_step)
    proc.init(ctx)  # type: ignore[arg-type]
    proc.process_batch([Record("a", "x", 9), Record("b", "y", 4), Record("b", "z", 2)])
    assert [(r.key, r.value.new, r.timestamp) for r in ctx.forwarded] == [
        ("a", 6, 9),
        ("b", 1, 4),
        ("b", 2, 4),
    ]
    assert ctx.store.data == {"a": (6, 9), "b": (2, 4)}
