"""The in-memory mock producer and consumer behave like the real clients."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_INVALID, TopicPartition

from kstream.errors import ConfigError, ProduceError, ProducerFencedError, TopicError
from kstream.kafka.errors import TransactionAbortableError
from kstream.kafka.partitioner import default_partition
from kstream.testing import MockCluster, MockConsumer, MockProducer


def test_keyed_records_land_where_the_real_producer_puts_them() -> None:
    cluster = MockCluster()
    cluster.create_topic("t", 7)
    p = MockProducer(cluster)
    keys = [f"user-{i}".encode() for i in range(30)]
    for k in keys:
        p.produce("t", b"v", k)
    p.flush()
    assert [(m.key(), m.partition()) for m in p.history] == [
        (k, default_partition(k, 7)) for k in keys
    ]


def test_produce_and_consume_keep_everything() -> None:
    cluster = MockCluster()
    cluster.create_topic("t", 2)
    p = MockProducer(cluster)
    p.produce("t", b"v1", b"k", partition=1, timestamp=42, headers=[("h", b"1"), ("h", None)])
    p.produce("t", None, b"k", partition=1, timestamp=43)
    p.flush()

    c = MockConsumer(cluster)
    c.assign([("t", 0), ("t", 1)])
    msgs = c.consume_batch(10, 0.1)
    got = [
        (m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp())
        for m in msgs
    ]
    assert got == [
        ("t", 1, 0, b"k", b"v1", [("h", b"1"), ("h", None)], (1, 42)),
        ("t", 1, 1, b"k", None, None, (1, 43)),
    ]
    assert all(m.error() is None for m in msgs)
    assert c.consume_batch(10, 0.1) == []
    assert c.eof_offset("t", 1) == 2
    assert c.eof_offset("t", 0) == 0
    assert c.high_watermark("t", 1) == 2


def test_max_records_seek_pause_and_resume() -> None:
    cluster = MockCluster()
    p = MockProducer(cluster)
    for i in range(5):
        p.produce("t", str(i).encode())
    p.flush()
    assert cluster.partitions("t") == 1  # auto-created
    c = MockConsumer(cluster)
    c.assign([("t", 0, 1)])
    assert [m.value() for m in c.consume_batch(2, 0)] == [b"1", b"2"]
    assert c.position([("t", 0)])[0].offset == 3
    c.pause([("t", 0)])
    assert c.consume_batch(10, 0) == []
    c.resume([("t", 0)])
    c.seek("t", 0, 0)
    assert [m.value() for m in c.consume_batch(10, 0)] == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(TopicError, match="partition is not assigned"):
        c.seek("other", 0, 0)


def test_group_subscribe_callbacks_and_commits() -> None:
    cluster = MockCluster()
    cluster.create_topic("t", 2)
    p = MockProducer(cluster)
    for i in range(4):
        p.produce("t", b"x", partition=i % 2)
    p.flush()
    assigned: list[TopicPartition] = []
    c = MockConsumer(cluster, group_id="g")
    c.subscribe(["t"], on_assign=assigned.extend)
    assert len(c.consume_batch(100, 0)) == 4
    assert [(t.topic, t.partition) for t in assigned] == [("t", 0), ("t", 1)]
    assert [t.offset for t in c.committed([("t", 0), ("t", 1)])] == [OFFSET_INVALID] * 2
    c.commit([("t", 0, 1)])
    c.close()

    again = MockConsumer(cluster, group_id="g")
    again.subscribe(["t"])
    assert [(m.partition(), m.offset()) for m in again.consume_batch(100, 0)] == [
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    with pytest.raises(ConfigError, match="subscribe needs a group_id"):
        MockConsumer(cluster).subscribe(["t"])


def test_transactions_are_atomic_with_offsets() -> None:
    cluster = MockCluster()
    c = MockConsumer(cluster, group_id="g")
    tx = MockProducer(cluster, transactional_id="tx")
    with pytest.raises(Exception, match="no open transaction"):
        tx.produce("out", b"early")
    tx.begin()
    tx.produce("out", b"a")
    tx.send_offsets([TopicPartition("in", 0, 7)], c.consumer_group_metadata())
    assert cluster.messages("out") == []
    tx.commit()
    assert [m.value() for m in cluster.messages("out")] == [b"a"]
    assert cluster.committed("g", "in", 0) == 7

    tx.begin()
    tx.produce("out", b"b")
    tx.send_offsets([TopicPartition("in", 0, 9)], c.consumer_group_metadata())
    tx.abort()
    assert [m.value() for m in cluster.messages("out")] == [b"a"]
    assert cluster.committed("g", "in", 0) == 7


def test_newer_transactional_producer_fences_older() -> None:
    cluster = MockCluster()
    old = MockProducer(cluster, transactional_id="tx")
    MockProducer(cluster, transactional_id="tx")
    with pytest.raises(ProducerFencedError, match=r"transactional\.id='tx'"):
        old.begin()


def test_injected_failures_surface_like_real_ones() -> None:
    cluster = MockCluster()
    cluster.create_topic("t", 2)
    p = MockProducer(cluster)
    with pytest.raises(ProduceError) as e:
        p.produce("t", b"x", partition=5)
    assert str(e.value) == "producing to topic 't' partition 5: the topic has 2 partition(s)"
    p.produce("t", b"x")
    p.fail_next_flush("broker down")
    with pytest.raises(ProduceError, match=r"^broker down$"):
        p.flush()
    p.flush()

    tx = MockProducer(cluster, transactional_id="tx")
    tx.begin()
    tx.produce("t", b"y", partition=0)
    tx.fail_next_flush("record too large")
    with pytest.raises(TransactionAbortableError, match="record too large"):
        tx.commit()
    assert tx.in_transaction  # an abortable error: the caller aborts, as with the real one
    tx.abort()
    assert not tx.in_transaction
    assert [m.value() for m in cluster.messages("t", 0)] == [b"x"]


def test_topic_partition_mismatch() -> None:
    cluster = MockCluster()
    assert cluster.create_topic("t", 2) is True
    assert cluster.create_topic("t", 2) is False
    with pytest.raises(TopicError) as e:
        cluster.create_topic("t", 3)
    assert str(e.value) == "topic 't' already exists with 2 partitions, but 3 were requested"
