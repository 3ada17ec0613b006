"""`settle`: before a query starts under availableNow, the transactions on its input are complete.

A run killed mid-write (its driver or an executor) leaves its slot's transaction open until the
broker's transaction timeout, and a query started meanwhile would take the last stable offset,
short of everything committed behind that transaction, as the end of its input: in a loop of
queries (a foreign-key join) the loop could end with records never read. `settle` fences the
writers of such partitions, which aborts the transaction, and returns once every partition's
read_committed end is its high watermark.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer as RawProducer
from confluent_kafka import TopicPartition
from spark_helpers import create_topics, produce, read_all

from kstream.dsl import StreamBuilder
from kstream.kafka.consumer import Consumer


def test_a_transaction_a_dead_writer_left_open_is_fenced_and_what_follows_is_read(
    bootstrap_servers: str, unique_name: Callable[[str], str]
) -> None:
    from kstream.spark.runner import settle
    from kstream.spark.tasks import build_task_plan

    bs = bootstrap_servers
    topic, tid = unique_name("between"), unique_name("slot")
    create_topics(bs, {topic: 1})
    dead = RawProducer({"bootstrap.servers": bs, "transactional.id": tid})
    dead.init_transactions()
    dead.begin_transaction()
    dead.produce(topic, b"never", b"k")
    dead.flush()  # written, never committed: the writer is gone
    produce(bs, topic, [("k", "after", 1)], "string", "string")  # behind the open transaction

    b = StreamBuilder()
    b.stream(topic).to(unique_name("out"))
    plan = build_task_plan(b.build(), "app")
    plan.bootstrap_servers = bs
    fenced: list[list[tuple[str, int]]] = []

    def fence(pending: list[tuple[str, int]]) -> None:
        fenced.append(pending)
        RawProducer({"bootstrap.servers": bs, "transactional.id": tid}).init_transactions()

    assert settle(plan, [topic], fence)
    assert fenced == [[(topic, 0)]]
    with Consumer(bs, kafka={"isolation.level": "read_committed"}) as c:
        stable = c.get_watermark_offsets(TopicPartition(topic, 0), cached=False)
    assert stable is not None and stable[1] == 3  # the record, the open one, its abort marker
    assert [r.value for r in read_all(bs, topic, "string", "string")] == ["after"]
