"""The SSL client path end to end, against Apache Kafka's own TLS listener.

The module starts its own broker with a CLIENT listener of protocol SSL
(`KafkaCluster(client_listener="SSL")`) whose key store is a PEM file: the server key
(unencrypted PKCS#8, as `openssl req -nodes` writes it) and its certificate, signed by a CA
this test generates. Every connection the clients make to that listener goes through TLS.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.roundtrip import produce_and_read_back

from kstream.errors import BrokerUnreachableError, ConfigError
from kstream.kafka import Admin, Producer
from kstream.kafka.errors import AuthenticationError
from kstream.testing.kafka import KafkaCluster


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl(
        *f"req -x509 -newkey rsa:2048 -nodes -days 2 -keyout {name}.key -out {name}.pem".split(),
        *("-subj", f"/CN={name}"),
        cwd=d,
    )


def make_server_cert(d: Path, ca: str) -> None:
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(
        *["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr"],
        *("-subj", "/CN=127.0.0.1"),
        cwd=d,
    )
    openssl(
        *f"x509 -req -in server.csr -CA {ca}.pem -CAkey {ca}.key -CAcreateserial".split(),
        *["-days", "2", "-extfile", "san.ext", "-out", "server.pem"],
        cwd=d,
    )


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(the TLS listener's address, the directory of the CA files)."""
    d = tmp_path_factory.mktemp("tls")
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    make_server_cert(d, "ca")
    # Kafka's PEM key store: the private key and the certificate chain in one file
    keystore = d / "server-keystore.pem"
    keystore.write_text((d / "server.key").read_text() + (d / "server.pem").read_text())
    overrides = {
        "listener.name.client.ssl.keystore.type": "PEM",
        "listener.name.client.ssl.keystore.location": str(keystore),
    }
    with KafkaCluster(client_listener="SSL", overrides=overrides) as cluster:
        yield cluster.client_bootstrap_servers, d


def test_ssl_produce_and_consume_over_kafkas_tls_listener(
    tls_broker: tuple[str, Path], topic_name: str
) -> None:
    bootstrap, d = tls_broker
    kafka = {"security.protocol": "SSL", "ssl.ca.location": str(d / "ca.pem")}
    Admin(bootstrap, kafka=kafka).create_topic(topic_name, 2)
    assert produce_and_read_back(bootstrap, topic_name, kafka) == [b"v0", b"v1", b"v2", b"v3"]


@pytest.mark.timeout(120)
def test_wrong_ca_fails_with_a_clear_error(tls_broker: tuple[str, Path]) -> None:
    bootstrap, d = tls_broker
    kafka = {"security.protocol": "SSL", "ssl.ca.location": str(d / "other-ca.pem")}
    with pytest.raises(AuthenticationError) as e:
        Producer(bootstrap, kafka=kafka, connect_timeout="1h")  # fails at once, not at 1h
    msg = str(e.value)
    assert msg.startswith(
        f"Producer: TLS/SASL handshake with Kafka at {bootstrap!r} failed: _SSL: "
    )
    assert "certificate verify failed" in msg


@pytest.mark.timeout(60)
def test_plaintext_client_against_tls_port_does_not_hang(tls_broker: tuple[str, Path]) -> None:
    bootstrap, _ = tls_broker
    with pytest.raises(BrokerUnreachableError) as e:
        Admin(bootstrap, connect_timeout="2s")
    assert str(e.value).startswith(f"Admin: Kafka at {bootstrap!r} did not answer within 2s")


def test_ssl_files_are_checked_at_start(tls_broker: tuple[str, Path]) -> None:
    bootstrap, d = tls_broker
    missing = os.fspath(d / "missing.pem")
    with pytest.raises(ConfigError) as e:
        Producer(bootstrap, kafka={"security.protocol": "SSL", "ssl.ca.location": missing})
    assert str(e.value) == f"kafka['ssl.ca.location']: file not found: {missing!r}"
