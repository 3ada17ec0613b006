"""`App(..., config={"processes": 2})` on the embedded broker: two worker processes share the
partitions and every output is there exactly once."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from support.groups import fast_group

from kstream import App, AppState
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker

MODULE = """
from kstream.dsl import StreamBuilder

topology = StreamBuilder()
_s = topology.stream({inp!r}, key_serde="string", value_serde="string")
_s.to({copy!r})
_s.group_by_key().count(store="counts").to_stream().to({cnt!r}, value_serde="long")
"""
RECORDS = 2_000
KEYS = 40


@pytest.fixture
def pipeline_module(tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[object]:
    """A module defining the topology at its top level, importable by the workers."""
    topics = unique_name("in"), unique_name("copy"), unique_name("counts")
    name = unique_name("pipeline").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(
        MODULE.format(inp=topics[0], copy=topics[1], cnt=topics[2])
    )
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
        module.topics = topics  # type: ignore[attr-defined]
        yield module
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


class Outputs:
    """Committed records of the copy topic, and the last count per key (assigned, no group)."""

    def __init__(self, bs: str, copy: str, cnt: str) -> None:
        self.copy = copy
        self.copies = 0
        self.counts: dict[str, int] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": "unused",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for t in (copy, cnt) for p in range(4)]
        )

    def poll(self) -> None:
        for m in self.consumer.consume(1000, 0.5):
            if m.error() is not None:
                continue
            if m.topic() == self.copy:
                self.copies += 1
            else:
                key, value = m.key(), m.value()
                assert key is not None and value is not None
                self.counts[key.decode()] = int.from_bytes(value, "big", signed=True)

    def complete(self) -> bool:
        return self.copies >= RECORDS and sum(self.counts.values()) >= RECORDS


def test_two_worker_processes_give_every_output_once(
    kafka_broker: EmbeddedBroker, pipeline_module: object, tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, copy, cnt = pipeline_module.topics  # type: ignore[attr-defined]
    admin = Admin(bs)
    for t in (inp, copy, cnt):
        admin.create_topic(t, 4)
    p = Producer({"bootstrap.servers": bs})
    for i in range(RECORDS):
        p.produce(inp, b"x", f"k{i % KEYS}".encode())
    assert p.flush(30) == 0
    app = App(
        pipeline_module.topology,  # type: ignore[attr-defined]
        "procs",
        bs,
        config=fast_group(
            {"processes": 2, "state_dir": str(tmp_path / "state"), "commit_interval": 50}
        ),
    )
    out = Outputs(bs, copy, cnt)
    app.start()
    try:
        deadline = time.monotonic() + 120
        while not out.complete() and time.monotonic() < deadline:
            out.poll()
            assert app.state != AppState.ERROR, app.error
        assert app.close(timeout=90)
        out.poll()  # anything committed at the close
    finally:
        app.close(timeout=90)
        out.consumer.close()
    assert app.error is None
    assert app.state == AppState.NOT_RUNNING
    assert out.copies == RECORDS
    assert out.counts == {f"k{i}": RECORDS // KEYS for i in range(KEYS)}
    # both workers ran: each kept its state in a directory of its own
    workers = tmp_path / "state" / "procs" / "processes"
    assert sorted(d.name for d in workers.iterdir()) == ["0", "1"]
