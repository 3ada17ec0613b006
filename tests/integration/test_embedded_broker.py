"""The embedded broker's life cycle: start, answer, stop, report failures with its log."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kstream.kafka import Admin, EmbeddedBroker
from kstream.kafka.broker import free_port, tansu_binary
from kstream.kafka.errors import BrokerStartError


def test_start_answer_stop_with_log_file(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "tansu.log"
    broker = EmbeddedBroker(log_path=str(log))
    assert not broker.running
    with broker:
        assert broker.running
        assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
        admin = Admin(broker.bootstrap_servers, connect_timeout="5s")
        assert admin.create_topic("life-cycle", 2) is True
        assert broker.start() is broker  # idempotent
    assert not broker.running
    assert log.exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", broker.port), timeout=1).close()
    broker.stop()  # idempotent


def test_memory_storage_starts_empty_after_a_restart() -> None:
    port = free_port()
    with EmbeddedBroker(port) as broker:
        Admin(broker.bootstrap_servers).create_topic("gone-after-restart", 1)
    with EmbeddedBroker(port) as broker:
        assert "gone-after-restart" not in Admin(broker.bootstrap_servers).list_topics()


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        broker = EmbeddedBroker(port, log_path=str(tmp_path / "tansu.log"))
        with pytest.raises(BrokerStartError) as e:
            broker.start()
    assert str(e.value) == (
        f"embedded broker cannot listen on 127.0.0.1:{port}: Address already in use; "
        "choose another port (or none for a free one)"
    )
    assert not broker.running


def test_a_broker_that_dies_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    log = tmp_path / "tansu.log"
    broker = EmbeddedBroker(log_path=str(log))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KSTREAM_TANSU", str(fake))
        with pytest.raises(BrokerStartError) as e:
            broker.start()
    assert str(e.value) == (
        f"embedded broker on {broker.listen_address} exited with code 3 during start-up; "
        f"log {log}:\nboom: cannot start\n"
    )


def test_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSTREAM_TANSU", "/nonexistent/tansu")
    with pytest.raises(BrokerStartError) as e:
        tansu_binary()
    assert str(e.value) == "KSTREAM_TANSU='/nonexistent/tansu' is not an executable file"
