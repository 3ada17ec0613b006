"""Admin, Producer and Consumer against the real embedded broker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Message, TopicPartition
from support.groups import FAST_GROUP

from kstream.errors import ProduceError, ProducerFencedError, TopicError
from kstream.kafka import Admin, Consumer, EmbeddedBroker, Producer, TopicSpec
from kstream.kafka.partitioner import default_partition

JAVA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.fixture(scope="module")
def admin(kafka_broker: EmbeddedBroker) -> Admin:
    return Admin(kafka_broker.bootstrap_servers)


def read_all(consumer: Consumer, expected: int, deadline_s: float = 20.0) -> list[Message]:
    out: list[Message] = []
    end = time.monotonic() + deadline_s
    while len(out) < expected and time.monotonic() < end:
        out.extend(consumer.consume_batch(500, 0.2))
    return out


def test_topics_are_created_idempotently_with_partitions_and_configs(
    admin: Admin, unique_name: Callable[[str], str]
) -> None:
    a, b = unique_name("a"), unique_name("b")
    created = admin.create_topics(
        [
            TopicSpec(a, 3, {"cleanup.policy": "compact", "retention.ms": "-1"}),
            TopicSpec(b, 1),
        ]
    )
    assert created == {a: True, b: True}
    assert admin.create_topic(a, 3) is False

    desc = admin.describe_topic(a)
    assert desc.partitions == 3
    assert desc.config["cleanup.policy"] == "compact"
    assert desc.config["retention.ms"] == "-1"
    assert admin.partition_counts([a, b, "missing-topic-x"]) == {a: 3, b: 1}
    assert {a, b} <= set(admin.list_topics())

    with pytest.raises(TopicError) as e:
        admin.create_topic(a, 5)
    assert str(e.value) == f"topic {a!r} already exists with 3 partitions, but 5 were requested"

    assert admin.delete_topics([b]) == {b: True}
    assert b not in admin.list_topics()
    with pytest.raises(TopicError, match=r"topic\(s\) not found: 'nope-"):
        admin.describe_topics([f"nope-{a}"])


def test_records_keep_keys_headers_timestamps_and_tombstones(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str
) -> None:
    admin.create_topic(topic_name, 1)
    p = Producer(kafka_broker.bootstrap_servers)
    headers = [("h", b"1"), ("empty", None), ("h", b"2")]
    p.produce(topic_name, b"v1", b"k1", headers=headers, timestamp=1_700_000_000_123)
    p.produce(topic_name, None, b"k2", timestamp=1_700_000_000_456)
    p.produce(topic_name, b"v3", None, timestamp=1_700_000_000_789)
    p.flush()

    c = Consumer(kafka_broker.bootstrap_servers)
    c.assign([(topic_name, 0, 0)])
    msgs = read_all(c, 3)
    got = [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()) for m in msgs]
    assert got == [
        (0, b"k1", b"v1", headers, (1, 1_700_000_000_123)),
        (1, b"k2", None, None, (1, 1_700_000_000_456)),
        (2, None, b"v3", None, (1, 1_700_000_000_789)),
    ]
    # The end of the partition comes from the fetch, not from ListOffsets.
    read_all(c, 1, deadline_s=1.0)
    assert c.high_watermark(topic_name, 0) == 3
    assert c.eof_offset(topic_name, 0) == 3
    c.close()


def test_murmur2_placement_equals_java_partitioner(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str
) -> None:
    n = 7
    admin.create_topic(topic_name, n)
    keys = [k.encode() for k in JAVA_MURMUR2] + [f"user-{i}".encode() for i in range(40)]
    p = Producer(kafka_broker.bootstrap_servers)
    for k in keys:
        p.produce(topic_name, b"x", k)
    p.flush()

    c = Consumer(kafka_broker.bootstrap_servers)
    c.assign([(topic_name, i, 0) for i in range(n)])
    msgs = read_all(c, len(keys))
    c.close()
    placed = {m.key(): m.partition() for m in msgs}
    assert len(placed) == len(keys)
    assert placed == {k: default_partition(k, n) for k in keys}
    assert len(set(placed.values())) > 1
    # Java's own placement for the UtilsTest vectors: (hash & 0x7fffffff) % n.
    for text, h in JAVA_MURMUR2.items():
        assert placed[text.encode()] == (h & 0x7FFFFFFF) % n


def test_produce_to_a_missing_partition_is_a_produce_error(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str
) -> None:
    admin.create_topic(topic_name, 2)
    p = Producer(kafka_broker.bootstrap_servers)
    with pytest.raises(ProduceError) as e:
        p.produce(topic_name, b"lost", b"k", partition=9)
    assert str(e.value).startswith(f"producing to topic {topic_name!r} partition 9: ")
    assert e.value.code == "_UNKNOWN_PARTITION"


def test_delivery_errors_are_raised_from_flush(topic_name: str) -> None:
    with EmbeddedBroker() as broker:
        p = Producer(broker.bootstrap_servers, kafka={"message.timeout.ms": 1500})
    # The broker is gone: both records time out in librdkafka's queue.
    p.produce(topic_name, b"a", b"k1")
    p.produce(topic_name, b"b", b"k2")
    with pytest.raises(ProduceError) as e:
        p.flush(15)
    msg = str(e.value)
    assert msg.startswith(f"delivery failed for 2 record(s); first: topic={topic_name!r} ")
    assert "(and 1 more)" in msg
    assert e.value.code == "_MSG_TIMED_OUT"
    p.flush(1)  # reported once, then cleared


def test_group_consumer_assign_callbacks_commit_and_committed(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    admin.create_topic(topic_name, 2)
    p = Producer(kafka_broker.bootstrap_servers)
    for i in range(10):
        p.produce(topic_name, str(i).encode(), partition=i % 2)
    p.flush()

    group = unique_name("g")
    assigned: list[tuple[str, int]] = []
    c = Consumer(kafka_broker.bootstrap_servers, group_id=group, kafka=FAST_GROUP)
    c.subscribe(
        [topic_name], on_assign=lambda ps: assigned.extend((t.topic, t.partition) for t in ps)
    )
    msgs = read_all(c, 10)
    assert sorted(m.value() for m in msgs) == [str(i).encode() for i in range(10)]
    assert sorted(assigned) == [(topic_name, 0), (topic_name, 1)]
    c.commit([(topic_name, 0, 5), (topic_name, 1, 3)])
    got = c.committed([(topic_name, 0), (topic_name, 1)])
    assert [(t.partition, t.offset) for t in got] == [(0, 5), (1, 3)]
    c.close()


def test_transactional_produce_with_send_offsets(
    kafka_broker: EmbeddedBroker, admin: Admin, unique_name: Callable[[str], str]
) -> None:
    src, out, group = unique_name("src"), unique_name("out"), unique_name("g")
    admin.create_topics([TopicSpec(src, 1), TopicSpec(out, 1)])
    plain = Producer(kafka_broker.bootstrap_servers)
    for i in range(5):
        plain.produce(src, f"in-{i}".encode(), b"k")
    plain.flush()

    c = Consumer(kafka_broker.bootstrap_servers, group_id=group, kafka=FAST_GROUP)
    c.subscribe([src])
    inputs = read_all(c, 5)
    assert len(inputs) == 5

    tx = Producer(kafka_broker.bootstrap_servers, transactional_id=unique_name("tx"))
    tx.begin()
    for m in inputs:
        tx.produce(out, (m.value() or b"").upper(), m.key())
    tx.send_offsets([TopicPartition(src, 0, inputs[-1].offset() + 1)], c.consumer_group_metadata())
    tx.commit()
    assert not tx.in_transaction

    assert [t.offset for t in c.committed([(src, 0)])] == [5]
    reader = Consumer(kafka_broker.bootstrap_servers)
    reader.assign([(out, 0, 0)])
    assert [m.value() for m in read_all(reader, 5)] == [f"IN-{i}".encode() for i in range(5)]
    reader.close()
    c.close()


def test_a_newer_transactional_producer_fences_the_older(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    admin.create_topic(topic_name, 1)
    txid = unique_name("tx")
    old = Producer(kafka_broker.bootstrap_servers, transactional_id=txid)
    old.begin()
    old.produce(topic_name, b"old")
    Producer(kafka_broker.bootstrap_servers, transactional_id=txid)
    with pytest.raises(ProducerFencedError) as e:
        old.produce(topic_name, b"old-2")
        old.commit()
    assert f"transactional.id={txid!r}" in str(e.value)


def test_idempotent_producer_and_seek_pause_resume(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str
) -> None:
    admin.create_topic(topic_name, 2)
    p = Producer(kafka_broker.bootstrap_servers, idempotent=True)
    for i in range(6):
        p.produce(topic_name, str(i).encode(), partition=i % 2)
    p.flush()

    c = Consumer(kafka_broker.bootstrap_servers)
    c.assign([(topic_name, 0, 0), (topic_name, 1, 0)])
    c.pause([(topic_name, 1)])
    first = read_all(c, 3)
    assert [(m.partition(), m.value()) for m in first] == [(0, b"0"), (0, b"2"), (0, b"4")]
    read_all(c, 1, deadline_s=0.5)
    assert c.eof_offset(topic_name, 0) == 3
    assert c.eof_offset(topic_name, 1) is None

    c.resume([(topic_name, 1)])
    c.seek(topic_name, 0, 1)
    assert c.eof_offset(topic_name, 0) is None  # forgotten on seek
    rest = read_all(c, 5)
    assert sorted((m.partition(), m.value()) for m in rest) == [
        (0, b"2"),
        (0, b"4"),
        (1, b"1"),
        (1, b"3"),
        (1, b"5"),
    ]
    assert [t.offset for t in c.position([(topic_name, 0), (topic_name, 1)])] == [3, 3]
    assert c.partitions_for(topic_name) == [0, 1]
    assert c.partitions_for(f"missing-{topic_name}") == []
    c.close()


def test_a_transaction_in_an_error_state_is_not_blamed_on_the_record(
    kafka_broker: EmbeddedBroker, admin: Admin, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    # librdkafka refuses a transactional produce outside a transaction as "Erroneous state";
    # the same code comes when an abort timed out: the record is not at fault, so it must not
    # be a ProduceError (which the error policy may skip) but a retry of the batch
    from kstream.kafka.errors import TransactionAbortableError

    admin.create_topic(topic_name, 1)
    p = Producer(kafka_broker.bootstrap_servers, transactional_id=unique_name("tx"))
    with pytest.raises(TransactionAbortableError) as e:
        p.produce(topic_name, b"v")
    assert e.value.code == "_STATE"
    assert not isinstance(e.value, ProduceError)
