"""Changelog records carry the time of what they log, as Kafka Streams writes them.

An app on the broker counts per key (a timestamped key-value store: the changelog record's time
is the aggregate's, the largest input time of the key) and keeps each key's last value in a
plain key-value store through a processor (the changelog record's time is the input record's).
A plain confluent-kafka consumer then reads both changelog topics (read_committed) and checks
every record's CreateTime.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from e2e.support import create_topics, produce
from support.groups import fast_group

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.records import Record
from kstream.runtime import App, AppState
from kstream.topology.processor import Processor, ProcessorContext


class KeepLast(Processor):
    def init(self, ctx: ProcessorContext) -> None:
        self.last = ctx.get_store("last")

    def process(self, record: Record) -> None:
        self.last.put(record.key, record.value)


def changelog(bootstrap: str, topic: str, expect: int) -> list[tuple[str, int]]:
    """(key, CreateTime) of `expect` records of the one-partition `topic`, read_committed."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[str, int]] = []
    end = time.monotonic() + 60
    try:
        while len(out) < expect and time.monotonic() < end:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    out.append((m.key().decode(), m.timestamp()[1]))
    finally:
        c.close()
    return out


def test_changelog_records_carry_the_times_of_the_writes(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Any
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = unique_name("in"), unique_name("out")
    app_id = unique_name("cltime")
    create_topics(bs, 1, inp, out)
    t = int(time.time() * 1000) - 60_000  # recent: within every retention
    # a: 3 records, the middle one the latest in time; b: one record
    produce(bs, inp, [("a", 1, t + 100), ("a", 2, t + 500), ("b", 3, t + 200), ("a", 4, t + 300)])
    b = StreamBuilder()
    s = b.stream(inp, "string", "long")
    s.group_by_key().count(store="counts").to_stream().to(out, "string", "long")
    s.process(KeepLast, [stores.key_value("last", key_serde="string", value_serde="long")])
    # a commit per record: every write is logged
    config = fast_group({"state_dir": str(tmp_path), "batch_max_records": 1, "commit_interval": 0})
    app = App(b, app_id, bs, config=config)
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, AppState.ERROR, timeout=120)
        deadline = time.monotonic() + 60
        while app.query("counts", "a") != 3 or app.query("counts", "b") != 1:
            assert time.monotonic() < deadline, "the app did not count the input"
            time.sleep(0.1)
    finally:
        app.close()
    counts = changelog(bs, f"{app_id}-counts-changelog", 4)
    last = changelog(bs, f"{app_id}-last-changelog", 4)
    # the count's time is the largest input time of its key so far
    assert counts == [("a", t + 100), ("a", t + 500), ("b", t + 200), ("a", t + 500)]
    # a plain store's record carries the time of the input record that wrote it
    assert last == [("a", t + 100), ("a", t + 500), ("b", t + 200), ("a", t + 300)]
