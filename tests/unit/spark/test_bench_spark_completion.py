"""bench/spark.py's `Completion`, the native run's done check with one consumer kept for the
run: done once the group's committed offsets reach the input's known ends and no record of a
transactional intermediate topic follows them (its commit marker takes an offset, so only a
read to the end shows it), and not before."""

from __future__ import annotations

import os
import sys
import uuid

from confluent_kafka import Consumer as PlainConsumer
from confluent_kafka import Producer as PlainProducer
from confluent_kafka import TopicPartition

from kstream.kafka.admin import Admin

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from spark import Completion  # noqa: E402


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = PlainConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


def test_done_when_the_group_has_committed_past_every_record(bootstrap_servers: str) -> None:
    run = uuid.uuid4().hex[:8]
    src, mid, group = f"cmp-in-{run}", f"cmp-mid-{run}", f"cmp-{run}"
    with Admin(bootstrap_servers) as admin:
        admin.create_topic(src, 2)
        admin.create_topic(mid, 1)
    p = PlainProducer({"bootstrap.servers": bootstrap_servers, "transactional.id": run})
    p.init_transactions()
    p.begin_transaction()
    for i in range(6):
        p.produce(src, b"v", partition=i % 2)
        p.produce(mid, b"v", partition=0)
    p.commit_transaction()
    # the input's ends as the bench knows them: its records, the marker after them
    ends = {0: 4, 1: 4}
    with Completion(bootstrap_servers, group, [src, mid], {src: ends}) as completion:
        _commit(bootstrap_servers, group, {(src, 0): 0, (src, 1): 0})
        assert not completion.done()  # nothing processed
        _commit(bootstrap_servers, group, {(src, 0): 4, (src, 1): 3})
        assert not completion.done()  # one input record left
        _commit(bootstrap_servers, group, {(src, 1): 4, (mid, 0): 5})
        assert not completion.done()  # the mid topic's offsets just moved
        assert not completion.done()  # still: its last record follows the committed offset
        _commit(bootstrap_servers, group, {(mid, 0): 6})
        assert not completion.done()  # moved again
        assert completion.done()  # stood still, and only the commit marker follows
