"""Internal topics get Kafka Streams' configs: repartition topics delete (never by age) with
50 MiB segments, key-value changelogs compact, time-bounded stores' changelogs compact and
delete after the store's retention plus `windowstore_changelog_additional_retention`; all keep
the records' CreateTime. The app creates them with the configured replication factor."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.internal_topics import MAX_RETENTION_MS, changelog_config, repartition_config
from kstream.kafka.admin import Admin, TopicSpec
from kstream.kafka.supplier import ClientConfig
from kstream.runtime import App
from kstream.testing import MockCluster
from kstream.testing.supplier import MockAdmin, MockClientSupplier

DAY = 86_400_000
REPARTITION = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "segment.bytes": "52428800",
    "message.timestamp.type": "CreateTime",
}
KEY_VALUE = {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}


def windowed(retention_ms: int) -> dict[str, str]:
    return {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(retention_ms),
        "message.timestamp.type": "CreateTime",
    }


def test_the_configs_of_each_kind_of_internal_topic() -> None:
    assert repartition_config() == REPARTITION
    assert changelog_config(None) == KEY_VALUE
    assert changelog_config(60_000) == windowed(60_000 + DAY)
    assert changelog_config(60_000, additional_retention=0) == windowed(60_000)
    # past Kafka's largest retention it saturates, as Kafka Streams' Math.addExact fallback
    assert changelog_config(MAX_RETENTION_MS - 5, 10) == windowed(MAX_RETENTION_MS)
    # every call is a fresh dict: callers may add to it without changing the defaults
    repartition_config()["retention.ms"] = "1"
    assert repartition_config() == REPARTITION


def test_store_specs_build_their_changelog_configs() -> None:
    assert stores.key_value("kv").changelog_config() == KEY_VALUE
    w = stores.window("w", "1h", "5m")
    assert w.changelog_retention() == 3_600_000
    assert w.changelog_config() == windowed(3_600_000 + DAY)
    assert w.changelog_config(additional_retention=1_000) == windowed(3_601_000)
    assert stores.session("s", "10m").changelog_config(0) == windowed(600_000)
    assert stores.dedup("d", "2h").changelog_config() == windowed(7_200_000 + DAY)


def every_kind_of_store(src: str = "events") -> StreamBuilder:
    """A re-keyed count (repartition topic, key-value changelog), tumbling, sliding and
    session windowed counts and a dedup over one stream."""
    b = StreamBuilder()
    events = b.stream(src, key_serde="string", value_serde="string")
    events.group_by(lambda _k, v: v, key_serde="string").count(store="counts")
    per_key = events.group_by_key()
    per_key.windowed_by(TimeWindows.of("1m", grace="30s")).count(store="tumbling")
    per_key.windowed_by(SlidingWindows.of("10s")).count(store="sliding")
    per_key.windowed_by(SessionWindows.with_gap("5m", grace="1m")).count(store="sessions")
    events.deduplicate(within="10m", store="seen").to("deduplicated")
    return b


# each time-bounded store's retention: Kafka Streams' (size + grace, 2 * size + 1 + grace for
# sliding windows, gap + grace), and the dedup window
RETENTIONS = {
    "app-tumbling-changelog": 90_000,
    "app-sliding-changelog": 20_001,
    "app-sessions-changelog": 360_000,
    "app-seen-changelog": 600_000,
}
# key-value stores: the count, and the stream time each windowed aggregation keeps
KEY_VALUE_CHANGELOGS = [
    "app-counts-changelog",
    "app-tumbling-stream-time-changelog",
    "app-sliding-stream-time-changelog",
    "app-sessions-stream-time-changelog",
]


@pytest.mark.parametrize("additional", [DAY, 0, 3_600_000])
def test_compiled_internal_topics_take_the_additional_retention_when_created(
    additional: int,
) -> None:
    compiled = every_kind_of_store().build().compile("app")
    configs = {n: t.topic_config(additional) for n, t in compiled.internal_topics.items()}
    assert configs == {
        "app-counts-repartition": REPARTITION,
        **dict.fromkeys(KEY_VALUE_CHANGELOGS, KEY_VALUE),
        **{name: windowed(ms + additional) for name, ms in RETENTIONS.items()},
    }
    assert {n: t.retention for n, t in compiled.changelog_topics.items()} == {
        **dict.fromkeys(KEY_VALUE_CHANGELOGS),
        **RETENTIONS,
    }


class RecordingAdmin(MockAdmin):
    """A mock admin that keeps every topic spec the app asks for."""

    def __init__(self, cluster: MockCluster, specs: list[TopicSpec]) -> None:
        super().__init__(cluster)
        self.specs = specs

    def create_topics(self, specs: Iterable[TopicSpec]) -> dict[str, bool]:
        specs = list(specs)
        self.specs.extend(specs)
        return super().create_topics(specs)


class RecordingSupplier(MockClientSupplier):
    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(cluster)
        self.specs: list[TopicSpec] = []

    def admin(self, config: ClientConfig) -> Admin:
        return cast("Admin", RecordingAdmin(self.cluster, self.specs))


@pytest.mark.parametrize(
    ("config", "rf", "additional"),
    [
        ({}, -1, DAY),  # the broker's default.replication.factor; Kafka Streams' day
        (
            {"replication_factor": 3, "windowstore_changelog_additional_retention": "2h"},
            3,
            7_200_000,
        ),
    ],
)
def test_the_app_creates_its_internal_topics_with_the_configured_settings(
    tmp_path: Path, config: dict[str, Any], rf: int, additional: int
) -> None:
    cluster = MockCluster()
    cluster.create_topic("events", 4)
    cluster.create_topic("deduplicated", 4)
    supplier = RecordingSupplier(cluster)
    app = App(
        every_kind_of_store(),
        "app",
        "mock:9092",
        config={"state_dir": str(tmp_path), **config},
        client_supplier=supplier,
    )
    counts = app._create_topics()
    created = {s.name: s for s in supplier.specs}
    wanted = {
        "app-counts-repartition": REPARTITION,
        **dict.fromkeys(KEY_VALUE_CHANGELOGS, KEY_VALUE),
        **{name: windowed(ms + additional) for name, ms in RETENTIONS.items()},
    }
    for name, conf in wanted.items():
        assert dict(created[name].config) == conf, name
    # every topic the app creates for itself (the provenance marks' changelogs, when
    # broker_compat asks for them, included) uses the configured replication factor
    assert {s.replication_factor for s in supplier.specs} == {rf}
    assert all(counts[name] == 4 for name in wanted)
