"""The Streams group protocol client against Apache Kafka (kstream.kafka.streams_group).

One member of a one-sub-topology app (a source topic of 4 partitions, one store changelog)
joins a streams group: the coordinator creates the changelog and hands the member all four
tasks; StreamsGroupDescribe shows it; a transactional producer commits offsets with the
member's group metadata (`group_metadata`) and a plain consumer reads them back, as does an
OffsetCommit v9 of the member's; after the member leaves, its metadata is refused
(UNKNOWN_MEMBER_ID). Streams groups need a broker that offers them (Apache Kafka 4.2 and later,
with `streams.version` finalized): on an older broker (the compatibility lanes) the tests skip
by their `kafka_feature` mark; a newer one that does not offer them skips too, naming its
version (a failure under CI=true: the reference broker must offer them).

The member heartbeats faster than the broker asks (the coordinator does not mind): on a broker
with the default `group.streams.*` floors (heartbeat 5 s, initial rebalance delay 3 s) the
test still settles in seconds; the test brokers lower them (kstream.testing.kafka).
`KSTREAM_TEST_BOOTSTRAP` runs the tests against a broker they did not start.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support import kafka_features

from kstream.kafka.admin import Admin
from kstream.kafka.errors import TransactionAbortableError
from kstream.kafka.producer import Producer
from kstream.kafka.streams_group import (
    HeartbeatRequest,
    HeartbeatResponse,
    StreamsGroupClient,
    StreamsGroupError,
    StreamsTopology,
    Subtopology,
    TopicInfo,
    group_metadata,
)
from kstream.testing.kafka import KafkaCluster


def _client_or_skip(bootstrap: str, kafka: dict[str, str] | None = None) -> StreamsGroupClient:
    client = StreamsGroupClient(bootstrap, kafka, request_timeout_s=30)
    if not client.supports_streams_groups():
        client.close()
        pytest.skip(
            f"the test broker (Apache Kafka {kafka_features.broker_version() or '?'}) does not "
            "offer Streams groups (StreamsGroupHeartbeat and streams.version >= 1)"
        )
    return client


@pytest.fixture
def client(bootstrap_servers: str) -> Iterator[StreamsGroupClient]:
    c = _client_or_skip(bootstrap_servers)
    yield c
    c.close()


class Member:
    """A streams member that owns whatever it is given at once (it has no tasks to move)."""

    def __init__(self, client: StreamsGroupClient, group: str, topology: StreamsTopology) -> None:
        self.client, self.group, self.topology = client, group, topology
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.active: dict[str, list[int]] = {}
        self.report = False
        self.last: HeartbeatResponse | None = None

    def heartbeat(self) -> HeartbeatResponse:
        if self.epoch == 0:
            request = HeartbeatRequest(
                self.group,
                self.member_id,
                0,
                rebalance_timeout_ms=30_000,
                topology=self.topology,
                process_id=str(uuid.uuid4()),
            )
        elif self.report:
            request = HeartbeatRequest(
                self.group,
                self.member_id,
                self.epoch,
                active_tasks=self.active,
                standby_tasks={},
                warmup_tasks={},
            )
        else:
            request = HeartbeatRequest(self.group, self.member_id, self.epoch)
        r = self.last = self.client.heartbeat(request)
        assert r.error_code == 0, (r.error_name, r.error_message)
        self.epoch, self.report = r.member_epoch, False
        if r.active_tasks is not None:
            self.active, self.report = r.active_tasks, True
        return r

    def until(self, what: str, done: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not after {timeout}s; last answer {self.last}")
            self.heartbeat()
            time.sleep(0.1)


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [tp.offset for tp in tps]
    finally:
        c.close()


@pytest.mark.kafka_feature("streams_group_protocol")
def test_a_member_joins_owns_its_tasks_commits_and_leaves(
    client: StreamsGroupClient, bootstrap_servers: str, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("sg")
    source, changelog = f"{group}-input", f"{group}-counts-changelog"
    admin = Admin(bootstrap_servers)
    admin.create_topic(source, 4)
    topology = StreamsTopology(
        0,
        (
            Subtopology(
                "0",
                source_topics=(source,),
                state_changelog_topics=(
                    TopicInfo(changelog, configs={"cleanup.policy": "compact"}),
                ),
            ),
        ),
    )
    member = Member(client, group, topology)

    # join: the coordinator creates the changelog and assigns the four tasks
    member.heartbeat()
    assert member.epoch > 0
    member.until(
        "all four tasks acknowledged",
        lambda: member.active == {"0": [0, 1, 2, 3]} and not member.report,
    )
    described = admin.describe_topic(changelog)
    assert described.partitions == 4 and described.config.get("cleanup.policy") == "compact"

    d = client.describe(group)
    assert (d["group_id"], d["state"], d["group_epoch"]) == (group, "Stable", member.epoch)
    (m,) = d["members"]
    assert (m["member_id"], m["member_epoch"]) == (member.member_id, member.epoch)
    assert m["assignment"]["active"] == {"0": [0, 1, 2, 3]}
    (sub,) = d["topology"]["subtopologies"]
    assert [(t["name"], t["partitions"]) for t in sub["state_changelog_topics"]] == [(changelog, 4)]

    # exactly-once: the member's id and epoch in the transaction's group metadata
    producer = Producer(bootstrap_servers, transactional_id=f"{group}-txn")
    try:
        meta = group_metadata(group, member.member_id, member.epoch)
        producer.begin()
        producer.send_offsets([TopicPartition(source, p, 10 + p) for p in range(4)], meta)
        producer.commit()
        assert _committed(bootstrap_servers, group, source, 4) == [10, 11, 12, 13]

        # at-least-once: OffsetCommit v9 as the member
        client.offset_commit(group, member.member_id, member.epoch, {(source, 0): 20})
        assert _committed(bootstrap_servers, group, source, 1) == [20]
        with pytest.raises(StreamsGroupError) as refused:
            client.offset_commit(group, "no-such-member", member.epoch, {(source, 0): 21})
        assert refused.value.name == "UNKNOWN_MEMBER_ID"

        # leave; the departed member's metadata is refused, the offsets stay
        left = client.heartbeat(HeartbeatRequest(group, member.member_id, -1))
        assert (left.error_name, left.member_epoch) == ("NONE", -1)
        assert client.describe(group)["members"] == []
        producer.begin()
        with pytest.raises(TransactionAbortableError) as fenced:
            producer.send_offsets([TopicPartition(source, 0, 30)], meta)
            producer.commit()
        assert fenced.value.code == "UNKNOWN_MEMBER_ID"
        producer.abort()
        assert _committed(bootstrap_servers, group, source, 1) == [20]
    finally:
        producer.close()
        admin.close()


@pytest.mark.kafka_feature("streams_group_protocol")
def test_describing_a_group_that_is_not_there(
    client: StreamsGroupClient, unique_name: Callable[[str], str]
) -> None:
    with pytest.raises(StreamsGroupError) as e:
        client.describe(unique_name("none"))
    assert e.value.name == "GROUP_ID_NOT_FOUND" and not e.value.retriable


# -- the settings carried over: SASL/SCRAM against Kafka's own SASL listener

USER, PASSWORD = "carol", "carol-secret"


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[KafkaCluster]:
    overrides = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.client.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }
    with KafkaCluster(client_listener="SASL_PLAINTEXT", overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upsert = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        end = time.monotonic() + 30  # until the broker's copy of the metadata has the user
        while True:
            try:
                found = admin.describe_user_scram_credentials([USER])[USER].result(timeout=30)
                if found.scram_credential_infos:
                    break
            except KafkaException:
                pass
            assert time.monotonic() < end, "the broker did not learn the SCRAM user"
            time.sleep(0.1)
        yield cluster


def _scram(password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": password,
    }


def test_scram_settings_reach_the_broker(sasl_broker: KafkaCluster) -> None:
    bootstrap = sasl_broker.client_bootstrap_servers
    with StreamsGroupClient(bootstrap, _scram(PASSWORD), request_timeout_s=30) as c:
        supported = c.supports_streams_groups()  # ApiVersions over the SASL listener
        if supported:
            response = c.heartbeat(HeartbeatRequest(f"sasl-{uuid.uuid4().hex[:8]}", "m", -1))
            # a member the group never had: the coordinator answered over SASL
            assert response.error_name in ("UNKNOWN_MEMBER_ID", "GROUP_ID_NOT_FOUND", "NONE")

    # Kafka answers a refused authentication and closes the connection a moment later
    # (connection.failed.authentication.delay.ms, 100 ms). kafka-python 3.0.12 drops an answer
    # that it reads together with the close: then all it sees is a dropped connection, which
    # it retries until the timeout. Either way the call fails within the timeout (on a 4.1.2
    # broker the refusal itself took 8.7 s to come through once); when the answer got through,
    # naming the refusal, as not retriable.
    began = time.monotonic()
    wrong = StreamsGroupClient(bootstrap, _scram("wrong"), request_timeout_s=10)
    with wrong, pytest.raises(StreamsGroupError) as e:
        wrong.supports_streams_groups()
    waited = time.monotonic() - began
    if e.value.name == "SASL_AUTHENTICATION_FAILED":
        assert not e.value.retriable and waited < 20, (waited, str(e.value))
        assert "Authentication failed" in str(e.value)
    else:
        assert e.value.retriable and "socket disconnected" in str(e.value), str(e.value)
        assert waited < 20
