"""Two `kstreamd run` of one app on one state directory, on the real broker: the second is
refused (exit 2, naming the directory and the PID that holds it) before it connects; a
supervisor's directory refuses a second supervisor and a lone instance; `kstreamd reset`
refuses, even with --force, while the directory is held; after a SIGKILL the lock is taken
over by the next instance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from support.groups import fast_group_env

from kstream.kafka import Admin
from kstream.kafka.broker import free_port

KSTREAMD = [sys.executable, str(Path(__file__).parents[2] / "cmd" / "kstreamd" / "kstreamd")]
APP_MODULE = """
from kstream.dsl import StreamBuilder

b = StreamBuilder()
b.stream({src!r}, key_serde="string", value_serde="string").to({dst!r})
topology = b.build()
"""


class Fixture:
    """An app module over two new topics, and the environment its `kstreamd` runs in."""

    def __init__(self, tmp: Path, bootstrap: str, unique_name: Callable[[str], str]) -> None:
        src, dst = unique_name("lock-in"), unique_name("lock-out")
        admin = Admin(bootstrap)
        admin.create_topic(src, 1)
        admin.create_topic(dst, 1)
        (tmp / "lock_app.py").write_text(APP_MODULE.format(src=src, dst=dst))
        self.tmp, self.bootstrap = tmp, bootstrap
        self.logs: list[Path] = []
        self.app_id = unique_name("locked")
        self.state_dir = tmp / "state"
        self.app_dir = self.state_dir / self.app_id
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KSTREAM_")},
            "PYTHONPATH": str(tmp),
            "PYTHONUNBUFFERED": "1",
            "KSTREAM_STATE_DIR": str(self.state_dir),
            **fast_group_env(),
        }

    def args(self, *extra: str, bootstrap: str | None = None) -> list[str]:
        """`kstreamd run` of the app; `bootstrap` replaces the broker's address (a port nobody
        listens on shows a refusal that never needed the broker)."""
        return [
            *KSTREAMD,
            "run",
            "lock_app:topology",
            "--app-id",
            self.app_id,
            "--bootstrap-servers",
            bootstrap or self.bootstrap,
            "--http",
            f"127.0.0.1:{free_port()}",
            *extra,
        ]

    def start(self, *extra: str) -> subprocess.Popen[str]:
        """A `kstreamd run` that has printed its first line ("serving ..."); its log (stderr)
        goes to a file, which a pipe nobody reads could not take for long."""
        log = self.tmp / f"kstreamd-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("w") as err:
            proc = subprocess.Popen(
                self.args(*extra),
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=self.env,
                cwd=self.tmp,
            )
        assert proc.stdout is not None
        first = _readline(proc.stdout, 60)
        assert "serving" in first, (first, _stop(proc), log.read_text()[-4000:])
        return proc

    def refused(self, *argv: str, code: int) -> str:
        """Run a command that must exit with `code`; its stderr."""
        done = subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, cwd=self.tmp, timeout=60
        )
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        return done.stderr


def _readline(stream: IO[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    os.set_blocking(stream.fileno(), False)
    while time.monotonic() < deadline:
        line = stream.readline()
        if line:
            return line
        time.sleep(0.05)
    return ""


@pytest.fixture
def app(kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path) -> Iterator[Fixture]:
    yield Fixture(tmp_path, kafka_broker.bootstrap_servers, unique_name)


def _stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM `proc` (SIGKILL after a minute); its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


def test_a_second_instance_exits_2_naming_the_directory_and_the_holder(app: Fixture) -> None:
    first = app.start()
    try:
        # refused before it connects: with no broker at the address it is given, the same error
        nowhere = f"127.0.0.1:{free_port()}"
        for bootstrap in (None, nowhere):
            err = app.refused(*app.args(bootstrap=bootstrap), code=2)
            locked = f"kstreamd run: error: state_dir: {app.app_dir} is locked by "
            assert err.startswith(locked), err
            assert f"pid {first.pid} " in err and len(err.strip().splitlines()) == 1, err
        # reset would delete the directory under the running instance: refused, --force or not
        reset = [*KSTREAMD, "reset", "--app-id", app.app_id, "--bootstrap-servers", app.bootstrap]
        err = app.refused(*reset, "--state-dir", str(app.state_dir), "--force", code=1)
        assert f"pid {first.pid} holds its state directory {app.app_dir}" in err, err
        assert app.app_dir.is_dir()
        first.kill()  # no release: the lock file keeps its PID, the kernel drops the lock
        first.wait()
        second = app.start()  # takes the lock over at once
        assert _stop(second) == 0, app.logs[-1].read_text()[-4000:]
    finally:
        _stop(first)


def test_a_supervisors_directory_refuses_a_second_supervisor_and_a_lone_instance(
    app: Fixture,
) -> None:
    supervisor = app.start("--processes", "2")
    try:
        err = app.refused(*app.args("--processes", "2"), code=2)
        assert f"state_dir: {app.app_dir} is locked" in err and f"pid {supervisor.pid} " in err
        err = app.refused(*app.args(), code=2)
        assert f"state_dir: {app.app_dir} is locked" in err and f"pid {supervisor.pid} " in err
    finally:
        code = _stop(supervisor)
    assert code == 0, app.logs[-1].read_text()[-4000:]
