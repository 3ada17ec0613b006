"""The Streams rebalance protocol (KIP-1071) over Apache Kafka's own TLS and SASL listeners.

The Streams group's RPCs go through kstream's protocol client (kafka-python, beside
confluent-kafka: kstream.kafka.protocol_client), which must reach the broker the way the app's
data clients do, with the app's own security settings. Each run starts a broker whose only
listener for clients is TLS (`SSL`), or SCRAM-SHA-512 over TLS (`SASL_SSL`), its key store a
PEM file signed by a CA the test makes; the app is given that listener's address and nothing
else, with `rebalance_protocol="auto"` (the default), which picks `streams` on a broker that
offers it (the start-up probe, the heartbeats and the commits all through the secured
listener). Checked: the app ran under `streams`, its member joined the group and heartbeats,
the group's coordinator (asked over the same listener) lists it with every task, and a plain
confluent-kafka read_committed consumer, over the same listener, reads every running count
once (per key 1..n: nothing missing, repeated or wrong).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from support import running_counts
from support.waiting import wait_for_app
from test_kafka_sasl import create_scram_user
from test_kafka_ssl import make_ca, make_server_cert

from kstream.kafka import Admin, Producer
from kstream.kafka.streams_group import StreamsGroupClient
from kstream.runtime import App
from kstream.testing.kafka import KafkaCluster

pytestmark = pytest.mark.kafka_feature("streams_group_protocol")

PARTITIONS = 2
RECORDS = 200  # over running_counts.KEYS keys: each key counts 1..10
USER, PASSWORD = "streams-app", "streams-app-secret"


@pytest.fixture(scope="module", params=["SSL", "SASL_SSL"])
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """(the secured listener's address, the app's `kafka` security settings for it)."""
    protocol = str(request.param)
    d = tmp_path_factory.mktemp(protocol.lower())
    make_ca(d, "ca")
    make_server_cert(d, "ca")
    keystore = d / "server-keystore.pem"
    keystore.write_text((d / "server.key").read_text() + (d / "server.pem").read_text())
    overrides = {
        "listener.name.client.ssl.keystore.type": "PEM",
        "listener.name.client.ssl.keystore.location": str(keystore),
    }
    kafka = {"security.protocol": protocol, "ssl.ca.location": str(d / "ca.pem")}
    if protocol == "SASL_SSL":
        overrides["sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        overrides["listener.name.client.scram-sha-512.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
        kafka.update(
            {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}
        )
    with KafkaCluster(client_listener=protocol, overrides=overrides) as cluster:
        if protocol == "SASL_SSL":
            # through the PLAINTEXT listener, which the app is never given
            create_scram_user(cluster.bootstrap_servers, USER, PASSWORD)
        yield cluster.client_bootstrap_servers, kafka


def _read_counts(bs: str, kafka: dict[str, str], topic: str) -> dict[str, list[int]]:
    """Every committed record of `topic` up to its end, read by a plain confluent-kafka
    read_committed consumer with `kafka`'s security settings: each key's counts in order."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"plain-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            **kafka,
        }
    )
    seen: dict[str, list[int]] = {}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        ended: set[int] = set()
        deadline = time.monotonic() + 60
        while len(ended) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: not read to its end in 60 s"
            for m in c.consume(500, 0.5):
                err = m.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    ended.add(m.partition())
                    continue
                assert err is None, err
                key, value = m.key(), m.value()
                assert key is not None and value is not None
                seen.setdefault(key.decode(), []).append(int.from_bytes(value, "big", signed=True))
    finally:
        c.close()
    return seen


@pytest.mark.timeout(240)
def test_an_app_runs_the_streams_protocol_through_the_secured_listener(
    secured: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    bs, kafka = secured
    tag = uuid.uuid4().hex[:8]
    inp, out, app_id = f"sec-in-{tag}", f"sec-out-{tag}", f"sec-app-{tag}"
    with Admin(bs, kafka=kafka) as admin:
        for topic in (inp, out):
            admin.create_topic(topic, PARTITIONS)
    with Producer(bs, kafka=kafka) as p:
        for i in range(RECORDS):
            p.produce(inp, b"v", f"k{i % running_counts.KEYS}".encode())
        p.flush()
    app = App(
        running_counts.topology(inp, out),
        app_id,
        bs,
        "exactly_once_v2",
        {"state_dir": str(tmp_path / "state"), "rebalance_protocol": "auto", "kafka": kafka},
    )
    expected = {
        f"k{k}": list(range(1, RECORDS // running_counts.KEYS + 1))
        for k in range(running_counts.KEYS)
    }
    counted: dict[str, list[int]] = {}

    def all_counted() -> bool:
        nonlocal counted
        counted = _read_counts(bs, kafka, out)
        return sum(len(v) for v in counted.values()) >= RECORDS

    app.start()
    try:
        wait_for_app(f"{RECORDS} outputs", all_counted, app, 120, 0.5)
        assert app.config.rebalance_protocol == "streams"
        stream = app._stream
        assert stream is not None
        member: Any = stream.consumer.member  # type: ignore[attr-defined]
        assert member.heartbeats > 0 and member.joins >= 1
        with StreamsGroupClient(bs, kafka) as client:
            described = client.describe(app_id)
        (listed,) = described["members"]
        assert listed["member_id"] == member.member_id
        assert listed["process_id"] == member.process_id
        assert listed["assignment"]["active"] == {"0": list(range(PARTITIONS))}, listed
    finally:
        app.close()
    assert app.error is None
    wrong = {k: v for k, v in counted.items() if v != expected.get(k)}
    assert not wrong and set(counted) == set(expected), (
        f"{kafka['security.protocol']}: counts not 1..n for {len(wrong)} keys: "
        f"{dict(list(wrong.items())[:3])}"
    )
