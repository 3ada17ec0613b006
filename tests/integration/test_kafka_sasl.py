"""SASL settings reach the broker: a SCRAM exchange with unknown credentials fails clearly.

(The embedded broker can create SCRAM users only through an authenticated connection, so
the successful path cannot be shown on it; the failure proves the settings are used.)
"""

from __future__ import annotations

import pytest

from kstream.kafka import Consumer, EmbeddedBroker, Producer
from kstream.kafka.errors import AuthenticationError


# An hour of connect timeout: only failing at once on the SASL error finishes in time.
@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", [Producer, Consumer])
def test_wrong_scram_credentials_fail_fast_with_the_reason(client: type) -> None:
    kafka = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mallory",
        "sasl.password": "guess",
    }
    with (
        EmbeddedBroker(extra_args=["--authentication"]) as broker,
        pytest.raises(AuthenticationError) as e,
    ):
        client(broker.bootstrap_servers, kafka=kafka, connect_timeout="1h")
    msg = str(e.value)
    assert msg.startswith(
        f"{client.__name__}: TLS/SASL handshake with Kafka at {broker.bootstrap_servers!r} "
        "failed: _AUTHENTICATION: "
    )
    assert "SASL SCRAM authentication failed" in msg
    assert e.value.code == "_AUTHENTICATION"
