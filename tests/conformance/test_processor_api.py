"""The Processor API as Kafka documents it: a processor is whatever has its methods.

docs/streams/developer-guide/processor-api.html, "Defining a Stream Processor": a processor
implements `process()` and optionally `init()` and `close()`. In Python that is a protocol,
not a base class: plain classes with those methods must run everywhere a processor is taken
(`Topology.add_processor`, `KStream.process`, global store processors), and one without
`process` is refused with an error naming the node.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.errors import TopologyError
from kstream.records import Record
from kstream.testing.driver import TopologyTestDriver
from kstream.topology import Topology


class WordCounter:
    """The documentation's WordCountProcessor, without subclassing anything."""

    def __init__(self) -> None:
        self.closed = False

    def init(self, ctx: Any) -> None:
        self.ctx = ctx
        self.store = ctx.get_store("Counts")

    def process(self, record: Record) -> None:
        for word in record.value.lower().split():
            count = (self.store.get(word) or 0) + 1
            self.store.put(word, count)
            self.ctx.forward(Record(word, count, record.timestamp))

    def close(self) -> None:
        self.closed = True


class Collect:
    """Only `process`: no init, no close (a terminal processor, like `foreach`)."""

    seen: list[tuple[Any, Any, int]] = []

    def process(self, record: Record) -> None:
        self.seen.append((record.key, record.value, record.timestamp))


def pipe_and_read(topology: Any, records: list[tuple[Any, Any, int]]) -> list[tuple[Any, Any, int]]:
    with TopologyTestDriver(topology) as d:
        src = d.input_topic("in", key_serde="string", value_serde="string")
        for k, v, ts in records:
            src.pipe(k, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="long").read_records()
        return [(r.key, r.value, r.timestamp) for r in out]


def test_duck_typed_processor_in_topology() -> None:
    """processor-api.html, "Defining a Stream Processor" and "Connecting Processors and State
    Stores": the word-count processor added with `Topology.add_processor`."""
    created: list[WordCounter] = []

    def factory() -> WordCounter:
        created.append(WordCounter())
        return created[-1]

    t = (
        Topology()
        .add_source("Source", "in", "string", "string")
        .add_processor("Process", factory, "Source")
        .add_state_store(
            stores.key_value("Counts", key_serde="string", value_serde="long"), "Process"
        )
        .add_sink("Sink", "out", "Process", "string", "long")
    )
    out = pipe_and_read(t, [("k", "a b a", 5), ("k", "B", 3)])
    assert out == [("a", 1, 5), ("b", 1, 5), ("a", 2, 5), ("b", 2, 3)]
    assert [p.closed for p in created] == [True]


def test_duck_typed_processor_in_kstream_process() -> None:
    """dsl-api.html, "Applying processors (Processor API integration)":
    `KStream.process` with a store; the class is the factory."""
    b = StreamBuilder()
    b.stream("in", key_serde="string", value_serde="string").process(
        WordCounter, stores=[stores.key_value("Counts", key_serde="string", value_serde="long")]
    ).to("out", key_serde="string", value_serde="long")
    assert pipe_and_read(b, [(None, "x y", 9), (None, "y", 4)]) == [
        ("x", 1, 9),
        ("y", 1, 9),
        ("y", 2, 4),
    ]


def test_processor_with_only_process() -> None:
    """processor-api.html, "Defining a Stream Processor": init and close are optional."""
    Collect.seen = []
    t = (
        Topology()
        .add_source("src", "in", "string", "string")
        .add_processor("collect", Collect, "src")
    )
    with TopologyTestDriver(t) as d:
        src = d.input_topic("in", key_serde="string", value_serde="string")
        src.pipe("k", "abc", 12)
        src.pipe(None, "d", 2)
    assert Collect.seen == [("k", "abc", 12), (None, "d", 2)]


class GlobalLoader:
    """A global store processor (`StreamsBuilder#addGlobalStore`): no base class."""

    def init(self, ctx: Any) -> None:
        self.store = ctx.get_store("customers")

    def process(self, record: Record) -> None:
        self.store.put(record.key, record.value.upper())


def test_duck_typed_global_store_processor() -> None:
    """processor-api.html / `StreamsBuilder#addGlobalStore`: the processor fills the store."""
    t = (
        Topology()
        .add_source("src", "in", "string", "string")
        .add_processor("collect", Collect, "src")
        .add_global_store(
            stores.key_value(
                "customers", key_serde="string", value_serde="string", changelog=False
            ),
            "customers-topic",
            "string",
            "string",
            GlobalLoader,
        )
    )
    with TopologyTestDriver(t) as d:
        src = d.input_topic("customers-topic", key_serde="string", value_serde="string")
        src.pipe("c1", "alice", 1)
        src.pipe("c2", "bob", 2)
        store = d.get_store("customers")
        assert [(k, v) for k, v in store.all()] == [("c1", "ALICE"), ("c2", "BOB")]


class NoProcess:
    def init(self, ctx: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        pytest.param(NoProcess, "processor 'bad': NoProcess has no process", id="class"),
        pytest.param(
            lambda: NoProcess(), "processor 'bad': its factory returned", id="factory-function"
        ),
    ],
)
def test_processor_without_process_is_refused_by_name(factory: Any, message: str) -> None:
    """TopologyTest.shouldNotAllowNullProcessorSupplierWhenAddingProcessor (a factory must give
    a usable processor):
    the error names the node."""
    with pytest.raises(TopologyError, match=message):
        t = Topology().add_source("src", "in").add_processor("bad", factory, "src")
        TopologyTestDriver(t).close()
