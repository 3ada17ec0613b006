"""The runtime's sink collector against the real broker: its inlined produce call falls back to
`Producer.produce` (a full queue is drained and retried, a client error is named). The
provenance stamps are the broker-compatibility component's (broker_compat="tansu"); on Apache
Kafka a record keeps its own headers."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from kstream.broker_compat import KAFKA, TANSU
from kstream.errors import ProduceError
from kstream.kafka import Admin, Consumer, EmbeddedBroker, Producer
from kstream.records import Record
from kstream.runtime.collector import Collector
from kstream.state.provenance import HEADER, from_headers


class TaskStandIn:
    """What the collector reads of a runtime task: the current record, the error report."""

    def __init__(self) -> None:
        self.current: Record | None = None
        self.reported: list[tuple[type, str]] = []

        # the current record at each report: a dead-letter copy takes its provenance
        self.current_at_report: list[Record | None] = []

    def report(self, exc: BaseException, record: Record, where: str) -> None:
        self.reported.append((type(exc), where))
        self.current_at_report.append(self.current)


def read(broker: EmbeddedBroker, topic: str, n: int, group: str) -> list[Any]:
    """The first `n` messages of `topic` (within 20 s)."""
    consumer = Consumer(
        broker.bootstrap_servers, group_id=group, kafka={"auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.consume_batch(100, 0.2))
    consumer.close()
    return got


class RuntimeTaskStandIn:
    def __init__(self, producer: Producer, stamp: bool = True) -> None:
        self.task = TaskStandIn()
        self.producer = producer
        self.ctx = SimpleNamespace(compat=TANSU if stamp else KAFKA)


@pytest.mark.parametrize("stamp", [True, False], ids=["provenance", "plain"])
def test_a_full_queue_is_drained_and_every_record_is_written_once_in_order(
    kafka_broker: EmbeddedBroker, topic_name: str, unique_name: Callable[[str], str], stamp: bool
) -> None:
    Admin(kafka_broker.bootstrap_servers).create_topic(topic_name, 1)
    # a queue of 5 records that the producer holds for 50 ms: most sends find it full
    producer = Producer(
        kafka_broker.bootstrap_servers,
        kafka={"queue.buffering.max.messages": 5, "linger.ms": 50},
    )
    full_calls: list[int] = []
    full_produce = producer.produce

    def counted(*args: Any) -> None:
        full_calls.append(1)
        full_produce(*args)

    producer.produce = counted  # type: ignore[method-assign]
    rt: Any = RuntimeTaskStandIn(producer, stamp)
    collector = Collector(rt)
    n = 60
    for i in range(n):
        rt.task.current = Record(b"in", b"in", 0, (), "source-topic", 3, 100 + i)
        collector.send(topic_name, b"k%d" % i, b"v%d" % i, 1_000 + i, [("h", b"%d" % i)], 0)
    producer.flush(30)
    assert collector.produced == {topic_name: n}
    assert 0 < len(full_calls) < n  # the inlined call queued some; a full queue sent the rest
    got = read(kafka_broker, topic_name, n, unique_name("g"))
    assert [(m.key(), m.value(), m.timestamp()[1]) for m in got] == [
        (b"k%d" % i, b"v%d" % i, 1_000 + i) for i in range(n)
    ]
    # the record's own headers, and the provenance stamp only when asked for
    assert [m.headers()[0] for m in got] == [("h", b"%d" % i) for i in range(n)]
    provenance = [from_headers(m.headers()) for m in got]
    if stamp:
        assert [(p.topic, p.partition, p.offset, p.output_index) for p in provenance if p] == [
            ("source-topic", 3, 100 + i, 0) for i in range(n)
        ]
        assert all(sum(1 for k, _ in m.headers() if k == HEADER) == 1 for m in got)
    else:
        assert all(len(m.headers()) == 1 for m in got)
    producer.close()


def test_a_record_the_client_refuses_is_reported_against_its_input_record(
    kafka_broker: EmbeddedBroker, topic_name: str
) -> None:
    Admin(kafka_broker.bootstrap_servers).create_topic(topic_name, 2)
    producer = Producer(kafka_broker.bootstrap_servers)
    rt: Any = RuntimeTaskStandIn(producer)
    collector = Collector(rt)
    rt.task.current = Record(b"in", b"in", 0, (), "source-topic", 0, 5)
    collector.send(topic_name, b"k", b"v", 1, (), 9)  # partition 9 of 2
    assert rt.task.reported == [(ProduceError, f"producing to topic {topic_name!r}")]
    assert collector.produced == {}
    producer.close()


def test_a_slice_of_records_keeps_each_records_origin_headers_and_partition(
    kafka_broker: EmbeddedBroker, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    """`send_many` (a sink's slice): each record is stamped with its own origin, the output
    index counts per source offset across slices, a stale provenance header is replaced, other
    headers stay, and a record of no input (a punctuation's) goes out without one."""
    Admin(kafka_broker.bootstrap_servers).create_topic(topic_name, 2)
    producer = Producer(kafka_broker.bootstrap_servers)
    rt: Any = RuntimeTaskStandIn(producer)
    collector = Collector(rt)
    stale = (HEADER, b"\x01stale")
    first = [
        Record("a", 1, 10, (), "in-a", 0, 7),
        Record("b", 2, 11, [("trace", b"t1"), stale], "in-b", 1, 7),
        Record("c", 3, 12, (), "in-a", 0, 7),  # a second output of in-a/0@7
        Record("d", 4, 13, (), "in-a", 0, 8),
    ]
    collector.send_many(
        topic_name, first, [b"a", b"b", b"c", b"d"], [b"1", b"2", b"3", b"4"], [0, 1, 0, 1]
    )
    second = [Record("e", 5, 14, (), "in-a", 0, 7), Record("p", 6, 15)]
    collector.send_many(topic_name, second, [b"e", None], [b"5", None], None)
    producer.flush(30)
    assert collector.produced == {topic_name: 6}
    got = read(kafka_broker, topic_name, 6, unique_name("g"))
    producer.close()
    by_key = {m.key(): m for m in got}
    assert sorted(by_key, key=lambda k: (k is None, k)) == [b"a", b"b", b"c", b"d", b"e", None]
    assert [
        (by_key[k].partition(), by_key[k].value(), by_key[k].timestamp()[1])
        for k in (b"a", b"b", b"c", b"d")
    ] == [(0, b"1", 10), (1, b"2", 11), (0, b"3", 12), (1, b"4", 13)]

    def origin(key: bytes | None) -> tuple[str, int, int, int] | None:
        p = from_headers(by_key[key].headers())
        return None if p is None else (p.topic, p.partition, p.offset, p.output_index)

    assert [origin(k) for k in (b"a", b"b", b"c", b"d", b"e")] == [
        ("in-a", 0, 7, 0),
        ("in-b", 1, 7, 0),
        ("in-a", 0, 7, 1),
        ("in-a", 0, 8, 0),
        ("in-a", 0, 7, 2),
    ]
    assert [k for k, _ in by_key[b"b"].headers()] == ["trace", HEADER]
    assert by_key[None].headers() is None and by_key[None].value() is None


def test_a_slice_record_the_client_refuses_is_reported_as_the_current_record(
    kafka_broker: EmbeddedBroker, topic_name: str
) -> None:
    """A record of a sink's slice that the client refuses is reported, and is the task's
    current record while it is (so a dead-letter copy carries its provenance); the rest of the
    slice is still written."""
    Admin(kafka_broker.bootstrap_servers).create_topic(topic_name, 2)
    producer = Producer(kafka_broker.bootstrap_servers)
    rt: Any = RuntimeTaskStandIn(producer)
    collector = Collector(rt)
    refused = Record("b", 2, 11, (), "in", 0, 6)
    records = [Record("a", 1, 10, (), "in", 0, 5), refused, Record("c", 3, 12, (), "in", 0, 7)]
    collector.send_many(topic_name, records, [b"a", b"b", b"c"], [b"1", b"2", b"3"], [0, 9, 1])
    assert rt.task.reported == [(ProduceError, f"producing to topic {topic_name!r}")]
    assert rt.task.current_at_report == [refused]
    assert collector.produced == {topic_name: 2}
    producer.close()
