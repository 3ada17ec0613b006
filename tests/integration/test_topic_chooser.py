"""`to()` with a topic chooser on the native runtime against the broker: the chosen topics are
ones the app does not otherwise know (neither read nor written by name, so not counted at
start-up); the collector looks each up once in the producer's metadata, and the records land
on the partitions the partitioner picks from the real partition counts, committed
(exactly-once), read back with a plain confluent-kafka read_committed consumer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from support.groups import fast_group
from support.waiting import wait_for_app

from kstream.dsl import StreamBuilder
from kstream.kafka import Admin, EmbeddedBroker, Producer
from kstream.records import Record
from kstream.runtime import App, AppState


def _committed_reader(bootstrap: str, topics: dict[str, int]) -> Consumer:
    """A read_committed consumer assigned every partition of `topics` ({topic: partitions})
    from the beginning."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chooser-reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign(
        [
            TopicPartition(t, p, OFFSET_BEGINNING)
            for t, parts in topics.items()
            for p in range(parts)
        ]
    )
    return consumer


def test_a_chooser_writes_topics_the_app_does_not_otherwise_know(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    source, prefix = unique_name("orders"), unique_name("region")
    chosen = {f"{prefix}-eu": 3, f"{prefix}-us": 2}
    admin = Admin(bs)
    admin.create_topic(source, 1)
    for topic, parts in chosen.items():
        admin.create_topic(topic, parts)

    def choose(key: str, value: str, ctx: Record) -> str:
        return f"{prefix}-{value}"

    def last_partition(key: str, value: str, partitions: int) -> int:
        return partitions - 1  # the count the collector looked up, not a default

    b = StreamBuilder()
    b.stream(source, "string", "string").to(choose, "string", "string", last_partition)
    app = App(
        b,
        unique_name("app"),
        bs,
        "exactly_once_v2",
        config=fast_group({"state_dir": str(tmp_path), "commit_interval": 200}),
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        with Producer(bs) as p:
            for i, region in enumerate(["eu", "us", "eu"]):
                p.produce(source, region.encode(), f"o{i}".encode(), None, 1_000 + i)
            p.flush()
        reader = _committed_reader(bs, chosen)
        got: list[tuple[str | None, int | None, bytes | None, bytes | None, int]] = []

        def read() -> bool:
            for m in reader.consume(100, 0.2):
                if m.error() is None:
                    got.append((m.topic(), m.partition(), m.key(), m.value(), m.timestamp()[1]))
            return len(got) >= 3

        wait_for_app("the chosen topics' records", read, app, timeout=60)
        time.sleep(0.5)  # nothing more arrives
        read()
        reader.close()
    finally:
        app.close(timeout=30)
    assert sorted(got) == [
        (f"{prefix}-eu", 2, b"o0", b"eu", 1_000),
        (f"{prefix}-eu", 2, b"o2", b"eu", 1_002),
        (f"{prefix}-us", 1, b"o1", b"us", 1_001),
    ]
