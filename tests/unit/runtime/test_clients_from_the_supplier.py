"""Every client the runtime uses comes from the app's supplier: global tables too, and the
settings each client gets are its role's part of the one `kafka` dict."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.mock_runtime import SRC, running

from kstream.dsl import StreamBuilder
from kstream.kafka.roles import client_config
from kstream.testing import MockCluster, MockProducer

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
