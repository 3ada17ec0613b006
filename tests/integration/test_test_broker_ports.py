"""The test broker (kstream.testing.kafka) starting on a port another process took first.

A node's ports are free when picked and bound by the JVM seconds later; a parallel run
starting its own broker can take one in between (`make chaos` with JOBS=3: a run's broker
exited with `java.net.BindException: Address already in use`). The cluster then starts again
on new ports; with one attempt only, the same start fails as that run did.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from kstream.kafka.errors import BrokerStartError
from kstream.testing import kafka as test_kafka


@pytest.fixture
def taken_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A port held by a listening socket, which the cluster's first pick returns."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = int(held.getsockname()[1])
    real = test_kafka.free_port
    picks: list[int] = []

    def pick(host: str = "127.0.0.1") -> int:
        picks.append(port if not picks else real(host))
        return picks[-1]

    monkeypatch.setattr(test_kafka, "free_port", pick)
    try:
        yield port
    finally:
        held.close()


def test_a_node_whose_port_was_taken_starts_on_new_ports(taken_port: int) -> None:
    with test_kafka.KafkaCluster() as cluster:
        node = cluster.nodes[0]
        assert node.port != taken_port
        assert node.running


def test_without_a_second_attempt_the_start_fails_naming_the_port(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(test_kafka, "PORT_ATTEMPTS", 1)
    with pytest.raises(BrokerStartError, match="Address already in use"):
        test_kafka.KafkaCluster().start()
