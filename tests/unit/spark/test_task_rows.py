"""A task's output rows come ready for the sink's slots: each row's `seq` is its rank among the
outputs of its input record (what the sink's window over the whole batch gave), and `part` is
the partition the row goes to wherever it is known. No Spark runs here: one task runs in this
process, as a Spark worker runs it."""

from __future__ import annotations

from typing import Any

from kstream.dsl import StreamBuilder
from kstream.kafka.partitioner import default_partition
from kstream.records import Record
from kstream.serde import serde
from kstream.spark.sink import ranks
from kstream.spark.tasks import TaskRun, build_task_plan


def fan_out() -> Any:
    """Each record: n copies to `many` (keyed by copy), and one keyless record to `one`."""
    b = StreamBuilder()
    s = b.stream("in", key_serde="string", value_serde="long")
    s.flat_map(lambda k, v: [(f"{k}-{i}", i) for i in range(v)]).to(
        "many", key_serde="string", value_serde="long"
    )
    s.map(lambda _k, v: (None, v)).to("one", key_serde="string", value_serde="long")
    return b.build()


def test_ranks_and_partitions_are_the_sinks_own() -> None:
    plan = build_task_plan(fan_out(), "app")
    plan.partitions = {"in": 2, "many": 3, "one": 2}
    ks, vs = serde("string"), serde("long")
    records = [
        Record(ks.to_bytes(f"k{i}"), vs.to_bytes(i % 4), 100 + i, (), "in", 1, 10 + i)
        for i in range(12)
    ]
    (sid,) = plan.order
    task = TaskRun(plan, sid, 1, {})
    try:
        cols = task.run(records)
    finally:
        task.close()

    assert cols["seq"] == ranks(cols)  # what the window over the batch gives
    # every output, once: i % 4 copies to `many` and one to `one` per input record
    assert cols["topic"].count("many") == sum(i % 4 for i in range(12))
    assert cols["topic"].count("one") == 12
    # provenance ids grow in the order the task writes them (one source partition): the batch
    # goes through `many`'s branch before `one`'s, so `one`'s rows take the ids after the
    # highest written (a reader drops an id at or below one it has seen as a repeat)
    ids = list(zip(cols["poff"], cols["seq"], strict=True))
    assert ids == sorted(set(ids)), ids
    for topic, k, part in zip(cols["topic"], cols["k"], cols["part"], strict=True):
        if topic == "many":
            assert part == default_partition(k, 3)
        else:
            # no key: the task's own partition (one write slot per partition and batch)
            assert (k, part) == (None, 1)
