"""SASL settings reach the broker, against Apache Kafka's own SASL: both paths.

The module starts its own broker with a CLIENT listener of protocol SASL_PLAINTEXT
(`KafkaCluster(client_listener="SASL_PLAINTEXT")`) offering SCRAM-SHA-512 and PLAIN. The SCRAM
user is created through the broker's PLAINTEXT listener (AlterUserScramCredentials: no
authorizer, so no credentials are needed there); the PLAIN user is in the listener's JAAS
configuration. With the right credentials kstream's producer and consumer work through the
SASL listener; with wrong ones they fail at once, naming the reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.roundtrip import produce_and_read_back

from kstream.kafka import Admin, Consumer, Producer
from kstream.kafka.errors import AuthenticationError
from kstream.testing.kafka import KafkaCluster

SCRAM_USER, SCRAM_PASSWORD = "alice", "alice-secret"
PLAIN_USER, PLAIN_PASSWORD = "bob", "bob-secret"


def create_scram_user(bootstrap_servers: str, user: str, password: str) -> None:
    """Upsert a SCRAM-SHA-512 credential, and wait until the broker knows it."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion(user, info, password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    # the controller has committed the credential; the broker authenticates from its own
    # copy of the metadata, which describes it once it has caught up
    end = time.monotonic() + 30
    while True:
        futures = admin.describe_user_scram_credentials([user])
        assert isinstance(futures, dict)
        try:
            if futures[user].result(timeout=30).scram_credential_infos:
                return
        except KafkaException:
            pass  # RESOURCE_NOT_FOUND until the broker has it
        if time.monotonic() > end:
            raise AssertionError(f"the broker did not learn the SCRAM user {user!r} in 30s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[KafkaCluster]:
    plain_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
    )
    overrides = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.client.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "listener.name.client.plain.sasl.jaas.config": plain_jaas,
    }
    with KafkaCluster(client_listener="SASL_PLAINTEXT", overrides=overrides) as cluster:
        create_scram_user(cluster.bootstrap_servers, SCRAM_USER, SCRAM_PASSWORD)
        yield cluster


def sasl(mechanism: str, username: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": password,
    }


@pytest.mark.parametrize(
    ("mechanism", "username", "password"),
    [("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD), ("PLAIN", PLAIN_USER, PLAIN_PASSWORD)],
)
def test_right_credentials_produce_and_consume(
    sasl_broker: KafkaCluster, topic_name: str, mechanism: str, username: str, password: str
) -> None:
    # the topic is made over PLAINTEXT: the SASL listener is only for the clients under test
    Admin(sasl_broker.bootstrap_servers).create_topic(topic_name, 2)
    bootstrap = sasl_broker.client_bootstrap_servers
    kafka = sasl(mechanism, username, password)
    assert produce_and_read_back(bootstrap, topic_name, kafka) == [b"v0", b"v1", b"v2", b"v3"]


# An hour of connect timeout: only failing at once on the SASL error finishes in time.
@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", [Producer, Consumer])
@pytest.mark.parametrize(
    ("username", "password"),
    [("mallory", "guess"), (SCRAM_USER, "wrong")],
    ids=["unknown-user", "wrong-password"],
)
def test_wrong_scram_credentials_fail_fast_with_the_reason(
    sasl_broker: KafkaCluster, client: type, username: str, password: str
) -> None:
    bootstrap = sasl_broker.client_bootstrap_servers
    kafka = sasl("SCRAM-SHA-512", username, password)
    with pytest.raises(AuthenticationError) as e:
        client(bootstrap, kafka=kafka, connect_timeout="1h")
    msg = str(e.value)
    assert msg.startswith(
        f"{client.__name__}: TLS/SASL handshake with Kafka at {bootstrap!r} "
        "failed: _AUTHENTICATION: "
    )
    # Kafka's reason, passed on by librdkafka (the same for an unknown user and a wrong
    # password, as Kafka tells clients nothing about which users exist)
    assert "SASL authentication error: Authentication failed during authentication due to " in msg
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in msg
    assert e.value.code == "_AUTHENTICATION"
