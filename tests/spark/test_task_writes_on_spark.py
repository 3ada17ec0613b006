"""A stateful query whose outputs nothing in the app reads writes them from its tasks.

No write-slot stage: each task writes its rows of a batch in a transaction of its own
transactional id, marked with the task's count of batches (`kstream.spark.sink.TaskWriter`).
Checked here on real Spark and Apache Kafka, everything read back with a plain read_committed
consumer (`support.committed_reader`): the outputs are the test driver's, once each; the task
markers are committed and the slot markers are not; a batch Spark replays (its commit log entry
gone) is not written twice; a checkpoint whose batches went through write slots keeps them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, produce_raw
from windowed_counts import expected, json_records, run_on_spark, spark_outputs, windowed_count

pytest.importorskip("pyspark")

Names = Callable[[str], str]
BATCH = 40


def records(n: int, start: int = 0) -> list[tuple[bytes, bytes, int, list[Any]]]:
    """Seven keys: the count's key is the input's, so a key's records are all in one
    partition, in produce order, as the test driver takes them."""
    return json_records(n, keys=7, start=start)


def outputs(bootstrap: str, out: str) -> Any:
    return spark_outputs(bootstrap, out)


def run(spark: Any, app: str, bs: str, tmp: Path, inp: str, out: str) -> None:
    run_on_spark(spark, windowed_count(inp, out), app, bs, tmp, BATCH)


def markers(bs: str, app: str, group_of: Callable[[str], str]) -> dict[int, int]:
    """The committed marker offsets of the count's query for the group `group_of(query)`,
    per marker partition (absent: none committed)."""
    from confluent_kafka import Consumer, TopicPartition

    from kstream.spark.plan import build_task_plan
    from kstream.spark.slot_writer import marker_topic

    (sid,) = build_task_plan(windowed_count("i", "o"), app).order
    query = f"{app}-subtopology-{sid}"
    c = Consumer({"bootstrap.servers": bs, "group.id": group_of(query)})
    try:
        topic = marker_topic(query)
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        got = c.committed([TopicPartition(topic, p) for p in parts], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def test_tasks_write_their_outputs_once_and_a_replayed_batch_is_skipped(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    from kstream.spark.slot_writer import sink_group, task_sink_group

    bs = bootstrap_servers
    inp, out = unique_name("in"), unique_name("out")
    create_topics(bs, {inp: 2, out: 2})
    rows = records(400)
    produce_raw(bs, inp, rows)
    app = unique_name("tasks")
    run(spark, app, bs, tmp_path, inp, out)
    want = expected(inp, out, rows)
    assert sum(want.values()) == 400
    assert outputs(bs, out) == want
    # each task marked its batches (400 records, 40 a batch over both partitions: several)
    task_marks = markers(bs, app, task_sink_group)
    assert set(task_marks) == {0, 1} and min(task_marks.values()) >= 3
    assert markers(bs, app, sink_group) == {}

    # Spark replays the last batch when its commit log entry is missing: the same records
    # over the state before it, so the same batch counts, and the tasks skip their writes;
    # the batches after it (new input) have the next counts, and are written
    (commits,) = (tmp_path / app / "checkpoint").glob("*/commits")
    last = max(commits.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    more = records(520, start=400)
    produce_raw(bs, inp, more)
    run(spark, app, bs, tmp_path, inp, out)
    assert (commits / last.name).exists()  # the batch ran again
    assert outputs(bs, out) == expected(inp, out, rows + more)
    after = markers(bs, app, task_sink_group)
    assert all(after[p] > task_marks[p] for p in (0, 1))


def test_a_checkpoint_written_through_write_slots_keeps_them(
    spark: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint whose batches the write slots wrote (as a kstream before task writes did:
    `tasks_write` finding nothing) goes on through them, since their markers are what says
    which of its batches reached Kafka; a new app writes from its tasks."""
    from kstream.spark import plan as spark_plan
    from kstream.spark.slot_writer import sink_group, task_sink_group

    bs = bootstrap_servers
    inp, out = unique_name("in"), unique_name("out")
    create_topics(bs, {inp: 2, out: 2})
    rows = records(300)
    produce_raw(bs, inp, rows[:150])
    app = unique_name("slots")
    with monkeypatch.context() as m:
        m.setattr(spark_plan, "tasks_write", lambda plan, sid: False)
        run(spark, app, bs, tmp_path, inp, out)
    slot_marks = markers(bs, app, sink_group)
    assert slot_marks
    produce_raw(bs, inp, rows[150:])
    run(spark, app, bs, tmp_path, inp, out)
    assert outputs(bs, out) == expected(inp, out, rows)
    assert markers(bs, app, task_sink_group) == {}
    assert max(markers(bs, app, sink_group).values()) > max(slot_marks.values())


def test_a_new_checkpoint_writes_its_batches_again(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    """An app run again from a new checkpoint (the old one deleted) reads its input from the
    start and writes every output again: its batch ids and its tasks' counts start at 0, and
    the markers the earlier checkpoint left are deleted before its first batch (`forget_markers`;
    before, they had every batch up to where the earlier run came skipped as written, and the
    second run wrote nothing). A plain read_committed reader counts each output twice."""
    import shutil

    bs = bootstrap_servers
    inp, out = unique_name("in"), unique_name("out")
    create_topics(bs, {inp: 2, out: 2})
    rows = records(200)
    produce_raw(bs, inp, rows)
    app = unique_name("anew")
    run(spark, app, bs, tmp_path, inp, out)
    once = expected(inp, out, rows)
    assert outputs(bs, out) == once
    shutil.rmtree(tmp_path / app)
    run(spark, app, bs, tmp_path, inp, out)
    assert outputs(bs, out) == once + once
