"""A real Spark standalone cluster on this machine: one master and N workers, loopback only.

For trying a job on a cluster without one (executors in JVMs of their own, writes from more
than one process, an executor that dies), and for kstream's own tests and benchmarks. It is
started from the pyspark package's own launcher (`bin/spark-class`), so it runs the Spark
version the job is built with; submit to `cluster.url` (`kstreamd run --engine spark --master
<url>`, or `spark_session(master=url)`).

    with LocalCluster(workers=2, cores=1) as cluster:
        spark = spark_session(master=cluster.url)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from kstream.kafka.broker import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
START_TIMEOUT_S = 120.0


def descendants(pid: int) -> list[int]:
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


def _web_ui() -> list[str]:
    return ["--webui-port", str(free_port())]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class LocalCluster:
    """A master and `workers` workers of `cores` cores and `memory` each, started on enter
    (every worker registered) and killed on exit, with every executor they started.

    `env` adds to the daemons' environment (executors and their Python workers inherit it);
    `logs` keeps the daemons' logs and work directories (a temporary directory by default).
    """

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        env: Mapping[str, str] | None = None,
        logs: str | None = None,
    ) -> None:
        import pyspark

        self.home = str(Path(pyspark.__file__).resolve().parent)
        self._tmp = None if logs else tempfile.TemporaryDirectory(prefix="kstream-spark-")
        self.logs = Path(logs or self._tmp.name)  # type: ignore[union-attr]
        self.workers, self.cores, self.memory = workers, cores, memory
        self.env = dict(
            os.environ,
            SPARK_HOME=self.home,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            # the master and workers only schedule: without the optimising JIT compiler and
            # with the serial collector they start in 5 s instead of 8.5, on half the CPU
            SPARK_DAEMON_JAVA_OPTS=os.environ.get("SPARK_DAEMON_JAVA_OPTS", _DAEMON_JAVA_OPTS),
            SPARK_LOG_DIR=str(self.logs),
            SPARK_WORKER_DIR=str(self.logs / "work"),
            PYSPARK_PYTHON=sys.executable,
            **(env or {}),
        )
        self.env.pop("SPARK_MASTER", None)
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.daemons: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        master = self._daemon(
            "master",
            [MASTER, "--host", "127.0.0.1", "--port", str(self.port), *_web_ui()],
        )
        self._wait_for("master", "I have been elected leader", master)
        started = []
        for i in range(self.workers):  # all start at once, then each must have registered
            args = [WORKER, "--host", "127.0.0.1", *_web_ui(), "--cores", str(self.cores)]
            args += ["--memory", self.memory, "--work-dir", str(self.logs / f"work-{i}"), self.url]
            started.append(self._daemon(f"worker-{i}", args))
        for i, worker in enumerate(started):
            self._wait_for(f"worker-{i}", "Successfully registered with master", worker)

    def executors(self) -> list[int]:
        """Pids of the executor JVMs the workers run now."""
        return [
            pid for w in self.daemons[1:] for pid in descendants(w.pid) if EXECUTOR in cmdline(pid)
        ]

    def stop(self) -> None:
        for p in reversed(self.daemons):
            for pid in descendants(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.kill()
            p.wait()
        self.daemons.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _daemon(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        launcher = os.path.join(self.home, "bin", "spark-class")
        with open(self.logs / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(
                [launcher, *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(self.logs),
            )
        self.daemons.append(proc)
        return proc

    def _wait_for(self, name: str, text: str, proc: subprocess.Popen[bytes]) -> None:
        path = self.logs / f"{name}.log"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if path.exists() and text in path.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {path.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no {text!r} in {START_TIMEOUT_S:g}s")
            time.sleep(0.2)
