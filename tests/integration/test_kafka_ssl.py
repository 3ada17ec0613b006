"""The SSL client path end to end: a TLS-terminating proxy (stunnel) in front of the broker.

The proxy holds a certificate signed by a CA this test generates; the broker advertises the
proxy's port, so every connection the clients make goes through TLS.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kstream.errors import BrokerUnreachableError, ConfigError
from kstream.kafka import Admin, Consumer, EmbeddedBroker, Producer
from kstream.kafka.broker import free_port
from kstream.kafka.errors import AuthenticationError

STUNNEL = shutil.which("stunnel4") or shutil.which("stunnel")
OPENSSL = shutil.which("openssl")

pytestmark = pytest.mark.skipif(
    STUNNEL is None or OPENSSL is None, reason="needs stunnel4 and openssl (apt)"
)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL or "openssl", *args], cwd=cwd, check=True, capture_output=True)


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


def wait_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    d = tmp_path_factory.mktemp("tls")
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    make_server_cert(d, "ca")
    proxy_port = free_port()
    with EmbeddedBroker(advertised_port=proxy_port) as broker:
        conf = d / "stunnel.conf"
        conf.write_text(
            "foreground = yes\n"
            "pid =\n"
            f"output = {d / 'stunnel.log'}\n"
            "[kafka]\n"
            f"accept = 127.0.0.1:{proxy_port}\n"
            f"connect = {broker.listen_address}\n"
            f"cert = {d / 'server.pem'}\n"
            f"key = {d / 'server.key'}\n"
        )
        proc = subprocess.Popen(
            [STUNNEL or "stunnel4", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_port(proxy_port)
            yield f"127.0.0.1:{proxy_port}", d
        finally:
            proc.terminate()
            proc.wait(10)


def test_ssl_produce_and_consume_through_tls_proxy(
    tls_broker: tuple[str, Path], topic_name: str
) -> None:
    bootstrap, d = tls_broker
    kafka = {"security.protocol": "SSL", "ssl.ca.location": str(d / "ca.pem")}
    Admin(bootstrap, kafka=kafka).create_topic(topic_name, 2)
    p = Producer(bootstrap, kafka=kafka)
    for i in range(4):
        p.produce(topic_name, f"v{i}".encode(), f"k{i}".encode())
    p.flush()
    c = Consumer(bootstrap, kafka=kafka)
    c.assign([(topic_name, 0, 0), (topic_name, 1, 0)])
    got: list[bytes] = []
    end = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < end:
        got.extend(m.value() or b"" for m in c.consume_batch(100, 0.2))
    c.close()
    assert sorted(got) == [b"v0", b"v1", b"v2", b"v3"]


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
