"""A record's timestamp type on Spark, as on the native engine: a LogAppendTime topic's records
say LOG_APPEND_TIME (`Record.timestamp_type`), a CreateTime topic's CREATE_TIME, to a
timestamp extractor in a sub-topology run inside the read tasks (stateless) and to a processor
in tasks fed through Spark (a merge of two topics). The native engine's twin:
tests/integration/test_timestamp_types.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics
from support.committed_reader import read_committed

from kstream.dsl import StreamBuilder
from kstream.kafka import Admin, Producer
from kstream.records import Record
from kstream.topology import Processor

pytest.importorskip("pyspark")


def tag_type() -> type[Processor]:
    """A processor forwarding each record with its timestamp type's name and source topic as
    the value (made in a function, so Spark's workers get it by value)."""

    class TagType(Processor):
        def process(self, record: Record) -> None:
            self.ctx.forward(record.with_value(f"{record.topic}:{record.timestamp_type.name}"))

    return TagType


def log_append_only(record: Record, partition_time: int) -> int:
    """A timestamp extractor keeping a record only if its timestamp is the broker's."""
    return record.timestamp if record.timestamp_type.name == "LOG_APPEND_TIME" else -1


def test_log_append_time_reaches_the_record_in_read_tasks_and_in_tasks(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    appended, appended2, created = (unique_name(n) for n in ("appended", "appended2", "created"))
    out_read, out_task = unique_name("read-out"), unique_name("task-out")
    with Admin(bs) as admin:
        for topic in (appended, appended2):
            admin.create_topic(topic, 1, {"message.timestamp.type": "LogAppendTime"})
    create_topics(bs, {created: 1, out_read: 1, out_task: 1})
    with Producer(bs) as p:
        for i in range(3):
            p.produce(appended, b"v%d" % i, b"k", None, 1_000 + i)
            p.produce(appended2, b"v%d" % i, b"k", None, 1_000 + i)
            p.produce(created, b"v%d" % i, b"k", None, 1_000 + i)
        p.flush()

    b = StreamBuilder()
    b.stream(appended, "string", "string", timestamp_extractor=log_append_only).to(
        out_read, "string", "string"
    )
    b.stream([appended2, created], "string", "string").process_values(tag_type()).to(
        out_task, "string", "string"
    )
    topology = b.build()
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(topology, "plan")
    assert len(plan.stateful) == 1 and len(plan.order) == 2  # one of each kind

    run(topology, unique_name("spark"), bs, str(tmp_path / "checkpoint"), spark=spark)
    read = [r.value for r in read_committed(bs, out_read)]
    assert read == [b"v0", b"v1", b"v2"]  # none dropped: each said LOG_APPEND_TIME
    task = sorted(r.value or b"" for r in read_committed(bs, out_task))
    assert task == sorted(
        [f"{appended2}:LOG_APPEND_TIME".encode()] * 3 + [f"{created}:CREATE_TIME".encode()] * 3
    )
