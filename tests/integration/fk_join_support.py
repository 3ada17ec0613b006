"""What the foreign-key join tests on the broker share: the app, and a reader for its output.

The app joins a table of orders with a table of customers on the order's customer id
(`"<order value>|<customer id>"`, the part after the last `|`), inner, with the joiner
`"<order value>+<customer value>"`: from one output value the test can tell which order value
and which customer value were joined, and so whether the order really had that customer then.

The reader is a plain confluent-kafka consumer (no kstream code), read_committed, that assigns
every partition of its topics from the beginning and keeps every record it is given (no
deduplication), with keys and values decoded as UTF-8 strings.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from kstream.dsl import StreamBuilder


def customer_of(order_value: str) -> str:
    """The foreign key of an order value: the part after its last `|`."""
    return order_value.rsplit("|", 1)[1]


def build(orders: str, customers: str, out: str, delay: float = 0.0) -> StreamBuilder:
    """`orders.join(customers, customer_of, "<order>+<customer>")` to `out`; `delay` seconds
    of work per order update (so that a kill lands mid-stream)."""

    def extract(order_value: str) -> str:
        if delay:
            time.sleep(delay)
        return customer_of(order_value)

    b = StreamBuilder()
    left = b.table(orders, "string", "string", store="orders")
    right = b.table(customers, "string", "string", store="customers")
    joined = left.join(right, extract, lambda o, c: f"{o}+{c}", materialized="joined")
    joined.to_stream().to(out, "string", "string")
    return b


@dataclass(frozen=True)
class Out:
    """One output record as read."""

    partition: int
    offset: int
    key: str
    value: str | None
    timestamp: int


class StringReader:
    """Reads every partition of `topic` from the beginning, read_committed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"fk-join-reader-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
            }
        )
        deadline = time.monotonic() + 30
        while True:
            md = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
            if md is not None and md.error is None and md.partitions:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {topic!r} has no partitions")
            time.sleep(0.2)
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(md.partitions)]
        )
        self.records: list[Out] = []
        self.errors: list[Any] = []

    def poll(self, timeout: float = 0.2) -> None:
        for msg in self.consumer.consume(1000, timeout):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.errors.append(err)
                continue
            key, value = msg.key(), msg.value()
            self.records.append(
                Out(
                    msg.partition() or 0,
                    msg.offset() or 0,
                    key.decode() if key is not None else "",
                    None if value is None else value.decode(),
                    msg.timestamp()[1],
                )
            )

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if check():
                return
        raise AssertionError(f"timed out waiting for {what}: read {self.records[-20:]}")

    def settle(self, quiet: float = 1.0) -> None:
        """Read until nothing arrives for `quiet` seconds (anything emitted late shows up)."""
        end = time.monotonic() + quiet
        while time.monotonic() < end:
            n = len(self.records)
            self.poll()
            if len(self.records) != n:
                end = time.monotonic() + quiet

    def latest(self) -> dict[str, str | None]:
        """The last value read per key (a tombstone as None)."""
        return {r.key: r.value for r in self.records}

    def close(self) -> None:
        self.consumer.close()
