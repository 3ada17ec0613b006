"""Every client the runtime uses comes from the app's supplier: global tables too, and the
settings each client gets are its role's part of the one `kafka` dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.mock_runtime import DST, SRC, running

from kstream.dsl import StreamBuilder
from kstream.kafka.producer import Producer
from kstream.kafka.roles import client_config
from kstream.kafka.supplier import ClientConfig
from kstream.runtime import App
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

REGIONS, OUT = "regions", "enriched"


def _enrich_with_region() -> StreamBuilder:
    b = StreamBuilder()
    regions = b.global_table(REGIONS, key_serde="string", value_serde="string", store="regions")
    b.stream(SRC, key_serde="string", value_serde="string").join(
        regions, lambda _k, v: v, lambda v, region: f"{v}@{region}"
    ).to(OUT, key_serde="string", value_serde="string")
    return b


def test_a_global_table_is_read_through_the_supplier(tmp_path: Path) -> None:
    cluster = MockCluster()
    for topic in (SRC, REGIONS, OUT):
        cluster.create_topic(topic, 1)
    p = MockProducer(cluster)
    p.produce(REGIONS, b"eu", b"anna")
    p.produce(REGIONS, b"us", b"bob")
    p.produce(SRC, b"anna", b"c1")
    p.produce(SRC, b"bob", b"c2")
    p.produce(SRC, b"carl", b"c3")  # no region: an inner join drops it
    p.flush()
    with running(cluster, tmp_path, "exactly_once", topology=_enrich_with_region()) as r:
        r.turn(2)
        assert r.thread.globals is not None
        assert r.thread.globals.consumer in r.supplier.consumers
    assert [m.value() for m in cluster.messages(OUT)] == [b"anna@eu", b"bob@us"]


SETTINGS = {
    "security.protocol": "PLAINTEXT",
    "group.instance.id": "one",
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "fetch.wait.max.ms": 50,
    "acks": "all",
    "linger.ms": 1,
    "transactional.id": "x",
    "compression.type": "lz4",
}


PRODUCER_KEPT = ["security.protocol", "acks", "linger.ms", "transactional.id", "compression.type"]
CONSUMER_KEPT = [
    "security.protocol",
    "group.instance.id",
    "auto.offset.reset",
    "isolation.level",
    "fetch.wait.max.ms",
]


@pytest.mark.parametrize(
    ("role", "kept"),
    [("producer", PRODUCER_KEPT), ("consumer", CONSUMER_KEPT), ("admin", ["security.protocol"])],
)
def test_client_config_keeps_the_role_s_settings_and_the_shared_ones(
    role: str, kept: list[str]
) -> None:
    assert sorted(client_config(role, SETTINGS)) == sorted(kept)  # type: ignore[arg-type]


def test_client_config_rejects_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="producer, consumer or admin, got 'broker'"):
        client_config("broker", {})  # type: ignore[arg-type]


class _RecordingSupplier(MockClientSupplier):
    """Mock clients, remembering the settings each producer was asked for."""

    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(cluster)
        self.producer_configs: list[ClientConfig] = []

    def producer(self, config: ClientConfig) -> Producer:
        self.producer_configs.append(config)
        return super().producer(config)


def _producer_lingers(guarantee: str, tmp_path: Path, **config: Any) -> list[object]:
    cluster = MockCluster()
    cluster.create_topic(SRC, 2)
    cluster.create_topic(DST, 2)
    supplier = _RecordingSupplier(cluster)
    b = StreamBuilder()
    b.stream(SRC).to(DST)
    app = App(
        b,
        "lingers",
        "mock:9092",
        guarantee,
        config={"state_dir": str(tmp_path), **config},
        client_supplier=supplier,
    )
    thread = app._new_stream_thread(app._create_topics())
    thread.open()
    try:
        thread.run_once()
        return [c.kafka.get("linger.ms") for c in supplier.producer_configs]
    finally:
        thread.close()


def test_the_shared_transactional_producer_lingers_up_to_a_commit(tmp_path: Path) -> None:
    # exactly_once_v2: one producer for every task, its records invisible until the commit
    assert _producer_lingers("exactly_once_v2", tmp_path / "a", commit_interval=20) == [20]
    assert _producer_lingers("exactly_once_v2", tmp_path / "b") == [100]
    assert _producer_lingers("exactly_once_v2", tmp_path / "c", commit_interval=2000) == [100]
    assert _producer_lingers("exactly_once_v2", tmp_path / "d", commit_interval=1) == [5]
    # the user's setting (or its librdkafka alias) wins
    assert _producer_lingers("exactly_once_v2", tmp_path / "e", kafka={"linger.ms": 2}) == [2]
    assert _producer_lingers(
        "exactly_once_v2", tmp_path / "f", kafka={"queue.buffering.max.ms": 3}
    ) == [None]
    # per-task producers and at_least_once's keep the client default (kstream's 5 ms)
    assert set(_producer_lingers("exactly_once", tmp_path / "g")) == {None}
    assert set(_producer_lingers("at_least_once", tmp_path / "h")) == {None}
