"""The client contract: the same scenarios against the mock cluster and the real broker.

`kstream.testing.MockClientSupplier` stands in for Kafka in the broker-free runtime tests
(tests/unit/runtime); these scenarios keep it honest by running each one on both suppliers and
expecting the same outcome: the real broker is Apache Kafka (or Tansu in the compatibility
lane, KSTREAM_TEST_BROKER=tansu). Only behaviours both brokers get right are here. Tansu's
known gaps, which the mock does not copy: it shows records of aborted transactions to
read_committed readers (the broker-compatibility component absorbs them), its ListOffsets
LATEST is wrong, a group join takes about session.timeout.ms/2 (no scenario joins), and a
producer fenced while its transaction is open is not told so: its commit times out
(FatalTransactionError after the transaction timeout) where Kafka answers PRODUCER_FENCED. The
runtime treats both as fatal for the producer, but the outcomes differ, so fencing is not part
of the contract: the mock's fencing is tested with the runtime (tests/unit/runtime), the real
broker's by the crash tests (tests/e2e/test_crash.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from kstream.kafka.admin import TopicSpec
from kstream.kafka.partitioner import default_partition
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.testing import MockClientSupplier


@dataclass
class Cluster:
    """One side of the contract: a supplier and the address its clients are given."""

    supplier: ClientSupplier
    bootstrap_servers: str
    name: Callable[[str], str]

    def config(self, **fields: object) -> ClientConfig:
        return ClientConfig(self.bootstrap_servers, **fields)  # type: ignore[arg-type]

    def topic(self, prefix: str, partitions: int = 1) -> str:
        name = self.name(prefix)
        admin = self.supplier.admin(self.config())
        try:
            admin.create_topics([TopicSpec(name, partitions)])
        finally:
            admin.close()
        return name

    def read(self, topic: str, partitions: int, expected: int) -> list[tuple[int, int, bytes]]:
        """(partition, offset, value) of the first `expected` records, read from the start."""
        consumer = self.supplier.consumer(self.config(kafka={"isolation.level": "read_committed"}))
        try:
            consumer.assign([(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            out: list[tuple[int, int, bytes]] = []
            for _ in range(200):  # a bound on polls, not a timed assertion
                for m in consumer.consume_batch(100, 0.1):
                    out.append((m.partition() or 0, m.offset() or 0, m.value() or b""))
                if len(out) >= expected:
                    break
            return sorted(out)
        finally:
            consumer.close()


@pytest.fixture(params=["mock", "kafka"])
def cluster(request: pytest.FixtureRequest, unique_name: Callable[[str], str]) -> Iterator[Cluster]:
    if request.param == "mock":
        yield Cluster(MockClientSupplier(), "mock:9092", unique_name)
    else:
        bootstrap = request.getfixturevalue("bootstrap_servers")
        yield Cluster(KafkaClientSupplier(), bootstrap, unique_name)


def test_keyed_records_land_where_murmur2_says_in_order(cluster: Cluster) -> None:
    topic = cluster.topic("keyed", partitions=3)
    producer = cluster.supplier.producer(cluster.config())
    keys = [f"user-{i}".encode() for i in range(12)]
    for i, key in enumerate(keys):
        producer.produce(topic, str(i).encode(), key)
    producer.flush()
    expected: dict[int, list[bytes]] = {}
    for i, key in enumerate(keys):
        expected.setdefault(default_partition(key, 3), []).append(str(i).encode())
    got = cluster.read(topic, 3, len(keys))
    by_partition: dict[int, list[bytes]] = {}
    for part, offset, value in got:
        assert offset == len(by_partition.get(part, []))  # offsets 0, 1, 2 ... per partition
        by_partition.setdefault(part, []).append(value)
    assert by_partition == expected


def test_tracked_topics_report_their_delivered_offsets(cluster: Cluster) -> None:
    tracked, other = cluster.topic("tracked"), cluster.topic("other")
    producer = cluster.supplier.producer(
        cluster.config(idempotent=True, track_offsets=frozenset({tracked}))
    )
    for i in range(3):
        producer.produce(tracked, b"%d" % i, partition=0)
        producer.produce(other, b"%d" % i, partition=0)
    producer.flush()
    assert producer.take_offsets() == {(tracked, 0): 2}
    assert producer.take_offsets() == {}


def test_a_transaction_commits_records_and_group_offsets_together(cluster: Cluster) -> None:
    source, sink = cluster.topic("source"), cluster.topic("sink")
    group = cluster.name("group")
    consumer = cluster.supplier.consumer(cluster.config(group_id=group))
    producer = cluster.supplier.producer(cluster.config(transactional_id=cluster.name("txn")))
    try:
        producer.begin()
        producer.produce(sink, b"out-1", partition=0)
        producer.produce(sink, b"out-2", partition=0)
        producer.send_offsets([TopicPartition(source, 0, 7)], consumer.consumer_group_metadata())
        # While the transaction is open a read_committed consumer's committed() waits for it
        # (Kafka's stable offsets, KIP-447); a read_uncommitted one answers: nothing yet.
        peek = cluster.supplier.consumer(
            cluster.config(group_id=group, kafka={"isolation.level": "read_uncommitted"})
        )
        try:
            assert not [tp for tp in peek.committed([(source, 0)]) if tp.offset >= 0]
        finally:
            peek.close()
        producer.commit()
        assert [tp.offset for tp in consumer.committed([(source, 0)])] == [7]
        assert [v for _, _, v in cluster.read(sink, 1, 2)] == [b"out-1", b"out-2"]
    finally:
        producer.close(5.0, drop_undelivered=True)
        consumer.close()


def test_a_consumer_commit_is_what_committed_reads_back(cluster: Cluster) -> None:
    topic, group = cluster.topic("offsets", partitions=2), cluster.name("group")
    consumer = cluster.supplier.consumer(cluster.config(group_id=group))
    try:
        consumer.commit([TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)])
        assert [tp.offset for tp in consumer.committed([(topic, 0), (topic, 1)])] == [3, 5]
    finally:
        consumer.close()
