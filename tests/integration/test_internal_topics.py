"""Internal topics on Apache Kafka behave as Kafka Streams' do: their configs, compaction of a
key-value changelog (and a restore from the compacted log), and the purge of repartition
topics with DeleteRecords after commits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from support.groups import fast_group

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import SessionWindows, TimeWindows
from kstream.kafka.admin import Admin, TopicSpec
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState

KEYS = ("a", "b", "c", "d")


@pytest.fixture
def kafka(kafka_broker: Any) -> str:
    """The shared broker's address; these tests are about Apache Kafka's log cleaner and
    DeleteRecords, which the embedded Tansu broker does not have."""
    if isinstance(kafka_broker, EmbeddedBroker):
        pytest.skip("compaction, retention and DeleteRecords: Apache Kafka only")
    return str(kafka_broker.bootstrap_servers)


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _processed(app: App, n: int) -> Callable[[], bool]:
    """Whether `app` has processed `n` records (input and repartitioned ones) yet."""
    return lambda: app.processed >= n


@contextmanager
def _started(app: App) -> Iterator[App]:
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=30), app.error
        yield app
    finally:
        app.close(timeout=30)


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    with Producer(bootstrap) as p:
        for key, value in records:
            p.produce(topic, value.encode(), key.encode())
        p.flush()


def _data_records(bootstrap: str, topic: str) -> int:
    """The records a read_committed reader finds in partition 0 of `topic` (what compaction
    left), read by a plain confluent-kafka consumer."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        n = 0
        while True:
            msg = c.poll(10)
            assert msg is not None, f"no end of partition of {topic} within 10 s"
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                return n
            n += 1
    finally:
        c.close()


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex}"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        return int(low), int(high)
    finally:
        c.close()


def test_internal_topics_are_created_with_kafka_streams_configs(
    kafka: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, app_id = unique_name("events"), unique_name("app")
    admin = Admin(kafka)
    admin.create_topic(src, 2)
    b = StreamBuilder()
    events = b.stream(src, key_serde="string", value_serde="string")
    events.group_by(lambda _k, v: v, key_serde="string").count(store="counts")
    per_key = events.group_by_key()
    per_key.windowed_by(TimeWindows.of("1m", grace="30s")).count(store="windows")
    per_key.windowed_by(SessionWindows.with_gap("5m")).count(store="sessions")
    config = {"state_dir": str(tmp_path), "windowstore_changelog_additional_retention": "1h"}
    app = App(b, app_id, kafka, config=fast_group(config))
    assert app.config.replication_factor == -1  # the broker's default.replication.factor
    with _started(app):  # the topics exist once start() returns
        pass

    changelog = {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}
    windowed = {"cleanup.policy": "compact,delete", "message.timestamp.type": "CreateTime"}
    expected = {
        f"{app_id}-counts-repartition": {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "segment.bytes": str(50 * 1024 * 1024),
            "message.timestamp.type": "CreateTime",
        },
        f"{app_id}-counts-changelog": changelog,
        # the stores' retention (size + grace, gap + grace) plus the additional hour
        f"{app_id}-windows-changelog": {**windowed, "retention.ms": str(90_000 + 3_600_000)},
        f"{app_id}-sessions-changelog": {**windowed, "retention.ms": str(300_000 + 3_600_000)},
    }
    described = admin.describe_topics(expected)
    for name, want in expected.items():
        have = described[name].config
        assert {k: have.get(k) for k in want} == want, name
        assert described[name].partitions == 2

    # replication factor -1 reached the broker as "its default", not as a count
    md = admin.raw.list_topics(timeout=10)
    broker = ConfigResource(ConfigResource.Type.BROKER, str(next(iter(md.brokers))))
    default_rf = admin.raw.describe_configs([broker])[broker].result(10)
    rf = int(default_rf["default.replication.factor"].value)
    for name in expected:
        assert {len(p.replicas) for p in md.topics[name].partitions.values()} == {rf}


def test_a_compacted_key_value_changelog_restores_the_same_state(
    kafka: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app_id = unique_name("clicks"), unique_name("counts"), unique_name("app")
    admin = Admin(kafka)
    admin.create_topic(src, 1)
    admin.create_topic(dst, 1)
    changelog = f"{app_id}-counts-changelog"

    def topology() -> StreamBuilder:
        b = StreamBuilder()
        b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
            store=stores.key_value("counts")
        ).to_stream().to(dst, key_serde="string", value_serde="long")
        return b

    waves, per_key = 12, 5
    first = App(topology(), app_id, kafka, config=fast_group({"state_dir": str(tmp_path / "1")}))
    with _started(first) as app:
        # every wave is committed before the next (commit_interval 100 ms), so each writes
        # each key's count to the changelog again: few keys, many overwrites
        for wave in range(waves):
            _produce(kafka, src, [(k, f"{wave}.{i}") for k in KEYS for i in range(per_key)])
            done = (wave + 1) * per_key * len(KEYS)
            _wait(_processed(app, done), 15, f"{done} records processed")
            time.sleep(0.25)
        expected = {k: waves * per_key for k in KEYS}
        _wait(lambda: dict(app.store("counts").all()) == expected, 10, "the final counts")
        # all in the active segment, which the cleaner leaves alone
        written = _data_records(kafka, changelog)
        assert written >= waves * len(KEYS)
        # Make the log cleaner compact the changelog within seconds: a segment rolls once it
        # is 100 ms old, any dirty share is enough, and nothing has to age first.
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            changelog,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in {
                    "segment.ms": "100",
                    "min.cleanable.dirty.ratio": "0.01",
                    "delete.retention.ms": "0",
                    "min.compaction.lag.ms": "0",
                }.items()
            ],
        )
        admin.raw.incremental_alter_configs([resource])[resource].result(10)
        time.sleep(0.5)  # the new configs reach the log
        # one more record: its changelog record rolls the old segment, which is then cleaned
        _produce(kafka, src, [("a", "last")])
        expected["a"] += 1
        _wait(lambda: dict(app.store("counts").all()) == expected, 10, "the last count")
        _wait(
            lambda: _data_records(kafka, changelog) <= written // 2,
            15,
            f"the cleaner to compact {changelog} ({written} records)",
        )
        before = dict(app.store("counts").all())
    assert before == expected
    compacted = _data_records(kafka, changelog)
    assert len(KEYS) <= compacted <= written // 2

    # a new instance with an empty state directory restores the store from the compacted log
    second = App(topology(), app_id, kafka, config=fast_group({"state_dir": str(tmp_path / "2")}))
    with _started(second) as app:
        _wait(lambda: app.ready, 15, "the restore")
        assert dict(app.store("counts").all()) == before


def test_repartition_topics_are_purged_up_to_the_committed_offsets(
    kafka: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app_id = unique_name("lines"), unique_name("words"), unique_name("app")
    admin = Admin(kafka)
    admin.create_topic(src, 1)
    admin.create_topic(dst, 1)
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").flat_map_values(str.split).group_by(
        lambda _k, w: w, key_serde="string"
    ).count(store="counts").to_stream().to(dst, key_serde="string", value_serde="long")
    repartition = f"{app_id}-counts-repartition"
    config = {"state_dir": str(tmp_path), "repartition_purge_interval": "200ms"}
    app = App(b, app_id, kafka, config=fast_group(config))
    with _started(app) as running:
        _produce(kafka, src, [(f"k{i}", "a b c") for i in range(50)])
        _wait(_processed(running, 200), 15, "the first lines and their words")
        _wait(lambda: _watermarks(kafka, repartition)[0] > 0, 10, f"a purge of {repartition}")
        low, high = _watermarks(kafka, repartition)
        assert 0 < low <= high
        _produce(kafka, src, [(f"k{i}", "d e") for i in range(50)])
        _wait(_processed(running, 350), 15, "the second lines and their words")
        _wait(
            lambda: _watermarks(kafka, repartition)[0] > low,
            10,
            f"the purge to follow the commits past offset {low}",
        )
        # everything below the start offset is gone: 250 words went through the topic
        low, high = _watermarks(kafka, repartition)
        assert _data_records(kafka, repartition) < 250
        assert running.error is None
        assert running.store("counts").get("a") == 50


def test_a_created_topic_is_served_with_leaders_when_create_returns(kafka: str) -> None:
    """Under KRaft the controller commits a topic before the broker serves it; `create_topics`
    returns only once the broker's metadata lists every partition with a leader, so a client
    started right after it finds the topic (a consumer subscribed in between skipped it)."""
    names = [f"served-{uuid.uuid4().hex}" for _ in range(3)]
    created = Admin(kafka).create_topics(TopicSpec(n, 4) for n in names)
    assert created == dict.fromkeys(names, True)
    fresh = AdminClient({"bootstrap.servers": kafka})
    topics = fresh.list_topics(timeout=10).topics
    for n in names:
        assert n in topics and topics[n].error is None, n
        parts = topics[n].partitions
        assert sorted(parts) == [0, 1, 2, 3] and all(p.leader >= 0 for p in parts.values()), n
    # and each leader answers for its partition (it says NOT_LEADER_OR_FOLLOWER a moment after
    # metadata names it)
    c = Consumer({"bootstrap.servers": kafka, "group.id": f"served-{uuid.uuid4().hex}"})
    try:
        for n in names:
            for p in range(4):
                assert c.get_watermark_offsets(TopicPartition(n, p), timeout=10) == (0, 0), n
    finally:
        c.close()
