"""The runtime's transactional producers get Kafka Streams' `transaction.timeout.ms` (10 s)
unless the app's `kafka` settings give one: the broker then aborts a dead instance's open
transaction, whose pending offsets hold up the task's new owner, after 10 s, not librdkafka's
60 s. Its other producers and the settings a user gives are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig
from kstream.runtime import App, AppState
from kstream.testing import MockCluster
from kstream.testing.supplier import MockClientSupplier


class RecordingSupplier(MockClientSupplier):
    """Mock clients, keeping the config of every producer asked for."""

    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(cluster)
        self.producer_configs: list[ClientConfig] = []

    def producer(self, config: ClientConfig) -> Producer:
        self.producer_configs.append(config)
        return super().producer(config)


def _transactional_settings(
    guarantee: str, kafka: dict[str, Any], tmp_path: Path
) -> list[dict[str, Any]]:
    cluster = MockCluster()
    for topic in ("in", "out"):
        cluster.create_topic(topic, 2)
    b = StreamBuilder()
    b.stream("in", "str", "str").map_values(str.upper).to("out", "str", "str")
    supplier = RecordingSupplier(cluster)
    config = {"state_dir": str(tmp_path), "kafka": kafka}
    app = App(b, "txn", "mock:9092", guarantee, config=config, client_supplier=supplier)
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=30)
    finally:
        app.close()
    return [dict(c.kafka) for c in supplier.producer_configs if c.transactional_id]


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_transactional_producers_default_to_kafka_streams_ten_seconds(
    guarantee: str, tmp_path: Path
) -> None:
    settings = _transactional_settings(guarantee, {"linger.ms": 7}, tmp_path)
    assert settings, "no transactional producer was made"
    for s in settings:
        assert s["transaction.timeout.ms"] == 10_000
        assert s["linger.ms"] == 7  # the app's settings are kept beside it


def test_a_transaction_timeout_the_user_gives_wins(tmp_path: Path) -> None:
    settings = _transactional_settings(
        "exactly_once_v2", {"transaction.timeout.ms": 30_000}, tmp_path
    )
    assert settings and all(s["transaction.timeout.ms"] == 30_000 for s in settings)
