"""Python's cyclic collector is paused while a Spark task runs a batch, as on the native
runtime (config `gc_pause`), in a stateful task and in a stateless sub-topology's read tasks;
`gc_pause=False` leaves it running. The records say what the collector was doing when they
were processed (a user processor and a `map_values` look)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, produce
from support.committed_reader import read_committed

from kstream.dsl import StreamBuilder
from kstream.records import Record
from kstream.topology.processor import Processor
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")


class CollectorState(Processor):
    """Forwards whether the cyclic collector runs (a processor Spark runs in a stateful task)."""

    def process(self, record: Record) -> None:
        self.ctx.forward(record.with_value("on" if gc.isenabled() else "off"))


def topology(inp: str, in_task: str, in_read: str) -> Topology:
    b = StreamBuilder()
    src = b.stream(inp, key_serde="string", value_serde="string")
    src.process(CollectorState).to(in_task, key_serde="string", value_serde="string")
    b.stream(in_read + "-in", key_serde="string", value_serde="string").map_values(
        lambda _v: "on" if gc.isenabled() else "off"
    ).to(in_read, key_serde="string", value_serde="string")
    return b.build()


@pytest.mark.parametrize("pause", [True, False])
def test_collector_paused_in_tasks_and_read_tasks(
    pause: bool,
    spark: Any,
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    from kstream.spark import run
    from kstream.spark.tasks import build_task_plan

    bs = bootstrap_servers
    inp, in_task, in_read = unique_name("in"), unique_name("task"), unique_name("read")
    create_topics(bs, {inp: 1, in_task: 1, in_read + "-in": 1, in_read: 1})
    for topic in (inp, in_read + "-in"):
        produce(bs, topic, [(f"k{i}", "x", 1_000 + i) for i in range(5)], "string", "string")
    app = unique_name("gc")
    plan = build_task_plan(topology(inp, in_task, in_read), app)
    assert len(plan.stateful) == 1 and len(plan.order) == 2  # one of each kind
    run(
        topology(inp, in_task, in_read),
        app,
        bs,
        str(tmp_path / "checkpoint"),
        spark=spark,
        config={"state_dir": str(tmp_path / "state"), "gc_pause": pause},
    )
    want = [b"off" if pause else b"on"] * 5
    assert [r.value for r in read_committed(bs, in_task)] == want
    assert [r.value for r in read_committed(bs, in_read)] == want
