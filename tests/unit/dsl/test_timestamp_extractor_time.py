"""A source's timestamp extractor runs where Kafka Streams runs it: in the task, as a record
enters its partition's queue (Kafka's `RecordQueue`), before the record counts for stream time
and before the task chooses which partition's head to process next.

Each expected value below is worked out from Kafka's rules, written next to it: stream-time
punctuations (`PunctuationSchedule.next`: the first fires at the first record, then on the grid
of the interval), window close (`AbstractKStreamTimeWindowAggregateProcessor`: a record whose
window ended at or before stream time minus grace is dropped), and the partition choice
(`PartitionGroup`: the queue whose head has the smallest timestamp goes first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.mock_runtime import running

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.errors import ProcessingError, RecordError
from kstream.records import Record
from kstream.serde import serde
from kstream.testing import MockCluster, MockProducer
from kstream.testing.driver import TopologyTestDriver
from kstream.topology import Processor
from kstream.topology.processor import ProcessorContext

LONG = serde("long")


def _value_time(r: Record, partition_time: int) -> int:
    return int(r.value)


class _StreamTimeTicks(Processor):
    """Records the stream time of each stream-time punctuation (every 10 ms)."""

    ticks: list[int]

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        ctx.schedule(10, "stream_time", self.ticks.append)

    def process(self, record: Record) -> None:
        pass


def test_stream_time_punctuations_follow_the_extracted_time() -> None:
    ticks: list[int] = []

    def ticking() -> _StreamTimeTicks:
        p = _StreamTimeTicks()
        p.ticks = ticks
        return p

    b = StreamBuilder()
    b.stream("in", "str", "long", timestamp_extractor=_value_time).process(ticking)
    with TopologyTestDriver(b) as d:
        # Kafka timestamps all 1000: without the extractor one punctuation, at 1000
        d.input_topic("in", "str", "long").pipe_many([("k", 5, 1000), ("k", 12, 1000)])
        d.input_topic("in", "str", "long").pipe_many([("k", 14, 1000), ("k", 25, 1000)])
        assert d.tasks[0].stream_time == 25
    # Kafka: the first at stream time 5 (due at 0); next due 10 -> fires at 12; next due 20:
    # 14 does not fire, 25 does
    assert ticks == [5, 12, 25]


def test_window_close_follows_the_extracted_time() -> None:
    b = StreamBuilder()
    counts = (
        b.stream("in", "str", "long", timestamp_extractor=_value_time)
        .group_by_key()
        .windowed_by(TimeWindows.of(10))  # no grace
        .count()
    )
    counts.to_stream(lambda wk, v: f"{wk.key}@{wk.start}").to("out", "str", "long")
    with TopologyTestDriver(b) as d:
        # the Kafka timestamps (100) would put all three in one window [100, 110)
        d.input_topic("in", "str", "long").pipe_many([("a", 3, 100), ("a", 25, 100), ("a", 5, 100)])
        out = d.output_topic("out", "str", "long").read_records()
        dropped = d.dropped_records()
    # 3 opens [0, 10); 25 moves stream time to 25, so [0, 10) is closed (10 <= 25 - 0) and 5
    # is dropped as late
    assert [(r.key, r.value, r.timestamp) for r in out] == [("a@0", 1, 3), ("a@20", 1, 25)]
    assert dropped == {"late_record": 1}


def test_partitions_are_merged_by_extracted_timestamps(tmp_path: Path) -> None:
    """One task reads two topics; the order it takes their records in decides which are late.

    Topic `early` carries Kafka timestamps 1, 2 and extracted times 30, 31; topic `late`
    Kafka timestamps 5, 6 and extracted times 3, 4. Kafka compares the heads' extracted times:
    3, 4 (from `late`), then 30, 31, so no record is late and both windows count 2. (By Kafka
    timestamps 30 and 31 would go first, closing [0, 10) before 3 and 4 arrive.)
    """
    cluster = MockCluster()
    for t in ("early", "late", "out"):
        cluster.create_topic(t, 1)
    p = MockProducer(cluster)
    for topic, kafka_ts, value in [
        ("early", 1, 30),
        ("early", 2, 31),
        ("late", 5, 3),
        ("late", 6, 4),
    ]:
        p.produce(topic, LONG.serialize(value), b"a", 0, kafka_ts)
    p.flush()
    b = StreamBuilder()
    (
        b.stream(["early", "late"], "str", "long", timestamp_extractor=_value_time)
        .group_by_key()
        .windowed_by(TimeWindows.of(10))
        .count()
        .to_stream(lambda wk, v: f"{wk.key}@{wk.start}")
        .to("out", "str", "long")
    )
    with running(cluster, tmp_path, "at_least_once", topology=b) as r:
        r.turn(3)
    got = [
        (m.key(), LONG.deserialize(m.value(), None), m.timestamp()[1])
        for m in cluster.messages("out")
    ]
    assert got == [(b"a@0", 1, 3), (b"a@0", 2, 4), (b"a@30", 1, 30), (b"a@30", 2, 31)]


def test_a_failing_extractor_is_a_processing_error_for_the_error_policy() -> None:
    def extract(r: Record, partition_time: int) -> int:
        if r.value < 0:
            raise ValueError("no time in this record")
        return int(r.value)

    b = StreamBuilder()
    b.stream("in", "str", "long", timestamp_extractor=extract).to("out", "str", "long")
    with (
        TopologyTestDriver(b) as d,
        pytest.raises(ProcessingError, match=r"timestamp extractor of source .* no time"),
    ):
        d.input_topic("in", "str", "long").pipe("k", -1)

    skipped: list[tuple[RecordError, Any]] = []
    with TopologyTestDriver(b, error_handler=lambda e, rec: skipped.append((e, rec))) as d:
        d.input_topic("in", "str", "long").pipe_many([("a", 7, 1), ("b", -1, 2), ("c", 9, 3)])
        out = d.output_topic("out", "str", "long").read_records()
    assert [(r.key, r.timestamp) for r in out] == [("a", 7), ("c", 9)]
    assert [(type(e), rec.offset) for e, rec in skipped] == [(ProcessingError, 1)]


def test_a_rollback_takes_partition_time_back_to_the_commit() -> None:
    """A retried batch must see the partition times its first run saw (Kafka restores them
    from the committed offsets' metadata when the task is revived)."""
    seen: list[int] = []

    def extract(r: Record, partition_time: int) -> int:
        seen.append(partition_time)
        return int(r.value)

    b = StreamBuilder()
    b.stream("in", "str", "long", timestamp_extractor=extract).to("out", "str", "long")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "str", "long").pipe("k", 10)  # the driver commits after each
        task = d.tasks[0]
        raw = Record(b"k", LONG.serialize(50), 0, (), "in", 0, 1)
        task.process([raw])
        task.discard()
        again = Record(b"k", LONG.serialize(50), 0, (), "in", 0, 1)
        task.process([again])
    assert seen == [-1, 10, 10]


def test_the_extractor_adds_no_node_to_the_description() -> None:
    def topology(extractor: Any) -> str:
        b = StreamBuilder()
        b.stream("in", "str", "long", timestamp_extractor=extractor).to("out")
        b.table("t", "str", "long", timestamp_extractor=extractor).to_stream().to("out2")
        b.global_table("g", "str", "long", timestamp_extractor=extractor)
        return str(b.build().describe())

    assert topology(_value_time) == topology(None)
