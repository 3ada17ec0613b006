"""The Kafka source's offset planning and the sink's once-per-batch writes, without a query."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from spark_helpers import create_topics, read_all

from kstream.kafka.producer import Producer

pytest.importorskip("pyspark")

Names = Callable[[str], str]


def reader(bootstrap: str, topics: list[str], max_records: int | None = None) -> Any:
    from kstream.spark.source import KafkaStreamReader, options

    return KafkaStreamReader(options(bootstrap, topics, max_records_per_batch=max_records))


def test_end_offsets_come_from_fetching(bootstrap_servers: str, unique_name: Names) -> None:
    topic = unique_name("src")
    create_topics(bootstrap_servers, {topic: 2})
    # One flush: each partition's records land in one record batch, the case where a broker
    # may answer ListOffsets LATEST with that batch's base offset + 1.
    with Producer(bootstrap_servers, kafka={"linger.ms": 200}) as p:
        for i in range(10):
            p.produce(topic, b"v", None, partition=i % 2)
        p.flush()
    r = reader(bootstrap_servers, [topic])
    try:
        assert r.initialOffset() == {topic: {"0": 0, "1": 0}}
        assert r.latestOffset({topic: {"0": 0, "1": 0}}, _all()) == {topic: {"0": 5, "1": 5}}
    finally:
        r.stop()


def test_a_read_chunk_gives_the_same_records_with_or_without_arrow(
    bootstrap_servers: str, unique_name: Names
) -> None:
    """A sub-topology run inside the read takes the chunk's records made straight from the
    consumed messages: the same records, field by field, as its Arrow batch gives Spark."""
    from kstream.spark.source import OffsetRange, read_range
    from kstream.spark.wire import input_records

    topic = unique_name("src")
    create_topics(bootstrap_servers, {topic: 1})
    with Producer(bootstrap_servers) as p:
        for i in range(30):
            headers = [("h", b"%d" % i), ("none", None)] if i % 3 == 0 else None
            key = None if i % 5 == 0 else b"k%d" % i
            p.produce(topic, b"v%d" % i, key, partition=0, timestamp=1_000 + i, headers=headers)
        p.flush()
    chunks = list(read_range(bootstrap_servers, {}, OffsetRange(topic, 0, 0, 30)))
    got = [r for c in chunks for r in c.records()]
    assert [_fields(r) for r in got] == [
        _fields(r) for c in chunks for r in input_records(c.arrow())
    ]
    assert [_fields(r) for r in got] == [
        (
            None if i % 5 == 0 else b"k%d" % i,
            b"v%d" % i,
            1_000 + i,
            [("h", b"%d" % i), ("none", None)] if i % 3 == 0 else [],
            topic,
            0,
            i,
        )
        for i in range(30)
    ]


def _fields(r: Any) -> tuple[Any, ...]:
    return (r.key, r.value, r.timestamp, list(r.headers), r.topic, r.partition, r.offset)


def _all() -> Any:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    return ReadAllAvailable()


def test_max_records_per_batch_and_available_now(
    bootstrap_servers: str, unique_name: Names
) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    topic = unique_name("src")
    create_topics(bootstrap_servers, {topic: 2})
    with Producer(bootstrap_servers) as p:
        for i in range(30):
            p.produce(topic, b"v", None, partition=0 if i < 20 else 1)
        p.flush()
    r = reader(bootstrap_servers, [topic], max_records=8)
    try:
        start = r.initialOffset()
        r.prepareForTriggerAvailableNow()
        with Producer(bootstrap_servers) as p:  # after the target: not part of this run
            p.produce(topic, b"late", None, partition=1)
            p.flush()
        seen = []
        while True:
            end = r.latestOffset(start, r.getDefaultReadLimit())
            if end == start:
                break
            taken = sum(end[topic][p] - start[topic][p] for p in end[topic])
            assert 0 < taken <= 8
            seen.append(end)
            parts = r.partitions(start, end)
            rows = sum(b.num_rows for part in parts for b in r.read(part))
            assert rows == taken
            start = end
        assert start == {topic: {"0": 20, "1": 10}}
        assert len(seen) == 4
        assert r.latestOffset(start, ReadMaxRows(100)) == start
    finally:
        r.stop()


def test_sink_writes_each_batch_once(bootstrap_servers: str, unique_name: Names) -> None:
    from kstream.kafka.admin import Admin
    from kstream.spark.sink import TransactionalSink, marker_topic

    out, app = unique_name("out"), unique_name("app")
    create_topics(bootstrap_servers, {out: 1})
    with Admin(bootstrap_servers) as admin:
        admin.create_topic(marker_topic(app), 1)
    cols: dict[str, list[Any]] = {
        "ptopic": ["in", "in", "in"],
        "ppart": [0, 0, 1],
        "poff": [7, 7, 3],
        "seq": [1, 0, 0],
        "k": [b"b", b"a", b"c"],
        "topic": [out] * 3,
        "v": [b"2", b"1", b"3"],
        "ts": [10, 10, 11],
        "part": [None, None, None],
        "dest": [None] * 3,
    }
    sink = TransactionalSink(app, bootstrap_servers, provenance=True)
    try:
        sink.write(cols, 0)
        sink.write(cols, 0)  # replayed batch
        assert (sink.batches_written, sink.batches_skipped) == (1, 1)
        assert sink.committed_batches() == 1
    finally:
        sink.close()
    again = TransactionalSink(app, bootstrap_servers)  # a restarted process
    try:
        again.write(cols, 0)
        assert again.batches_skipped == 1
    finally:
        again.close()
    got = read_all(bootstrap_servers, out, "bytes", "bytes")
    assert [(r.key, r.value) for r in got] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    from kstream.state import provenance

    ids = [provenance.from_headers(list(r.headers)) for r in got]
    assert ids == [("in", 0, 7, 0), ("in", 0, 7, 1), ("in", 1, 3, 0)]


def _plain_read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Every value of `topic`'s partition 0 as a plain confluent-kafka read_committed consumer
    sees it (no kstream code), waiting until `expected` have come or 60 s have passed."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-plain",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        for _ in range(4):  # anything more that is there (a duplicate) comes now
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def one_row(out: str, i: int) -> dict[str, list[Any]]:
    """One row for `out` as a slot or task writer takes them (columns): value `i`."""
    return {
        "ptopic": ["in"],
        "ppart": [0],
        "poff": [i],
        "seq": [0],
        "k": [b"k"],
        "topic": [out],
        "v": [str(i).encode()],
        "ts": [100 + i],
        "part": [0],
        "h": [None],
    }


def test_a_kept_slot_writer_fenced_by_another_worker_writes_each_batch_once(
    bootstrap_servers: str, unique_name: Callable[[str], str]
) -> None:
    """A Python worker keeps its writer of a slot from batch to batch (`cached_writer`) and
    trusts its own last marker while its producer is not fenced. Two writers of one slot take
    turns, as two workers may: each start fences the other's producer, whose next batch fails
    at the marker (sent before any record) and is retried with a new producer that reads the
    marker again, writing a batch not yet written and skipping one already written. A plain
    read_committed consumer reads each batch's record once."""
    from kstream.kafka.admin import Admin
    from kstream.spark.sink import SlotWriter, ensure_marker_topic

    app, out = unique_name("kept"), unique_name("kept-out")
    create_topics(bootstrap_servers, {out: 1})
    with Admin(bootstrap_servers) as admin:
        ensure_marker_topic(admin, app, 1)

    def batch(i: int) -> dict[str, list[Any]]:
        return one_row(out, i)

    a = SlotWriter(app, bootstrap_servers, {}, 0)
    b = SlotWriter(app, bootstrap_servers, {}, 0)
    try:
        assert a.write(batch(0), 0) == 1
        assert a.write(batch(1), 1) == 1  # the kept producer, no marker read
        assert b.write(batch(2), 2) == 1  # another worker: fences a's producer
        assert a.retries == 0 and b.retries == 0
        assert a.write(batch(2), 2) == -1  # a replay on a: fenced, retried, skipped
        assert a.retries == 1
        assert a.write(batch(3), 3) == 1
        assert b.write(batch(3), 3) == -1  # b was fenced by a's retry: skipped again
        assert b.write(batch(4), 4) == 1
        assert a.write(batch(0), 0) == -1  # an old batch: at or below a's own marker
    finally:
        a.close()
        b.close()
    assert _plain_read_committed(bootstrap_servers, out, 5) == [b"0", b"1", b"2", b"3", b"4"]


def test_a_task_writer_renews_a_producer_another_worker_fenced_and_keeps_its_consumer(
    bootstrap_servers: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that writes its own outputs (`TaskWriter`) keeps the token of the producer that
    wrote its last batch. Spark gives the task any idle Python worker: when the token is
    another worker's, this worker's producer has been fenced since, and it starts a new one
    before writing (no failed attempt: `retries` stays 0); a fenced producer found by a failed
    attempt is replaced too. Either way the writer keeps its consumer (only the producer is
    new). Two workers are two writer caches here. A plain read_committed consumer reads each
    batch's record once."""
    from kstream.kafka.admin import Admin
    from kstream.spark import slot_writer
    from kstream.spark.sink import TaskWriter, ensure_marker_topic

    app, out = unique_name("task"), unique_name("task-out")
    create_topics(bootstrap_servers, {out: 1})
    with Admin(bootstrap_servers) as admin:
        ensure_marker_topic(admin, app, 1)

    def rows(i: int) -> dict[str, list[Any]]:
        return {name: col for name, col in one_row(out, i).items() if name != "h"}

    task = TaskWriter(app, "exactly_once", {})
    caches: dict[str, dict[Any, Any]] = {"a": {}, "b": {}}

    def write(worker: str, i: int, last: str | None) -> tuple[int, str | None]:
        with monkeypatch.context() as m:
            m.setattr(slot_writer, "_WRITERS", caches[worker])
            got, owner = task.write(0, rows(i), i, bootstrap_servers, None, False, last)
        return int(json.loads(got)["written"]), owner

    def writer(worker: str) -> Any:
        ((_, w, _),) = caches[worker].values()
        return w

    try:
        n, owner_a = write("a", 0, None)
        assert n == 1 and owner_a is not None
        consumer_a = writer("a")._consumer
        n, owner_b = write("b", 1, owner_a)  # b's first producer fences a's
        assert n == 1 and owner_b not in (None, owner_a)
        n, renewed = write("a", 2, owner_b)  # known to be fenced: renewed before the write
        assert n == 1 and renewed not in (None, owner_a)
        assert writer("a").retries == 0
        assert writer("a")._consumer is consumer_a
        n, _ = write("b", 3, owner_b)  # b trusts a stale token: its attempt fails, retried
        assert n == 1 and writer("b").retries == 1
        n, _ = write("b", 3, None)  # a replay of batch 3: skipped by the marker
        assert n == -1
    finally:
        for cache in caches.values():
            for _, w, _ in cache.values():
                w.close()
    assert _plain_read_committed(bootstrap_servers, out, 4) == [b"0", b"1", b"2", b"3"]
