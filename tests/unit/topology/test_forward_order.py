"""Records reach a processor's children in the order the processor forwarded them."""

from __future__ import annotations

from typing import Any

from kstream.records import Record
from kstream.testing import TopologyTestDriver
from kstream.topology import Topology


class ForwardThenBatch:
    """Forwards one record, then a batch of one, for every input record."""

    def init(self, ctx: Any) -> None:
        self.ctx = ctx

    def process(self, record: Record) -> None:
        self.ctx.forward(Record(record.key, f"{record.value}-1", record.timestamp))
        self.ctx.forward_batch([Record(record.key, f"{record.value}-2", record.timestamp)])


def test_forward_then_forward_batch_keep_their_order() -> None:
    topo = Topology()
    topo.add_source("src", ["in"], key_serde="string", value_serde="string")
    topo.add_processor("p", ForwardThenBatch, ["src"])
    topo.add_sink("out", "out", ["p"], key_serde="string", value_serde="string")
    with TopologyTestDriver(topo) as driver:
        driver.input_topic("in", "string", "string").pipe("k", "a", timestamp=1)
        got = driver.output_topic("out", "string", "string").read_values()
    assert got == ["a-1", "a-2"]
