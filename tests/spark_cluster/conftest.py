"""A real Spark standalone cluster for the tests: one master and two workers of one core each.

Started once per test session (the cluster tests run on one pytest-xdist worker) from the
pyspark wheel's own launcher (`bin/spark-class`), bound to the loopback interface on free
ports, and stopped at the end. Jobs are submitted to it the way a user would: `kstreamd run
--engine spark --master spark://...` in a process of its own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
HERE = str(Path(__file__).resolve().parent)
SPARK_TESTS = str(Path(__file__).resolve().parents[1] / "spark")
if SPARK_TESTS not in sys.path:  # the shared helpers (feeding, reading, reference results)
    sys.path.insert(0, SPARK_TESTS)

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
START_TIMEOUT_S = 120.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/spark_cluster/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """Every descendant process of `pid` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in parents.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Cluster:
    """A running standalone cluster: its master URL, its daemons and their logs."""

    url: str
    home: str
    env: dict[str, str]
    logs: Path
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def workers(self) -> list[subprocess.Popen[bytes]]:
        return self.daemons[1:]

    def executors(self) -> list[int]:
        """Pids of the executor JVMs the workers run now."""
        return [pid for w in self.workers for pid in children(w.pid) if EXECUTOR in cmdline(pid)]

    def stop(self) -> None:
        for p in reversed(self.daemons):
            for pid in children(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.kill()
            p.wait()


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{path.name} exited: {path.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name}: no {text!r} in {START_TIMEOUT_S:g}s")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pyspark = pytest.importorskip("pyspark")
    home = str(Path(pyspark.__file__).resolve().parent)
    logs = tmp_path_factory.mktemp("spark-cluster")
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(
        os.environ,
        SPARK_HOME=home,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        SPARK_LOG_DIR=str(logs),
        SPARK_WORKER_DIR=str(logs / "work"),
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([*inherited, ROOT, HERE, SPARK_TESTS]),
    )
    env.pop("SPARK_MASTER", None)
    launcher = os.path.join(home, "bin", "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    cluster = Cluster(url, home, env, logs)

    def start(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - the daemon keeps it
        proc = subprocess.Popen(
            [launcher, *args], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(logs)
        )
        out.close()
        cluster.daemons.append(proc)
        return proc

    try:
        master = start(
            "master",
            [MASTER, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
        )
        _wait_for(logs / "master.log", "I have been elected leader", master)
        workers = []
        for i in range(2):  # both start at once, then both must have registered
            worker = start(
                f"worker-{i}",
                [
                    WORKER,
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(logs / f"work-{i}"),
                    url,
                ],
            )
            workers.append(worker)
        for i, worker in enumerate(workers):
            _wait_for(logs / f"worker-{i}.log", "Successfully registered with master", worker)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def submit(
    spark_cluster: Cluster, bootstrap_servers: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """`submit(target, app_id, *flags, env=...)` starts `kstreamd run --engine spark --master
    <cluster>` on `target` in a process of its own (log: `<tmp_path>/<app_id>.log`)."""
    started: list[subprocess.Popen[bytes]] = []

    def run(
        target: str, app_id: str, *flags: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{app_id}.log", "ab")  # noqa: SIM115 - the process keeps it
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kstream.service.cli",
                "run",
                target,
                "--engine",
                "spark",
                "--master",
                spark_cluster.url,
                "--app-id",
                app_id,
                "--bootstrap-servers",
                bootstrap_servers,
                "--checkpoint-dir",
                str(tmp_path / f"{app_id}-checkpoint"),
                "--spark-conf",
                "spark.executor.memory=512m",
                "--spark-conf",
                "spark.driver.host=127.0.0.1",
                *flags,
            ],
            env={**spark_cluster.env, "KSTREAM_STATE_DIR": str(tmp_path / "state"), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        started.append(proc)
        return proc

    yield run
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()
