"""`kstreamd run --processes N` for the process-level tests: start one, ask it about its
workers, stop it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstream.kafka.broker import free_port

KSTREAMD = str(Path(__file__).parents[2] / "cmd" / "kstreamd" / "kstreamd")
TESTS = str(Path(__file__).parents[1])
TOKEN = "supervisor-test-token"
APP_MODULE = """
from e2e.pipelines import stateful_topology


def topology():
    return stateful_topology({inp!r}, {cnt!r}, {sm!r}, {delay!r})
"""


@dataclass
class Supervised:
    """A `kstreamd run --processes N` process and its one HTTP address."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def get(self, path: str, token: str | None = TOKEN) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def health(self) -> tuple[int, dict[str, Any]]:
        """(status, body) of /health/ready; (0, {}) while the supervisor is not listening."""
        try:
            status, body = self.get("/health/ready", token=None)
        except OSError:
            self.check_alive()
            return 0, {}
        return status, json.loads(body)

    def ready(self) -> bool:
        return self.health()[0] == 200

    def workers(self) -> list[dict[str, Any]]:
        return list(self.health()[1]["workers"])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"supervisor exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self, timeout: float = 90) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_supervisor(
    tmp: Path,
    bootstrap: str,
    app_id: str,
    topics: tuple[str, str, str],
    delay: float,
    *,
    guarantee: str = "exactly_once",
    session_ms: int = 2000,
    log_name: str = "supervisor.log",
) -> Supervised:
    """`kstreamd run --processes 2` of the stateful pipeline on `topics`, its state under
    `tmp/state` (a new supervisor started on the same `tmp` takes its workers' state and
    process ids over)."""
    inp, cnt, sm = topics
    (tmp / "sup_app.py").write_text(APP_MODULE.format(inp=inp, cnt=cnt, sm=sm, delay=delay))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSTREAM_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(tmp), TESTS, os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
            "KSTREAM_STATE_DIR": str(tmp / "state"),
            "KSTREAM_HTTP_TOKEN": TOKEN,
            "KSTREAM_BATCH_MAX_RECORDS": "200",
            "KSTREAM_BATCH_MAX_WAIT": "50",
            "KSTREAM_COMMIT_INTERVAL": "50",
            # short sessions: a killed worker's tasks move on within a second or two
            "KSTREAM_KAFKA__SESSION_TIMEOUT_MS": str(session_ms),
            "KSTREAM_KAFKA__HEARTBEAT_INTERVAL_MS": str(max(100, min(300, session_ms // 5))),
        }
    )
    log = tmp / log_name
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                KSTREAMD,
                "run",
                "sup_app:topology",
                "--processes",
                "2",
                "--app-id",
                app_id,
                "--bootstrap-servers",
                bootstrap,
                "--http",
                f"127.0.0.1:{port}",
                "--instance-id",
                "sup",
                "--guarantee",
                guarantee,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp,
        )
    return Supervised(proc, f"http://127.0.0.1:{port}", log)


def pid_gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
