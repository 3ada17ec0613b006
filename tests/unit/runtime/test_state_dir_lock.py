"""The lock on `<state_dir>/<app_id>` (kstream.runtime.state_lock) without a broker: a real
holder process, a SIGKILL, and two Apps of one process on the mock cluster."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.mock_runtime import cluster_with_input, word_count

from kstream.errors import ConfigError
from kstream.runtime import App, AppState
from kstream.runtime.state_lock import StateDirLock, StateDirLockedError, lock_holder
from kstream.testing import MockClientSupplier

HOLDER = (
    "import sys\n"
    "from kstream.runtime.state_lock import StateDirLock\n"
    "lock = StateDirLock.acquire(sys.argv[1], 'app')\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_held_directory_is_refused_naming_it_and_the_holder_then_taken_over_once_it_dies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(StateDirLockedError) as refused:
            StateDirLock.acquire(str(tmp_path), "app")
        message = str(refused.value)
        assert message.startswith(f"state_dir: {tmp_path / 'app'} is locked by another instance")
        assert f"pid {holder.pid} " in message
        assert isinstance(refused.value, ConfigError)  # kstreamd exits 2
    finally:
        holder.kill()  # SIGKILL: no release, the PID stays in the file
        holder.wait()
    assert lock_holder(str(tmp_path / "app")) == holder.pid
    with caplog.at_level(logging.INFO, "kstream.runtime"):
        lock = StateDirLock.acquire(str(tmp_path), "app")
    assert f"took over the lock of pid {holder.pid}" in caplog.text
    assert lock_holder(str(tmp_path / "app")) == os.getpid()
    lock.release()
    assert lock_holder(str(tmp_path / "app")) is None  # a clean release leaves no PID


def test_a_second_app_of_one_process_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c")

    def app() -> App:
        config = {"state_dir": str(tmp_path), "broker_compat": "none"}
        return App(
            word_count(),
            "wc",
            "mock:9092",
            config=config,
            client_supplier=MockClientSupplier(cluster),
        )

    first, second = app(), app()
    first.start()
    try:
        with pytest.raises(StateDirLockedError, match=rf"pid {os.getpid()} \(this process"):
            second.start()
        assert second.state == AppState.CREATED
    finally:
        assert first.close(10)
    second.start()
    assert second.close(10)
