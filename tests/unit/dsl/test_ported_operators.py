"""Operators ported Kafka Streams 4.x apps use (issue 37, item 5): `process_values`, `split`
with `Branched`, `KTable.to_stream(mapper)`, and mappers and joiners that receive the key."""

from __future__ import annotations

import pytest

from kstream import stores
from kstream.dsl import Branched, StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.errors import ProcessingError, TopologyError
from kstream.records import Record
from kstream.testing.driver import TopologyTestDriver
from kstream.topology import Processor
from kstream.topology.processor import ProcessorContext

# --- process_values ------------------------------------------------------------------------


class RunningTotal(Processor):
    """Forwards each value with the running total of its key (a store of its own)."""

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store("totals")

    def process(self, record: Record) -> None:
        total = (self.store.get(record.key) or 0) + record.value
        self.store.put(record.key, total)
        self.ctx.forward(record.with_value(total))


def test_process_values_keeps_keys_and_needs_no_repartition() -> None:
    b = StreamBuilder()
    totals = b.stream("in", "string", "long").process_values(
        RunningTotal, stores=[stores.key_value("totals", key_serde="string", value_serde="long")]
    )
    totals.to("out", value_serde="long")
    totals.group_by_key().count(store="n").to_stream().to("counts", value_serde="long")
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("in", "string", "long").pipe_many([("a", 1), ("b", 5), ("a", 2)])
        assert d.output_topic("out", "string", "long").read_key_values() == [
            ("a", 1),
            ("b", 5),
            ("a", 3),
        ]
        assert not d.compiled.repartition_topics
        assert d.get_store("n").get("a") == 2
    # Kafka's name for the node (KStreamImpl.processValues)
    assert "KSTREAM-PROCESSVALUES-0000000001" in str(b.build().describe())


def test_process_after_process_values_still_repartitions_after_process() -> None:
    b = StreamBuilder()
    s = b.stream("in", "string", "long").process(RunningTotal, stores=[])
    assert s._repartition_required
    b2 = StreamBuilder()
    kept = (
        b2.stream("in", "string", "long")
        .select_key(lambda k, v: v)
        .process_values(RunningTotal, stores=[stores.key_value("totals")])
    )
    assert kept._repartition_required  # a key changed above is still changed


def test_process_values_refuses_a_changed_key() -> None:
    class Rekey(Processor):
        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_key("other"))

    b = StreamBuilder()
    b.stream("in", "string", "long").process_values(Rekey).to("out")
    with (
        TopologyTestDriver(b) as d,
        pytest.raises(ProcessingError, match="process_values keeps keys"),
    ):
        d.input_topic("in", "string", "long").pipe("a", 1)


def test_process_values_takes_duck_typed_processors_and_names() -> None:
    class Upper:
        def init(self, ctx: ProcessorContext) -> None:
            self.ctx = ctx

        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_value(record.value.upper()))
            self.ctx.forward(record)

    b = StreamBuilder()
    b.stream("in", "string", "string").process_values(Upper, name="up").to(
        "out", value_serde="string"
    )
    assert "Processor: up " in str(b.build().describe())
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe("k", "x")
        assert d.output_topic("out", "string", "string").read_key_values() == [
            ("k", "X"),
            ("k", "x"),
        ]


# --- split() with Branched -----------------------------------------------------------------


def test_split_routes_to_the_first_match_and_names_branches_as_kafka() -> None:
    b = StreamBuilder()
    out = (
        b.stream("in", "string", "long")
        .split("s-")
        .branch(lambda k, v: v > 10, Branched.as_("big"))
        .branch(lambda k, v: v > 5)
        .default_branch()
    )
    assert list(out) == ["s-big", "s-2", "s-0"]
    for name, stream in out.items():
        stream.to(name, value_serde="long")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "long").pipe_many([("a", 20), ("b", 7), ("c", 1), ("d", 11)])
        read = {t: d.output_topic(t, "string", "long").read_key_values() for t in out}
    assert read == {"s-big": [("a", 20), ("d", 11)], "s-2": [("b", 7)], "s-0": [("c", 1)]}


def test_split_unnamed_takes_generated_names_and_drops_without_default() -> None:
    b = StreamBuilder()
    out = b.stream("in", "string", "long").split().branch(lambda k, v: v > 0).no_default_branch()
    assert list(out) == ["KSTREAM-BRANCH-00000000011"]
    out["KSTREAM-BRANCH-00000000011"].to("pos", value_serde="long")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "long").pipe_many([("a", 1), ("b", -1)])
        assert d.output_topic("pos", "string", "long").read_key_values() == [("a", 1)]


def test_split_with_function_and_consumer() -> None:
    b = StreamBuilder()
    out = (
        b.stream("in", "string", "long")
        .split("s-")
        .branch(
            lambda k, v: v < 0, Branched.with_consumer(lambda s: s.to("neg", value_serde="long"))
        )
        .branch(lambda k, v: v == 0, Branched.with_function(lambda s: None, "gone"))
        .default_branch(Branched.with_function(lambda s: s.map_values(lambda v: v * 10), "pos"))
    )
    assert list(out) == ["s-pos"]  # consumed and None-returning branches are left out
    out["s-pos"].to("pos", value_serde="long")
    described = str(b.build().describe())
    assert "Processor: s-1 " in described and "Processor: s-gone " in described
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "long").pipe_many([("a", -1), ("b", 0), ("c", 2)])
        assert d.output_topic("neg", "string", "long").read_key_values() == [("a", -1)]
        assert d.output_topic("pos", "string", "long").read_key_values() == [("c", 20)]


def test_split_branches_keep_the_need_to_repartition() -> None:
    b = StreamBuilder()
    rekeyed = b.stream("in", "string", "long").select_key(lambda k, v: str(v))
    out = rekeyed.split().branch(lambda k, v: True, Branched.as_("x")).no_default_branch()
    assert next(iter(out.values()))._repartition_required
    kept = b.stream("in2", "string", "long").split().default_branch()
    assert not next(iter(kept.values()))._repartition_required


def test_split_refuses_branches_after_the_end() -> None:
    splitter = StreamBuilder().stream("in").split()
    splitter.no_default_branch()
    with pytest.raises(TopologyError, match="already"):
        splitter.branch(lambda k, v: True)


# --- KTable.to_stream(mapper) --------------------------------------------------------------


def test_table_to_stream_with_a_key_mapper_rekeys_and_repartitions_after() -> None:
    b = StreamBuilder()
    table = b.table("t", "string", "long", store="t")
    rekeyed = table.to_stream(lambda k, v: f"{k}:{v}")
    assert rekeyed._repartition_required
    rekeyed.to("out", key_serde="string", value_serde="long")
    described = str(b.build().describe())
    # Kafka's toStream(KeyValueMapper) is toStream().selectKey(mapper): the same two nodes
    assert "KTABLE-TOSTREAM-0000000002" in described
    assert "KSTREAM-KEY-SELECT-0000000003" in described
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "long").pipe_many([("a", 1), ("a", None)])
        assert d.output_topic("out", "string", "long").read_key_values() == [
            ("a:1", 1),
            ("a:None", None),
        ]


# --- key-aware mappers (ValueMapperWithKey) ------------------------------------------------


def test_stream_map_values_and_flat_map_values_with_key() -> None:
    b = StreamBuilder()
    s = b.stream("in", "string", "long")
    mapped = s.map_values(lambda k, v: f"{k}={v}", with_key=True)
    assert not mapped._repartition_required
    mapped.to("m", value_serde="string")
    s.flat_map_values(lambda k, v: [k] * v, with_key=True).to("f", value_serde="string")
    assert "KSTREAM-MAPVALUES-0000000001" in str(b.build().describe())
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "long").pipe_many([("a", 1), ("b", 2)])
        assert d.output_topic("m", "string", "string").read_key_values() == [
            ("a", "a=1"),
            ("b", "b=2"),
        ]
        assert d.output_topic("f", "string", "string").read_key_values() == [
            ("a", "a"),
            ("b", "b"),
            ("b", "b"),
        ]


def test_table_map_values_with_key_maps_new_and_old_and_lookups() -> None:
    b = StreamBuilder()
    table = b.table("t", "string", "long", store="t").map_values(
        lambda k, v: f"{k}:{v}", with_key=True
    )
    table.to_stream().to("out", value_serde="string")
    # a join reads the derived table through its getter: the mapper sees the key there too
    b.stream("s", "string", "string").join(table, lambda v, tv: f"{v}+{tv}").to(
        "joined", value_serde="string"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "long").pipe_many([("a", 1), ("a", None)])
        d.input_topic("t", "string", "long").pipe("b", 2)
        d.input_topic("s", "string", "string").pipe("b", "x")
        assert d.output_topic("out", "string", "string").read_key_values() == [
            ("a", "a:1"),
            ("a", None),
            ("b", "b:2"),
        ]
        assert d.output_topic("joined", "string", "string").read_key_values() == [("b", "x+b:2")]


# --- joiners that receive the key (ValueJoinerWithKey) -------------------------------------


def test_stream_joins_with_key_see_the_stream_records_key() -> None:
    b = StreamBuilder()
    s = b.stream("s", "string", "string")
    t = b.table("t", "string", "string", store="t")
    g = b.global_table("g", "string", "string", store="g")
    s.join(t, lambda k, v, tv: f"{k}:{v}|{tv}", with_key=True).to("st", value_serde="string")
    s.left_join(g, lambda k, v: v, lambda k, v, gv: f"{k}:{v}|{gv}", with_key=True).to(
        "sg", value_serde="string"
    )
    other = b.stream("o", "string", "string")
    s.outer_join(other, lambda k, a, o: f"{k}:{a}|{o}", window=JoinWindows.of(5), with_key=True).to(
        "ss", value_serde="string"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "string", "string").pipe("a", "T", 0)
        d.input_topic("g", "string", "string").pipe("x", "G", 0)
        d.input_topic("o", "string", "string").pipe("a", "O", 0)
        d.input_topic("s", "string", "string").pipe("a", "x", 1)
        d.input_topic("o", "string", "string").pipe("b", "late", 100)  # closes the windows
        read = {t: d.output_topic(t, "string", "string").read_key_values() for t in ("st", "sg")}
        ss = d.output_topic("ss", "string", "string").read_key_values()
    assert read == {"st": [("a", "a:x|T")], "sg": [("a", "a:x|G")]}
    assert ss[0] == ("a", "a:x|O")
    assert ("b", "b:None|late") not in ss  # still open


def test_outer_join_with_key_emits_unmatched_with_the_key() -> None:
    b = StreamBuilder()
    left = b.stream("l", "string", "string")
    left.outer_join(
        b.stream("r", "string", "string"),
        lambda k, a, o: f"{k}:{a}|{o}",
        window=JoinWindows.of(5),
        with_key=True,
    ).to("out", value_serde="string")
    with TopologyTestDriver(b) as d:
        d.input_topic("r", "string", "string").pipe("b", "R", 0)
        d.input_topic("l", "string", "string").pipe("c", "L", 50)  # closes b's window
        assert d.output_topic("out", "string", "string").read_key_values() == [("b", "b:None|R")]
