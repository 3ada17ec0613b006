"""Group requests on a broker whose `__consumer_offsets` is not loaded yet.

A Spark query started from a new checkpoint deletes its marker groups first
(`kstream.spark.sink.forget_markers`). On a broker that had never served a group (a fresh
cluster: `bench/spark.py`'s first Spark run) the broker answered NOT_COORDINATOR, then
COORDINATOR_LOAD_IN_PROGRESS while it created and loaded the offsets topic; librdkafka hands
those answers back, and the run failed on its first query. The admin asks again, as Kafka's own
admin client does. Reading a group's committed offsets is the same request family: a Spark
write slot's first marker read on such a broker failed, and its batch was written by a retry
with new clients. The consumer asks again too, as Kafka's consumer does.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from kstream.kafka import Admin
from kstream.kafka.consumer import Consumer as KstreamConsumer
from kstream.testing.kafka import KafkaCluster


def test_groups_are_deleted_on_a_broker_that_never_served_one() -> None:
    with KafkaCluster(nodes=1) as cluster, Admin(cluster.bootstrap_servers) as admin:
        # the broker's first group request: its coordinator is created and loaded now
        assert admin.delete_groups(["never-used-a", "never-used-b"]) == []
        admin.create_topic("t", 1)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "used"})
        try:
            consumer.commit(offsets=[TopicPartition("t", 0, 5)], asynchronous=False)
        finally:
            consumer.close()
        assert admin.delete_groups(["used", "never-used-a"]) == ["used"]
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "used"})
        try:
            committed = consumer.committed([TopicPartition("t", 0)], timeout=30)
        finally:
            consumer.close()
        assert committed[0].offset < 0  # no offset left: the group is gone


def test_committed_offsets_are_read_on_a_broker_that_never_served_a_group() -> None:
    """As a Spark write slot starts: its transactional producer first (the broker creates
    `__transaction_state`), then the marker group's committed offset, the first group request."""
    with KafkaCluster(nodes=1) as cluster, Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic("t", 1)
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "first-slot"}
        )
        producer.init_transactions(30)
        consumer = KstreamConsumer(cluster.bootstrap_servers, group_id="first-group")
        try:
            # the broker's first group request: its coordinator is created and loaded now
            (tp,) = consumer.committed([("t", 0)], timeout=30)
        finally:
            consumer.close()
        assert (tp.topic, tp.partition, tp.offset) == ("t", 0, TopicPartition("t", 0).offset)
        assert tp.offset < 0  # nothing committed
