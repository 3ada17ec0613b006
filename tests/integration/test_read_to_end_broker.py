"""`read_to_end` against a real broker: the end of a transactional partition lies past its
commit marker, an aborted transaction's records are not read by a read_committed consumer
(and its end is the last stable offset past the abort marker), an empty partition ends at
once, and a partition read from the middle ends where it ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer, to_end_settings
from kstream.kafka.read_to_end import read_to_end


@pytest.fixture(autouse=True)
def _kafka_only(kafka_broker: Any) -> None:
    if isinstance(kafka_broker, EmbeddedBroker):
        pytest.xfail("Apache Kafka's transactions: Tansu shows aborted records")


def _fill(bs: str, topic: str) -> None:
    """Partition 0: 3 committed records (0-2), commit marker (3), 2 aborted (4-5), abort
    marker (6). Partition 1: empty. Partition 2: 5 plain records (0-4)."""
    Admin(bs).create_topic(topic, 3)
    txn = Producer({"bootstrap.servers": bs, "transactional.id": f"{topic}-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, f"c{i}".encode(), b"k", partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, f"a{i}".encode(), b"k", partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bs})
    for i in range(5):
        plain.produce(topic, f"p{i}".encode(), b"k", partition=2)
    plain.flush(30)


def _read(bs: str, topic: str, starts: dict[int, int], **kafka: Any) -> tuple[Any, Any]:
    got: dict[int, list[bytes]] = {}
    ended: dict[tuple[str, int], int] = {}
    with Consumer(bs, kafka=to_end_settings(kafka)) as c:
        for batch in read_to_end(c, {(topic, p): o for p, o in starts.items()}, idle_timeout=30):
            for m in batch.messages:
                got.setdefault(m.partition(), []).append(m.value())
            ended.update(batch.ended)
    return got, {p: end for (_t, p), end in ended.items()}


def test_reads_to_the_end_past_transaction_markers(bootstrap_servers: str, topic_name: str) -> None:
    _fill(bootstrap_servers, topic_name)
    got, ended = _read(bootstrap_servers, topic_name, {0: 0, 1: 0, 2: 2})
    assert got == {0: [b"c0", b"c1", b"c2"], 2: [b"p2", b"p3", b"p4"]}
    assert ended == {0: 7, 1: 0, 2: 5}


def test_read_uncommitted_sees_the_aborted_records(
    bootstrap_servers: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("t")
    _fill(bootstrap_servers, topic)
    got, ended = _read(
        bootstrap_servers, topic, {0: 1, 1: 0}, **{"isolation.level": "read_uncommitted"}
    )
    assert got == {0: [b"c1", b"c2", b"a0", b"a1"]}
    assert ended == {0: 7, 1: 0}
