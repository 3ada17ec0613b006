"""`kstreamd demo`: a self-contained tour of the Kafka layer on the embedded broker.

It starts a broker (unless given one), produces JSON click events keyed by user for a while,
reads them back with a group consumer and prints what arrived where. It doubles as a smoke
test of a fresh installation: it exits non-zero if any event is missing.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.partitioner import default_partition
from kstream.kafka.producer import Producer
from kstream.serde import serde

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup", "/login")
USERS = tuple(f"user-{i:02d}" for i in range(20))


@dataclass
class DemoSummary:
    produced: int = 0
    consumed: int = 0
    misplaced: int = 0
    seconds: float = 0.0
    pages: Counter[str] = field(default_factory=Counter)
    partitions: Counter[int] = field(default_factory=Counter)
    users: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return self.produced > 0 and self.consumed == self.produced and self.misplaced == 0


@contextlib.contextmanager
def _bootstrap(bootstrap_servers: str | None, out: TextIO) -> Iterator[str]:
    if bootstrap_servers:
        yield bootstrap_servers
        return
    with EmbeddedBroker() as broker:
        print(f"embedded broker on {broker.bootstrap_servers} (log: {broker.log_path})", file=out)
        yield broker.bootstrap_servers


def run_demo(
    duration_s: float,
    *,
    rate: int = 500,
    partitions: int = 3,
    bootstrap_servers: str | None = None,
    topic: str = "clicks",
    out: TextIO,
    seed: int | None = None,
    connect_timeout_s: float = 10.0,
) -> DemoSummary:
    """Produce click events for `duration_s` seconds at about `rate`/s and consume them."""
    rng = random.Random(seed)
    keys, values = serde("string"), serde("json")
    summary = DemoSummary()
    with _bootstrap(bootstrap_servers, out) as bootstrap:
        timeout = connect_timeout_s * 1000
        admin = Admin(bootstrap, connect_timeout=timeout)
        topic = f"{topic}-{int(time.time() * 1000)}" if bootstrap_servers else topic
        admin.create_topic(topic, partitions, {"retention.ms": "-1"})
        producer = Producer(bootstrap, idempotent=True, connect_timeout=timeout)
        consumer = Consumer(bootstrap, group_id=f"{topic}-demo", connect_timeout=timeout)
        consumer.subscribe([topic])
        print(
            f"producing click events to {topic!r} ({partitions} partitions) for "
            f"{duration_s:g}s at ~{rate}/s ...",
            file=out,
            flush=True,
        )
        start = time.monotonic()
        end = start + duration_s
        next_report = start + 5
        while (now := time.monotonic()) < end:
            due = int((now - start) * rate) - summary.produced
            for _ in range(max(0, min(due, 5000))):
                user = rng.choice(USERS)
                event = {"user": user, "page": rng.choice(PAGES), "ms": rng.randint(5, 900)}
                producer.produce(topic, values.to_bytes(event), keys.to_bytes(user))
                summary.produced += 1
            producer.poll(0)
            _take(consumer, summary, partitions, timeout=0.05)
            if now >= next_report:
                print(
                    f"  {now - start:5.1f}s produced={summary.produced} "
                    f"consumed={summary.consumed}",
                    file=out,
                    flush=True,
                )
                next_report += 5
        producer.flush(30)
        drain_until = time.monotonic() + 30
        while summary.consumed < summary.produced and time.monotonic() < drain_until:
            _take(consumer, summary, partitions, timeout=0.2)
        summary.seconds = time.monotonic() - start
        consumer.commit()
        consumer.close()
    _print_summary(summary, topic, out)
    return summary


def _take(consumer: Consumer, summary: DemoSummary, partitions: int, timeout: float) -> None:
    keys, values = serde("string"), serde("json")
    for m in consumer.consume_batch(2000, timeout):
        key, partition = m.key(), m.partition() or 0
        event = values.from_bytes(m.value())
        summary.consumed += 1
        summary.pages[event["page"]] += 1
        summary.partitions[partition] += 1
        summary.users.add(keys.from_bytes(key))
        if key is None or default_partition(key, partitions) != partition:
            summary.misplaced += 1


def _print_summary(s: DemoSummary, topic: str, out: TextIO) -> None:
    print(f"\nsummary for topic {topic!r}", file=out)
    print(f"  produced  {s.produced}", file=out)
    print(f"  consumed  {s.consumed} in {s.seconds:.1f}s", file=out)
    print(f"  users     {len(s.users)}", file=out)
    print(
        "  by partition: " + ", ".join(f"{p}={n}" for p, n in sorted(s.partitions.items())),
        file=out,
    )
    print("  by page:", file=out)
    for page, n in s.pages.most_common():
        print(f"    {page:<10} {n}", file=out)
    if s.misplaced:
        print(f"  {s.misplaced} record(s) on a partition murmur2 did not choose", file=out)
    print("demo OK" if s.ok else "demo FAILED: not every event came back", file=out, flush=True)
