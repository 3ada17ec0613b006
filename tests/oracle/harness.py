"""The Kafka Streams harness as a Python object: one JVM for a whole test session.

`tools/kafka-streams-oracle` is built by `make oracle-harness` (Maven: its classes and its
dependencies' jars under `target/`). `Oracle.start()` starts it once; `submit(case)` writes a
case as one line of its stdin and `answer()` reads the answer line. The two are apart so that
a test can let the JVM work while kstream runs the same case.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

from oracle.spec import Answer, Case

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tools" / "kafka-streams-oracle"
STAMP = HARNESS / "target" / ".built"
# A JVM that answers thousands of small cases: a small heap, the serial collector, and the
# class-data sharing of the JDK's own classes (the default archive)
JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class HarnessError(RuntimeError):
    """The harness is missing or died; the message says which, with its stderr."""


def built() -> bool:
    """True when `make oracle-harness` has built the harness (its stamp file exists)."""
    return STAMP.exists()


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise HarnessError("the Kafka Streams oracle needs Java 17 or newer: no `java` on PATH")
    return found


class Oracle:
    """A running harness: `submit` a case, then read its `answer`, one case at a time.

    The harness answers in order, so an answer left unread (a test stopped between `submit`
    and `answer`, by its timeout say) would be taken as the answer to the next case, and every
    later comparison on this worker would be one case off. `submit` first reads and drops the
    answers still owed.
    """

    def __init__(self, proc: subprocess.Popen[str], stderr: IO[bytes]) -> None:
        self._proc = proc
        self._stderr = stderr
        self.cases = 0
        self._owed = 0  # answers submitted for and not read yet

    @classmethod
    def start(cls, target: Path | None = None) -> Oracle:
        """Start the harness built in `target` (its classes and libs; the pinned version's
        `tools/kafka-streams-oracle/target` unless given: `make oracle-versions` builds others)."""
        if target is None:
            if not built():
                raise HarnessError(
                    f"the Kafka Streams oracle is not built ({STAMP} is missing): "
                    "run `make oracle-harness`"
                )
            target = HARNESS / "target"
        classpath = os.pathsep.join([str(target / "classes"), str(target / "libs" / "*")])
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `close`)
        proc = subprocess.Popen(
            [_java(), *JVM_OPTIONS, "-cp", classpath, "io.kstream.oracle.Oracle"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        return cls(proc, stderr)

    def submit(self, case: Case, broker: dict[str, Any] | None = None) -> None:
        """Send `case`; with `broker` ({"bootstrap", "application_id", "timeout_ms"}) the
        harness runs it as a KafkaStreams app on that broker instead of in its test driver
        (the case's records are then already in its input topics, and the answer is
        {"ran_ms": ...} once the app has consumed them all). For input written while the app
        runs, `broker` may add "max_task_idle_ms", "input_records" (run until the sources hold
        that many records, all consumed) and "running_file" (written once the app is RUNNING);
        Broker.java."""
        assert self._proc.stdin is not None
        while self._owed:
            self.answer()  # the answer to a case whose test did not read it
        line = case.to_json()
        if broker is not None:
            line = json.dumps({"nodes": case.nodes, "records": [], "broker": broker})
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError as e:
            raise HarnessError(f"the harness died: {self._tail()}") from e
        self._owed += 1

    def answer(self) -> Answer:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise HarnessError(f"the harness died (exit {self._proc.poll()}): {self._tail()}")
        self._owed -= 1
        self.cases += 1
        answer: Answer = json.loads(line)
        return answer

    def ask(self, case: Case) -> Answer:
        self.submit(case)
        return self.answer()

    def _tail(self, limit: int = 4000) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        return text[-limit:]

    def close(self) -> None:
        proc = self._proc
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
