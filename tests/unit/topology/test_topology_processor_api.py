"""The low-level Processor API run through the test driver (same Task code as the runtime)."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.errors import (
    ConfigError,
    DeserializationError,
    ProcessingError,
    RecordError,
    TopologyError,
)
from kstream.records import Record
from kstream.testing.driver import TopologyTestDriver
from kstream.topology import Processor, ProcessorContext, Topology


class Upper(Processor):
    def process(self, record: Record) -> None:
        self.ctx.forward(record.with_value(record.value.upper()))


class Meta(Processor):
    """Forwards the record metadata it sees through the context."""

    def process(self, record: Record) -> None:
        c = self.ctx
        hdrs = [[k, (v or b"").decode()] for k, v in c.headers]
        meta = [c.topic, c.partition, c.offset, c.timestamp, hdrs, c.app_id, c.task_id]
        self.ctx.forward(Record(record.key, meta, record.timestamp))


def pipeline(*processors: tuple[str, Any]) -> Topology:
    t = Topology().add_source("src", "in", "string", "string")
    parent = "src"
    for name, factory in processors:
        t.add_processor(name, factory, parent)
        parent = name
    return t


def test_forward_through_user_processor() -> None:
    t = pipeline(("up", Upper)).add_sink("out", "out", "up", "string", "string")
    with TopologyTestDriver(t) as d:
        d.input_topic("in", "string", "string").pipe_many([("a", "x"), ("b", "y")])
        assert d.output_topic("out", "string", "string").read_key_values() == [
            ("a", "X"),
            ("b", "Y"),
        ]


def test_context_exposes_record_metadata() -> None:
    t = pipeline(("meta", Meta)).add_sink("out", "out", "meta", "string", "json")
    with TopologyTestDriver(t, app_id="app") as d:
        inp = d.input_topic("in", "string", "string")
        inp.pipe("k", "v", timestamp=42, headers=[("h", b"1")])
        inp.pipe("k", "v", timestamp=50)
        out = d.output_topic("out", "string", "json").read_values()
    assert out == [
        ["in", 0, 0, 42, [["h", "1"]], "app", "0_0"],
        ["in", 0, 1, 50, [], "app", "0_0"],
    ]


def test_forward_to_named_child() -> None:
    class Route(Processor):
        def process(self, record: Record) -> None:
            self.ctx.forward(record, to="even" if int(record.value) % 2 == 0 else "odd")

    t = (
        Topology()
        .add_source("src", "in", "string", "string")
        .add_processor("route", Route, "src")
        .add_sink("even", "evens", "route", "string", "string")
        .add_sink("odd", "odds", "route", "string", "string")
    )
    with TopologyTestDriver(t) as d:
        d.input_topic("in", "string", "string").pipe_many([("a", "1"), ("b", "2"), ("c", "3")])
        assert d.output_topic("evens", "string", "string").read_values() == ["2"]
        assert d.output_topic("odds", "string", "string").read_values() == ["1", "3"]


def test_forward_to_unknown_child_names_the_children() -> None:
    class Bad(Processor):
        def process(self, record: Record) -> None:
            self.ctx.forward(record, to="nope")

    t = pipeline(("bad", Bad)).add_sink("out", "out", "bad")
    with TopologyTestDriver(t) as d, pytest.raises(TopologyError, match="children are \\['out'\\]"):
        d.input_topic("in", "string", "string").pipe("a", "b")


def test_stream_time_punctuation_fires_on_grid() -> None:
    fired: list[int] = []

    class P(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            super().init(ctx)
            ctx.schedule(10, "stream_time", fired.append)

        def process(self, record: Record) -> None:
            pass

    with TopologyTestDriver(pipeline(("p", P))) as d:
        inp = d.input_topic("in", "string", "string")
        for ts in (5, 7, 10, 9, 35, 36, 40):
            inp.pipe("k", "v", timestamp=ts)
        d.advance_wall_clock(1_000_000)
    # first on the first record (due 0), then at 10, 20.., a jump fires once
    assert fired == [5, 10, 35, 40]


def test_stream_time_punctuation_between_records_of_one_batch() -> None:
    """A batch handed to a task is cut where stream time reaches a punctuation."""
    seen: list[tuple[str, int]] = []

    class P(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            super().init(ctx)
            ctx.schedule(10, "stream_time", lambda ts: seen.append(("punct", ts)))

        def process(self, record: Record) -> None:
            seen.append(("rec", record.timestamp))

    from kstream.topology.task import Task

    class Collector:
        def send(self, *a: Any) -> None:
            pass

        def partitions_for(self, topic: str) -> int:
            return 1

    compiled = pipeline(("p", P)).compile("app")
    task = Task(compiled, 0, 0, collector=Collector())
    recs = [Record(b"k", b"v", ts, (), "in", 0, i) for i, ts in enumerate([1, 4, 12, 13, 25])]
    task.process(recs)
    assert seen == [
        ("rec", 1),
        ("punct", 1),
        ("rec", 4),
        ("rec", 12),
        ("punct", 12),
        ("rec", 13),
        ("rec", 25),
        ("punct", 25),
    ]


def test_wall_clock_punctuation_and_cancel() -> None:
    fired: list[int] = []

    class P(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            super().init(ctx)
            self.handle = ctx.schedule("1s", "wall_clock", self.tick)

        def tick(self, now: int) -> None:
            fired.append(now)
            self.ctx.forward(Record("tick", str(now), now))
            if len(fired) == 2:
                self.handle.cancel()

        def process(self, record: Record) -> None:
            pass

    t = pipeline(("p", P)).add_sink("out", "out", "p", "string", "string")
    with TopologyTestDriver(t, initial_wall_clock=100) as d:
        d.advance_wall_clock(999)
        assert fired == []
        d.advance_wall_clock(1)
        assert fired == [1100]
        d.advance_wall_clock("2500ms")  # 3600: one fire for the missed ones
        d.advance_wall_clock(10_000)  # cancelled after the second
        assert fired == [1100, 3600]
        assert d.output_topic("out", "string", "string").read_key_values() == [
            ("tick", "1100"),
            ("tick", "3600"),
        ]


def test_schedule_rejects_bad_arguments() -> None:
    class P(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            ctx.schedule(10, "sometimes", print)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="'stream_time' or 'wall_clock'"):
        TopologyTestDriver(pipeline(("p", P)))


def test_deserialization_error_names_topic_partition_offset() -> None:
    t = Topology().add_source("src", "in", "string", "long")
    t.add_sink("out", "out", "src", "string", "long")
    with TopologyTestDriver(t) as d:
        d.pipe_raw("in", b"k", (7).to_bytes(8, "big"), 0)
        with pytest.raises(DeserializationError) as ei:
            d.pipe_raw("in", b"k", b"bad", 0)
    e = ei.value
    assert (e.topic, e.partition, e.offset) == ("in", 0, 1)
    assert "value" in str(e) and "topic='in' partition=0 offset=1" in str(e)


def test_processing_error_and_skipping_handler() -> None:
    class Boom(Processor):
        def process(self, record: Record) -> None:
            if record.value == "boom":
                raise ValueError("no")
            self.ctx.forward(record)

    t = pipeline(("boom", Boom)).add_sink("out", "out", "boom", "string", "string")
    with TopologyTestDriver(t) as d:
        inp = d.input_topic("in", "string", "string")
        inp.pipe("a", "ok")
        with pytest.raises(ProcessingError) as ei:
            inp.pipe("b", "boom")
        assert (ei.value.topic, ei.value.offset) == ("in", 1)
        assert "processor 'boom'" in str(ei.value) and "ValueError: no" in str(ei.value)

    skipped: list[tuple[type, int | None]] = []

    def skip(err: RecordError, record: Record) -> None:
        skipped.append((type(err), err.offset))

    with TopologyTestDriver(t, error_handler=skip) as d:
        d.input_topic("in", "string", "string").pipe_many([("a", "1"), ("b", "boom"), ("c", "3")])
        d.pipe_raw("in", b"d", b"\xff", 0)  # invalid UTF-8
        assert d.output_topic("out", "string", "string").read_values() == ["1", "3"]
    assert skipped == [(ProcessingError, 1), (DeserializationError, 3)]


def test_topology_validation_errors() -> None:
    t = Topology().add_source("a", "in")
    with pytest.raises(TopologyError, match="already in the topology"):
        t.add_source("a", "other")
    with pytest.raises(TopologyError, match="already read by source 'a'"):
        t.add_source("b", "in")
    with pytest.raises(TopologyError, match="parent 'zz' is not in the topology"):
        t.add_processor("p", Upper, "zz")
    t.add_sink("s", "out", "a")
    with pytest.raises(TopologyError, match="parent 's' is a sink"):
        t.add_processor("p", Upper, "s")
    with pytest.raises(TopologyError, match="not in the topology"):
        t.add_processor("p", Upper, "a", stores=["missing"])


def test_unconnected_store_access_is_an_error() -> None:
    class Reader(Processor):
        def init(self, ctx: ProcessorContext) -> None:
            ctx.get_store("elsewhere")

    t = pipeline(("r", Reader))
    with pytest.raises(TopologyError, match="not connected to store 'elsewhere'"):
        TopologyTestDriver(t)


def test_piping_into_an_unknown_topic() -> None:
    with (
        TopologyTestDriver(pipeline(("up", Upper))) as d,
        pytest.raises(TopologyError, match="not read by the topology"),
    ):
        d.input_topic("nope")


def test_output_topic_reading() -> None:
    t = (
        Topology()
        .add_source("src", "in", "string", "string")
        .add_sink("o", "out", "src", "string", "string")
    )
    with TopologyTestDriver(t, initial_wall_clock=1000) as d:
        inp = d.input_topic("in", "string", "string")
        inp.pipe("a", "1")
        inp.pipe("a", None)
        inp.pipe("b", "2", timestamp=7)
        out = d.output_topic("out", "string", "string")
        assert out.queue_size() == 3
        first = out.read_record()
        assert (first.key, first.value, first.timestamp, first.offset) == ("a", "1", 1000, 0)
        assert out.read_key_values_to_map() == {"b": "2"}
        assert out.is_empty()
        with pytest.raises(LookupError, match="'out' is empty"):
            out.read_value()


def test_auto_advancing_input_topic() -> None:
    t = (
        Topology()
        .add_source("src", "in", "string", "string")
        .add_sink("o", "out", "src", "string", "string")
    )
    with TopologyTestDriver(t) as d:
        inp = d.input_topic("in", "string", "string", start_timestamp=100, auto_advance="1s")
        inp.pipe_many([("a", "1"), ("b", "2"), ("c", "3", 5)])
        recs = d.output_topic("out", "string", "string").read_records()
        assert [r.timestamp for r in recs] == [100, 1100, 5]


def test_context_serdes_see_topic_and_headers() -> None:
    from kstream.serde import ContextSerde, SerdeContext

    class Tagged(ContextSerde):
        """Values carry their topic: proves the context reaches both ends."""

        def serialize(self, value: Any, ctx: SerdeContext | None = None) -> bytes | None:
            assert ctx is not None
            return None if value is None else f"{ctx.topic}|{value}".encode()

        def deserialize(self, data: bytes | None, ctx: SerdeContext | None = None) -> Any:
            assert ctx is not None
            if data is None:
                return None
            topic, _, value = data.decode().partition("|")
            assert topic == ctx.topic and not ctx.is_key
            return f"{value}@{dict(ctx.headers).get('h', b'').decode()}"

    tagged = Tagged("tagged")
    t = Topology().add_source("src", "in", "string", tagged)
    t.add_sink("out", "out", "src", "string", tagged)
    with TopologyTestDriver(t) as d:
        d.input_topic("in", "string", tagged).pipe("k", "v", headers=[("h", b"x")])
        rec = d.output_topic("out", "string", "string").read_record()
        assert (rec.key, rec.value, list(rec.headers)) == ("k", "out|v@x", [("h", b"x")])


def test_collector_can_ask_the_task_for_provenance() -> None:
    from kstream.topology.task import Task

    sent: list[tuple[bytes | None, tuple[str, int, int] | None]] = []

    class Collector:
        task: Task

        def send(self, topic: str, key: bytes | None, *rest: Any) -> None:
            sent.append((key, self.task.source()))

        def partitions_for(self, topic: str) -> int:
            return 1

    t = pipeline(("up", Upper)).add_sink("out", "out", "up", "string", "string")
    col = Collector()
    col.task = Task(t.compile("app"), 0, 0, collector=col)
    col.task.process([Record(b"a", b"x", 0, (), "in", 3, 7), Record(b"b", b"y", 1, (), "in", 3, 8)])
    assert sent == [(b"a", ("in", 3, 7)), (b"b", ("in", 3, 8))]


def test_null_keys_and_values_pass_through_sources_and_sinks_of_every_builtin_serde() -> None:
    """Sources and sinks call a serde's C function first (str.encode, bytes.decode,
    orjson.loads) and its full function when that raises: None still passes through as
    None, and raw bytes come out as they went in (compact JSON round-trips byte for byte)."""
    for key_serde, value_serde in [("string", "json"), ("bytes", "string"), ("json", "bytes")]:
        t = Topology().add_source("src", "in", key_serde, value_serde)
        t.add_sink("out", "out", "src", key_serde, value_serde)
        with TopologyTestDriver(t) as d:
            d.pipe_raw("in", None, None, 1)
            d.pipe_raw("in", b'"k"', b'{"v":1}', 2)
            d.pipe_raw("in", None, b'"v"', 3)
            d.pipe_raw("in", b'"k"', None, 4)
            got = [(r.key, r.value, r.timestamp) for r in d.output_topic("out").read_records()]
        assert got == [
            (None, None, 1),
            (b'"k"', b'{"v":1}', 2),
            (None, b'"v"', 3),
            (b'"k"', None, 4),
        ], (key_serde, value_serde)


def test_a_sink_names_a_value_its_serde_cannot_write() -> None:
    class AnInt(Processor):
        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_key(7))

    t = pipeline(("int", AnInt)).add_sink("out", "out", "int", "string", "string")
    with TopologyTestDriver(t) as d, pytest.raises(RecordError) as ei:
        d.input_topic("in", "string", "string").pipe("a", "x")
    assert "sink 'out'" in str(ei.value) and "string serde expects str, got int" in str(ei.value)
