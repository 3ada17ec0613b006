"""Helpers of the process-level tests: topics, input, worker processes, reading results."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import TopicReader
from kstream.serde import serde

WORKER = str(Path(__file__).with_name("worker.py"))
LONG = os.environ.get("KSTREAM_LONG") == "1"


def create_topics(bootstrap: str, partitions: int, *names: str) -> None:
    admin = Admin(bootstrap)
    for n in names:
        admin.create_topic(n, partitions)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[Any, Any, int]],
    key_serde: str = "string",
    value_serde: str = "long",
    headers: list[tuple[str, bytes | None]] | None = None,
) -> None:
    ks, vs = serde(key_serde), serde(value_serde)
    with Producer(bootstrap) as p:
        for k, v, ts in records:
            p.produce(topic, vs.to_bytes(v), ks.to_bytes(k), timestamp=ts, headers=headers)
        p.flush()


@dataclass
class Worker:
    """A worker process running the stateful pipeline."""

    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    def start(self) -> Worker:
        n = len(self.logs)
        path = self.log_path.with_name(f"{self.log_path.stem}-{n}.log")
        self.logs.append(path)
        out = open(path, "wb")  # noqa: SIM115 (owned by the child)
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, *self.args], stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def running(self) -> bool:
        """The current process has had tasks assigned (its log says RUNNING)."""
        if not self.logs or not self.logs[-1].exists():
            return False
        if not self.alive():
            raise AssertionError(
                f"worker exited with {self.proc and self.proc.poll()}:\n{self.tail()}"
            )
        return "-> RUNNING" in self.logs[-1].read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 4000) -> str:
        text = ""
        for p in self.logs[-2:]:
            if p.exists():
                text += f"--- {p.name}\n" + p.read_text(errors="replace")[-chars:]
        return text


def worker(
    tmp: Path,
    name: str,
    bootstrap: str,
    app_id: str,
    input_topic: str,
    counts: str,
    sums: str,
    *extra: str,
) -> Worker:
    args = [
        "--bootstrap",
        bootstrap,
        "--app-id",
        app_id,
        "--input",
        input_topic,
        "--counts",
        counts,
        "--sums",
        sums,
        "--state-dir",
        str(tmp / f"state-{name}"),
        *extra,
    ]
    return Worker(args, tmp / f"{name}.log")


class Results:
    """Follows the two output topics, each provenance id once."""

    def __init__(
        self, bootstrap: str, counts: str, sums: str, isolation: str = "read_committed"
    ) -> None:
        self.bootstrap, self.counts_topic = bootstrap, counts
        kafka = {"isolation.level": isolation}
        self.counts_reader = TopicReader(bootstrap, counts, "string", "long", kafka=kafka)
        self.sums_reader = TopicReader(bootstrap, sums, "string", "long", kafka=kafka)
        self.sequences: dict[str, list[int]] = {}
        self.sums: dict[str, int] = {}
        self.total = 0

    def poll(self) -> int:
        got = 0
        for r in self.counts_reader.poll(0.1):
            self.sequences.setdefault(r.key, []).append(r.value)
            got += 1
        for r in self.sums_reader.poll(0.1):
            self.sums[r.key] = r.value
        self.total += got
        return got

    def wait(
        self, done: Callable[[], bool], what: str, deadline_s: float, *workers: Worker
    ) -> None:
        """Poll until `done()`; fail with the workers' logs after `deadline_s` (a hang guard)."""
        end = time.monotonic() + deadline_s
        while not done():
            self.poll()
            if time.monotonic() > end:
                logs = "\n".join(w.tail() for w in workers)
                raise AssertionError(f"gave up waiting for {what}\n{self.hidden()}\n{logs}")

    def hidden(self) -> str:
        """What a read_uncommitted reader sees of the counts topic, next to what this
        (read_committed) one saw: tells a broker hiding committed records from an engine that
        never wrote them."""
        try:
            with TopicReader(
                self.bootstrap,
                self.counts_topic,
                "string",
                "long",
                kafka={"isolation.level": "read_uncommitted"},
            ) as r:
                unique = len(r.read_to_end(idle_timeout=10))
                by_partition = {p: r.consumer.eof_offset(r.topic, p) for p in r.partitions}
        except Exception as e:
            return f"(read_uncommitted check failed: {e})"
        return (
            f"read_committed saw {self.total} count records; read_uncommitted sees {unique} "
            f"unique ({by_partition} partition ends)"
        )

    def wait_progress(self, n: int, deadline_s: float, *workers: Worker) -> None:
        """Wait until the workers run, then until `n` new outputs arrive."""
        for w in workers:
            self.wait(w.running, "the worker to run", deadline_s, w)
        target = self.total + n
        self.wait(lambda: self.total >= target, f"{n} more outputs", deadline_s, *workers)

    def complete(self, counts: dict[str, int]) -> bool:
        return all(len(self.sequences.get(k, ())) >= n for k, n in counts.items())

    def close(self) -> None:
        self.counts_reader.close()
        self.sums_reader.close()


def check_exact(results: Results, counts: dict[str, int], sums: dict[str, int]) -> None:
    """Each key's counts are 1..n (no duplicate, no gap) and the final sums are exact."""
    bad = {
        k: seq
        for k, seq in results.sequences.items()
        if seq != list(range(1, counts.get(k, 0) + 1))
    }
    assert not bad, f"{len(bad)} keys with wrong sequences, e.g. {list(bad.items())[:1]}"
    assert set(results.sequences) == set(counts)
    for r in results.sums_reader.read_to_end():
        results.sums[r.key] = r.value
    assert results.sums == sums


def random_pause(rng: random.Random, lo: float, hi: float) -> None:
    time.sleep(rng.uniform(lo, hi))
