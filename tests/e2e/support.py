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

import pytest

from e2e.independent_reader import IndependentReader, Verdict, check_updates
from e2e.pipelines import expected_updates
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.producer import Producer
from kstream.serde import serde

WORKER = str(Path(__file__).with_name("worker.py"))
DSL_WORKER = str(Path(__file__).with_name("dsl_worker.py"))
LONG = os.environ.get("KSTREAM_LONG") == "1"


def require_kafka(broker: object) -> None:
    """Skip on the embedded Tansu broker (`KSTREAM_TEST_BROKER=tansu`): it shows records of
    aborted transactions to read_committed readers, so only kstream's provenance ids keep
    outputs exact there, and these tests read outputs without kstream."""
    if isinstance(broker, EmbeddedBroker):
        pytest.skip("exactly-once as a plain read_committed reader sees it: Apache Kafka only")


# The tests' records carry timestamps of November 2023 (`make_input`): under Kafka's default
# time retention (7 days) a broker deletes them within minutes of their arrival. The test
# broker keeps records of any age; a Kafka given by KSTREAM_TEST_BOOTSTRAP may not.
KEEP_FOREVER = {"retention.ms": "-1"}


def create_topics(
    bootstrap: str, partitions: int, *names: str, replication_factor: int = -1
) -> None:
    """Topics that keep their records (`KEEP_FOREVER`), with the broker's default replication
    factor unless told."""
    admin = Admin(bootstrap)
    for n in names:
        admin.create_topic(n, partitions, KEEP_FOREVER, replication_factor)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[Any, Any, int]],
    key_serde: str = "string",
    value_serde: str = "long",
    headers: list[tuple[str, bytes | None]] | None = None,
    partition: int | None = None,
) -> None:
    """`records` (key, value, timestamp) to `topic`, to `partition` when given (else the
    producer's partitioner picks)."""
    ks, vs = serde(key_serde), serde(value_serde)
    # idempotent: a retried batch can neither repeat records nor land after later ones, so the
    # input's order per partition is the order of `records` (the checks depend on it)
    with Producer(bootstrap, idempotent=True) as p:
        for k, v, ts in records:
            p.produce(topic, vs.to_bytes(v), ks.to_bytes(k), partition, ts, headers)
        p.flush()


@dataclass
class Worker:
    """A worker process running the stateful pipeline (or the app of another worker
    `script`, e.g. e2e.dsl_worker's)."""

    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    script: str = WORKER

    def start(self) -> Worker:
        n = len(self.logs)
        path = self.log_path.with_name(f"{self.log_path.stem}-{n}.log")
        self.logs.append(path)
        out = open(path, "wb")  # noqa: SIM115 (owned by the child)
        self.proc = subprocess.Popen(
            [sys.executable, self.script, *self.args], stdout=out, stderr=subprocess.STDOUT
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


def dsl_worker(tmp: Path, app: str, bootstrap: str, app_id: str, **flags: Any) -> Worker:
    """A worker running e2e.dsl_worker's `app` ("fk", "cogroup" or "grace"), its state in
    `tmp`/state; `flags` are the app's (`hold_ms=200` gives `--hold-ms 200`)."""
    args = [app, "--bootstrap", bootstrap, "--app-id", app_id, "--state-dir", str(tmp / "state")]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return Worker(args, tmp / f"{app}.log", script=DSL_WORKER)


def wait_reading(
    reader: IndependentReader, what: str, done: Callable[[], bool], deadline_s: float, w: Worker
) -> None:
    """Read on until `done()`; fail with the worker's log if it exits or `deadline_s` passes."""
    end = time.monotonic() + deadline_s
    while not done():
        reader.poll(0.2)
        if not w.alive():
            raise AssertionError(f"the worker exited while waiting for {what}:\n{w.tail()}")
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}:\n{w.tail()}")


class Results:
    """Follows the two output topics with an independent reader: a plain confluent-kafka
    consumer (`e2e.independent_reader`, no kstream code, no deduplication), read_committed
    unless told otherwise. `total` counts the records read from the counts topic."""

    def __init__(
        self, bootstrap: str, counts: str, sums: str, isolation: str = "read_committed"
    ) -> None:
        self.bootstrap, self.counts_topic, self.sums_topic = bootstrap, counts, sums
        self.reader = IndependentReader(bootstrap, [counts, sums], isolation)
        self.per_key: dict[str, int] = {}

    @property
    def total(self) -> int:
        return self.reader.count(self.counts_topic)

    def poll(self) -> int:
        before = self.total
        self.reader.poll(0.1)
        new = self.reader.records[self.counts_topic][before:]
        for r in new:
            key = str(r.key)
            self.per_key[key] = self.per_key.get(key, 0) + 1
        return len(new)

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
        """What a read_uncommitted reader sees of the counts topic, next to what this one saw:
        tells outputs that were written but never committed from outputs never written."""
        try:
            with IndependentReader(
                self.bootstrap, [self.counts_topic], isolation="read_uncommitted"
            ) as r:
                r.read_to_end(10)
                seen = r.count(self.counts_topic)
                ends = r.ends()
            stable = IndependentReader(self.bootstrap, [self.counts_topic])
            try:
                lso = stable.ends()
            finally:
                stable.close()
        except Exception as e:
            return f"(read_uncommitted check failed: {e})"
        return (
            f"{self.reader.isolation} saw {self.total} count records; read_uncommitted sees "
            f"{seen} (high watermarks {ends}, last stable offsets {lso})"
        )

    def wait_total(self, n: int, what: str, deadline_s: float, *workers: Worker) -> None:
        """Wait until `n` count records have been read in all."""
        self.wait(lambda: self.total >= n, f"{n} outputs ({what})", deadline_s, *workers)

    def wait_progress(self, n: int, deadline_s: float, *workers: Worker) -> None:
        """Wait until the workers run, then until `n` new outputs arrive."""
        for w in workers:
            self.wait(w.running, "the worker to run", deadline_s, w)
        target = self.total + n
        self.wait(lambda: self.total >= target, f"{n} more outputs", deadline_s, *workers)

    def complete(self, counts: dict[str, int]) -> bool:
        """Every key has at least its expected number of count records (duplicates would
        count too: `check_exact` tells)."""
        return all(self.per_key.get(k, 0) >= n for k, n in counts.items())

    def close(self) -> None:
        self.reader.close()


def check_exact(
    results: Results, records: Iterable[tuple[str, int, int]], input_topic: str | None = None
) -> list[Verdict]:
    """Read both output topics to their end (every transaction over) and compare them with
    every update the pipeline must emit for `records`: per key, each count 1..n once and in
    order, and each (key, minute)'s running sums once and in order. Fails with the counts of
    missing, duplicated and wrong records; returns the verdicts.

    With `input_topic`, first checks that the input topic holds `records` as the test meant
    them (per key, the same values and timestamps in the same order), so that a wrong output
    is the app's and not the test's."""
    records = list(records)
    if input_topic is not None:
        check_input(results.bootstrap, input_topic, records)
    counts, sums = expected_updates(records)
    results.reader.read_to_end(60)
    verdicts = [
        check_updates(results.reader, results.counts_topic, counts),
        check_updates(results.reader, results.sums_topic, sums),
    ]
    assert all(v.exact for v in verdicts), "\n".join(str(v) for v in verdicts)
    assert not results.reader.errors, results.reader.errors[:5]
    return verdicts


def check_input(bootstrap: str, topic: str, records: list[tuple[str, int, int]]) -> None:
    """`topic` holds `records`: per key, the same (value, timestamp) pairs in the same order
    (read back by the independent reader)."""
    want: dict[str, list[tuple[int | None, int]]] = {}
    for key, value, ts in records:
        want.setdefault(key, []).append((value, ts))
    with IndependentReader(bootstrap, [topic], isolation="read_uncommitted") as r:
        r.read_to_end(60)
        got: dict[str, list[tuple[int | None, int]]] = {}
        for u in r.records[topic]:
            got.setdefault(str(u.key), []).append((u.value, u.timestamp))
    bad = [k for k in set(want) | set(got) if want.get(k) != got.get(k)]
    assert not bad, (
        f"the input topic {topic} does not hold the records the test produced: {len(bad)} "
        f"keys differ, e.g. {bad[0]!r}: {got.get(bad[0], [])[:8]} vs {want.get(bad[0], [])[:8]}"
    )


def random_pause(rng: random.Random, lo: float, hi: float) -> None:
    time.sleep(rng.uniform(lo, hi))
