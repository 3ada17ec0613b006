"""The Streams group protocol client without a broker (kstream.kafka.streams_group): the group
metadata bytes librdkafka reads, the settings carried over to kafka-python and the ones refused,
and kstream's types to the messages' fields and back, through kafka-python's own encoding of
Kafka's message definitions."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from kstream.errors import ConfigError
from kstream.kafka import messages
from kstream.kafka.protocol_client import settings
from kstream.kafka.streams_group import (
    STATUS_NAMES,
    CopartitionGroup,
    HeartbeatRequest,
    StreamsGroupClient,
    StreamsGroupError,
    StreamsTopology,
    Subtopology,
    TopicInfo,
    commit_fields,
    describe_result,
    error_name,
    group_metadata,
    heartbeat_fields,
    heartbeat_response,
)
from kstream.runtime.rebalance import generation

BOOT = "127.0.0.1:9092"

# -- the group metadata of a transaction


class _Blob:
    """What `generation()` reads: an object whose consumer_group_metadata() is `blob`."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def consumer_group_metadata(self) -> bytes:
        return self.blob


def _consumer_metadata(conf: dict[str, Any]) -> bytes:
    # confluent-kafka's consumer builds its metadata without a broker: generation -1, no member
    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, **conf})
    try:
        blob = c.consumer_group_metadata()
    finally:
        c.close()
    assert isinstance(blob, bytes)
    return blob


def test_the_metadata_is_the_bytes_a_real_consumer_gives() -> None:
    assert group_metadata("orders-app", "", -1) == _consumer_metadata({"group.id": "orders-app"})
    static = _consumer_metadata({"group.id": "orders-app", "group.instance.id": "node-1"})
    assert group_metadata("orders-app", "", -1, "node-1") == static


def test_a_members_metadata_carries_its_epoch_and_id() -> None:
    blob = group_metadata("orders-app", "3f2c-member", 7)
    assert blob == (
        b"CGMDv2:" + (7).to_bytes(4, sys.byteorder) + b"orders-app\x003f2c-member\x00\x01"
    )
    # kstream's own reader of librdkafka's metadata (the classic protocol's generation)
    assert generation(_Blob(blob)) == 7
    assert generation(_Blob(group_metadata("g", "m", 123456, "inst"))) == 123456


@pytest.mark.parametrize("bad", ["app-é", "tab\there", "nul\0"])
def test_characters_librdkafka_refuses_are_refused_here(bad: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        group_metadata(bad, "m", 1)
    with pytest.raises(ValueError, match="member_id"):
        group_metadata("g", bad, 1)


# -- settings


def test_plaintext_settings() -> None:
    s = settings("PLAINTEXT://k1:9092, k2:9093", {"client.id": "app-1"})
    assert s == {
        "bootstrap_servers": ["k1:9092", "k2:9093"],
        "client_id": "app-1",
        "security_protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "scram-sha-512"])
def test_sasl_user_and_password(mechanism: str) -> None:
    kafka = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": "alice",
        "sasl.password": "secret",
        # TLS settings under a protocol without TLS are ignored, as librdkafka ignores them
        "ssl.keystore.password": "unused",
        "linger.ms": 5,  # not a security setting: the data clients' business
    }
    s = settings(BOOT, kafka)
    assert s["sasl_mechanism"] == mechanism.upper()
    assert (s["sasl_plain_username"], s["sasl_plain_password"]) == ("alice", "secret")
    assert "ssl_context" not in s


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate and its key (one serves as CA and as client certificate),
    and the key again, encrypted with the password "pw"."""
    d = tmp_path_factory.mktemp("pem")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=kstream-test",
    )  # fmt: skip
    openssl("pkey", "-in", "key.pem", "-aes256", "-passout", "pass:pw", "-out", "key-enc.pem")
    return d


def test_tls_settings_build_the_context(pem: Path) -> None:
    kafka = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "secret",
        "ssl.ca.location": str(pem / "cert.pem"),
        "ssl.certificate.location": str(pem / "cert.pem"),
        "ssl.key.location": str(pem / "key-enc.pem"),
        "ssl.key.password": "pw",
    }
    ctx = settings(BOOT, kafka)["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "kstream-test"),),)]

    off = {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}
    assert not settings(BOOT, off)["ssl_context"].check_hostname
    unverified = {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}
    assert settings(BOOT, unverified)["ssl_context"].verify_mode == ssl.CERT_NONE
    with pytest.raises(ConfigError, match=r"ssl\.certificate\.location"):
        settings(BOOT, {**kafka, "ssl.key.password": "wrong"})


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"security.protocol": "SSL", "ssl.keystore.location": "{cert}"}, "ssl.keystore.location"),
        ({"security.protocol": "SSL", "ssl.key.pem": "..."}, "ssl.key.pem"),
        ({"security.protocol": "SSL", "ssl.engine.id": "pkcs11"}, "ssl.engine.id"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
            },
            "sasl.oauthbearer.method",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
                "sasl.kerberos.service.name": "kafka",
            },
            "sasl.kerberos.service.name",
        ),
        # librdkafka's default mechanism, Kerberos
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "oauth_cb"),
    ],
)
def test_security_settings_that_cannot_be_carried_over_are_refused_by_name(
    pem: Path, extra: dict[str, str], key: str
) -> None:
    kafka = {k: v.replace("{cert}", str(pem / "cert.pem")) for k, v in extra.items()}
    with pytest.raises(ConfigError, match=f"kafka\\['{key}'\\]"):
        settings(BOOT, kafka)
    with pytest.raises(ConfigError, match=key):
        StreamsGroupClient(BOOT, kafka)


def test_oauthbearer_through_the_apps_token_callback() -> None:
    calls: list[Any] = []

    def oauth_cb(config: Any) -> tuple[str, float, str, dict[str, str]]:
        calls.append(config)
        return f"token-{len(calls)}", time.time() + 3600, "alice", {"logicalCluster": "lc-1"}

    kafka = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": "scope=kafka",
        "oauth_cb": oauth_cb,
    }
    provider = settings(BOOT, kafka)["sasl_oauth_token_provider"]
    assert (provider.token(), provider.token()) == ("token-1", "token-1")  # kept until expiry
    assert calls == ["scope=kafka"]
    assert provider.extensions() == {"logicalCluster": "lc-1"}


def test_the_client_checks_its_settings_before_connecting() -> None:
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        StreamsGroupClient("no-port-here")
    with pytest.raises(ConfigError, match="request_timeout_s"):
        StreamsGroupClient(BOOT, request_timeout_s=0)


def test_an_unreachable_cluster_raises_a_retriable_error_within_the_timeout() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = StreamsGroupClient(f"127.0.0.1:{port}", request_timeout_s=0.5)
    began = time.monotonic()
    with pytest.raises(StreamsGroupError) as e:
        client.heartbeat(HeartbeatRequest("g", "m", -1))
    assert time.monotonic() - began < 5
    assert e.value.retriable and e.value.name in ("NETWORK_EXCEPTION", "REQUEST_TIMED_OUT")
    assert f"127.0.0.1:{port}" in str(e.value)
    client.close()
    with pytest.raises(Exception, match="closed"):
        client.describe("g")


def test_kstream_does_not_import_kafka_python_until_a_client_is_made() -> None:
    code = (
        "import sys, kstream, kstream.kafka.streams_group as sg; "
        "assert not any(m == 'kafka' or m.startswith('kafka.') for m in sys.modules); "
        "sg.StreamsGroupClient('127.0.0.1:9092').close(); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# -- kstream's types <-> the messages' fields


def _topology() -> StreamsTopology:
    return StreamsTopology(
        epoch=0,
        subtopologies=(
            Subtopology(
                id="0",
                source_topics=("clicks",),
                repartition_sink_topics=("app-by-user-repartition",),
            ),
            Subtopology(
                id="1",
                source_topics=("users",),
                repartition_source_topics=(
                    TopicInfo("app-by-user-repartition", configs={"cleanup.policy": "delete"}),
                ),
                state_changelog_topics=(
                    TopicInfo(
                        "app-counts-changelog",
                        replication_factor=3,
                        configs={"cleanup.policy": "compact", "min.insync.replicas": "2"},
                    ),
                ),
                copartition_groups=(CopartitionGroup((0,), (0,)),),
            ),
        ),
    )


def test_a_join_carries_the_topology_and_owns_no_tasks() -> None:
    request = HeartbeatRequest(
        "app",
        "m-1",
        0,
        rebalance_timeout_ms=30_000,
        topology=_topology(),
        process_id="p-1",
        user_endpoint=("host-a", 8080),
        client_tags={"zone": "b", "rack": "r1"},
    )
    f = heartbeat_fields(request)
    # the broker wants empty task lists on a join, never null
    assert (f["active_tasks"], f["standby_tasks"], f["warmup_tasks"]) == ([], [], [])
    assert f["user_endpoint"] == {"host": "host-a", "port": 8080}
    assert f["client_tags"] == [{"key": "rack", "value": "r1"}, {"key": "zone", "value": "b"}]
    sub = f["topology"]["subtopologies"][1]
    assert sub["state_changelog_topics"] == [
        {
            "name": "app-counts-changelog",
            "partitions": 0,
            "replication_factor": 3,
            "topic_configs": [
                {"key": "cleanup.policy", "value": "compact"},
                {"key": "min.insync.replicas", "value": "2"},
            ],
        }
    ]
    assert sub["copartition_groups"] == [
        {"source_topics": [0], "source_topic_regex": [], "repartition_source_topics": [0]}
    ]
    # Kafka's definition takes every field (build refuses a name it does not have), and the
    # encoded request decodes to the same fields
    for version in (0, 1):
        wire = messages.build(messages.StreamsGroupHeartbeatRequest, f).encode(version=version)
        decoded = messages.StreamsGroupHeartbeatRequest.decode(wire, version=version)
        assert messages.fields(decoded) == f


def test_a_heartbeat_sends_owned_tasks_sorted_or_none() -> None:
    unchanged = heartbeat_fields(HeartbeatRequest("app", "m-1", 5))
    assert unchanged["active_tasks"] is None and unchanged["topology"] is None
    owned = heartbeat_fields(
        HeartbeatRequest(
            "app",
            "m-1",
            5,
            active_tasks={"1": [3, 0], "0": [2]},
            standby_tasks={},
            warmup_tasks={},
            task_offsets=[("1", 0, 120)],
        )
    )
    assert owned["active_tasks"] == [
        {"subtopology_id": "0", "partitions": [2]},
        {"subtopology_id": "1", "partitions": [0, 3]},
    ]
    assert owned["task_offsets"] == [{"subtopology_id": "1", "partition": 0, "offset": 120}]


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (HeartbeatRequest("a", "m", 0, rebalance_timeout_ms=1000), "needs the topology"),
        (HeartbeatRequest("a", "m", 0, topology=_topology()), "rebalance_timeout_ms"),
        (
            HeartbeatRequest(
                "a",
                "m",
                0,
                rebalance_timeout_ms=1000,
                topology=_topology(),
                active_tasks={"0": [1]},
                standby_tasks={},
                warmup_tasks={},
            ),
            "owning no tasks",
        ),
        (HeartbeatRequest("a", "m", 3, topology=_topology()), "only when joining"),
        (HeartbeatRequest("a", "m", 3, active_tasks={}), "sent together"),
        (
            HeartbeatRequest(
                "a",
                "m",
                0,
                rebalance_timeout_ms=1000,
                topology=StreamsTopology(
                    0, (Subtopology("0", ("t",), (), (), (TopicInfo("c", 4),)),)
                ),
            ),
            "derives a changelog",
        ),
    ],
)
def test_requests_the_broker_would_refuse_are_refused_here(
    request_: HeartbeatRequest, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        heartbeat_fields(request_)


def _encoded_response(version: int, **values: Any) -> dict[str, Any]:
    """`values` as the broker would send them: encoded and decoded by kafka-python."""
    base: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "member_id": "m-1",
        "member_epoch": 4,
        "heartbeat_interval_ms": 250,
        "task_offset_interval_ms": 60_000,
        "endpoint_information_epoch": 2,
    }
    base.update(values)
    cls = messages.StreamsGroupHeartbeatResponse
    wire = messages.build(cls, base).encode(version=version)
    return messages.fields(cls.decode(wire, version=version))


def test_a_response_with_a_target_statuses_and_endpoints() -> None:
    f = _encoded_response(
        1,
        acceptable_recovery_lag=10_000,
        status=[{"status_code": 5, "status_detail": "Assignment delayed"}],
        active_tasks=[{"subtopology_id": "0", "partitions": [3, 1]}],
        standby_tasks=[],
        warmup_tasks=[],
        partitions_by_user_endpoint=[
            # two members (threads) of one instance: one entry each
            {
                "user_endpoint": {"host": "a", "port": 8080},
                "active_partitions": [{"topic": "clicks", "partitions": [1]}],
                "standby_partitions": [],
            },
            {
                "user_endpoint": {"host": "a", "port": 8080},
                "active_partitions": [{"topic": "clicks", "partitions": [0]}],
                "standby_partitions": [{"topic": "clicks", "partitions": [2]}],
            },
        ],
    )
    r = heartbeat_response(f)
    assert (r.error_code, r.error_name, r.member_epoch, r.heartbeat_interval_ms) == (
        0,
        "NONE",
        4,
        250,
    )
    assert r.statuses == [(5, "Assignment delayed")] and r.status_names == ["ASSIGNMENT_DELAYED"]
    assert (r.active_tasks, r.standby_tasks, r.warmup_tasks) == ({"0": [1, 3]}, {}, {})
    assert r.acceptable_recovery_lag == 10_000 and r.endpoint_information_epoch == 2
    assert r.partitions_by_user_endpoint == {("a", 8080): ({"clicks": [0, 1]}, {"clicks": [2]})}


def test_an_unchanged_target_and_an_error_and_version_0() -> None:
    r = heartbeat_response(
        _encoded_response(
            0,
            error_code=110,
            error_message="fenced",
            acceptable_recovery_lag_legacy=5000,
            status=None,
        )
    )
    assert (r.error_name, r.error_message) == ("FENCED_MEMBER_EPOCH", "fenced")
    assert r.active_tasks is None and r.standby_tasks is None and r.warmup_tasks is None
    assert r.partitions_by_user_endpoint is None and r.statuses == []
    assert r.acceptable_recovery_lag == 5000


def test_describe_result() -> None:
    tasks = {"active_tasks": [{"subtopology_id": "0", "partitions": [0, 1]}]}
    assignment = {**tasks, "standby_tasks": [], "warmup_tasks": []}
    group = {
        "error_code": 0,
        "group_id": "app",
        "group_state": "Stable",
        "group_epoch": 4,
        "assignment_epoch": 4,
        "topology": {
            "epoch": 0,
            "subtopologies": [
                {
                    "subtopology_id": "0",
                    "source_topics": ["clicks"],
                    "repartition_sink_topics": [],
                    "state_changelog_topics": [
                        {
                            "name": "app-c-changelog",
                            "partitions": 2,
                            "replication_factor": 1,
                            "topic_configs": [{"key": "cleanup.policy", "value": "compact"}],
                        }
                    ],
                    "repartition_source_topics": [],
                }
            ],
        },
        "members": [
            {
                "member_id": "m-1",
                "member_epoch": 4,
                "client_id": "kstream",
                "client_host": "/127.0.0.1",
                "topology_epoch": 0,
                "process_id": "p-1",
                "user_endpoint": {"host": "a", "port": 8080},
                "client_tags": [],
                "task_offsets": [{"subtopology_id": "0", "partition": 0, "offset": 7}],
                "task_end_offsets": [],
                "assignment": assignment,
                "target_assignment": assignment,
                "is_classic": False,
            }
        ],
        "assignor_name": "sticky",
    }
    cls = messages.StreamsGroupDescribeResponse
    wire = messages.build(cls, {"throttle_time_ms": 0, "groups": [group]}).encode(version=1)
    d = describe_result(messages.fields(cls.decode(wire, version=1))["groups"][0])
    assert (d["state"], d["group_epoch"], d["assignment_epoch"], d["assignor"]) == (
        "Stable",
        4,
        4,
        "sticky",
    )
    changelog = d["topology"]["subtopologies"][0]["state_changelog_topics"][0]
    assert changelog == {
        "name": "app-c-changelog",
        "partitions": 2,
        "replication_factor": 1,
        "configs": {"cleanup.policy": "compact"},
    }
    (m,) = d["members"]
    assert m["assignment"] == {"active": {"0": [0, 1]}, "standby": {}, "warmup": {}}
    assert m["user_endpoint"] == ("a", 8080) and m["task_offsets"] == [("0", 0, 7)]
    assert m["instance_id"] is None and m["is_classic"] is False


def test_commit_fields_encode_as_offset_commit_v9() -> None:
    from kafka.protocol.consumer import OffsetCommitRequest

    f = commit_fields("app", "m-1", 4, {("b", 1): 10, ("a", 0): 5, ("b", 0): 7}, "inst-1")
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in f["topics"]] == [
        ("a", [0]),
        ("b", [0, 1]),
    ]
    request = messages.build(OffsetCommitRequest, f, min_version=9, max_version=9)
    decoded = OffsetCommitRequest.decode(request.encode(version=9), version=9)
    assert decoded.generation_id_or_member_epoch == 4 and decoded.group_instance_id == "inst-1"
    assert decoded.topics[1].partitions[1].committed_offset == 10


def test_error_names_and_the_error() -> None:
    assert [error_name(c) for c in (0, -1, 25, 110, 132)] == [
        "NONE",
        "UNKNOWN_SERVER_ERROR",
        "UNKNOWN_MEMBER_ID",
        "FENCED_MEMBER_EPOCH",
        "STREAMS_TOPOLOGY_FENCED",
    ]
    assert error_name(126) == "DUPLICATE_VOTER"  # beyond the table: kafka-python's name
    assert error_name(9999) == "ERROR_9999"
    e = StreamsGroupError("committing", error_code=25)
    assert (e.error_code, e.name, e.code, e.retriable) == (
        25,
        "UNKNOWN_MEMBER_ID",
        "UNKNOWN_MEMBER_ID",
        False,
    )
    assert str(e) == "committing: UNKNOWN_MEMBER_ID"
    assert StreamsGroupError("x", error_code=16).retriable
    assert STATUS_NAMES[1] == "MISSING_SOURCE_TOPICS" and STATUS_NAMES[6] == "MISSING_CLIENT_TAGS"
