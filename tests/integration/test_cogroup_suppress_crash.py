"""Cogroup and suppress under exactly-once when the worker is SIGKILLed mid-stream.

The app (`cogroup_suppress_worker.py`) cogroups two inputs into running sums and suppresses
them for 200 ms of stream time per key; every key gets records from one input only, all of
value 1, so a key's running sums are 1, 2, ..., N whatever the interleaving of the inputs. The
worker is killed several times while input is pending and restarted on the same state dir;
then a far-future record on each input partition flushes every held key. An independent
read_committed reader (plain confluent-kafka) then checks:

- sums: each key's updates are exactly 1..N, in order (no update lost or repeated);
- held: each key's suppressed updates are strictly increasing running sums (a held update is
  never emitted twice, even if the kill fell between emitting it and committing) and end with
  N (the buffer, restored from its changelog after each kill, lost nothing).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from e2e.independent_reader import IndependentReader, committed_offsets

from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.serde import serde

WORKER = str(Path(__file__).with_name("cogroup_suppress_worker.py"))
PARTITIONS = 2
KEYS = 10  # per input
PER_KEY = 60
KILLS = 3
HOLD_MS = 3000  # 300 records of stream time: about a chunk
BASE = 1_700_000_000_000
LONG, STRING = serde("long"), serde("string")


class Run:
    def __init__(self, bs: str, unique_name: Callable[[str], str], tmp: Path) -> None:
        self.bs, self.tmp = bs, tmp
        self.a, self.c = unique_name("a"), unique_name("c")
        self.sums, self.held = unique_name("sums"), unique_name("held")
        self.app_id = unique_name("app")
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self) -> None:
        log = self.tmp / f"worker-{len(self.logs)}.log"
        self.logs.append(log)
        args = ["--bootstrap", self.bs, "--app-id", self.app_id, "--a", self.a, "--c", self.c]
        args += ["--sums", self.sums, "--held", self.held, "--state-dir", str(self.tmp / "s")]
        args += ["--hold-ms", str(HOLD_MS)]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, WORKER, *args], stdout=out, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.tail()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        return self.logs[-1].read_text(errors="replace")[-3000:] if self.logs else ""


def _produce(bs: str, rows: Sequence[tuple[str, str, int, int | None]]) -> None:
    with Producer(bs, idempotent=True) as p:
        for topic, key, ts, partition in rows:
            p.produce(topic, LONG.to_bytes(1), STRING.to_bytes(key), partition, ts)
        p.flush()


def _wait(reader: IndependentReader, run: Run, what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        reader.poll(0.2)
        if check():
            return
        if not run.alive():
            raise AssertionError(f"worker exited while waiting for {what}:\n{run.tail()}")
    raise AssertionError(f"timed out waiting for {what}:\n{run.tail()}")


def consumed(run: Run) -> int:
    """The input records the app has committed as done, on both inputs."""
    return sum(committed_offsets(run.bs, run.app_id, t, PARTITIONS) for t in (run.a, run.c))


def _per_key(reader: IndependentReader, topic: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for u in reader.records[topic]:
        out.setdefault(str(u.key), []).append(u.value)
    return out


@pytest.mark.timeout(600)
def test_sigkill_keeps_cogroup_and_suppress_exact(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    run = Run(bootstrap_servers, unique_name, tmp_path)
    with Admin(run.bs) as admin:
        for topic in (run.a, run.c, run.sums, run.held):
            admin.create_topic(topic, PARTITIONS)
    rows: list[tuple[str, str, int, int | None]] = [
        (run.a if n % 2 == 0 else run.c, f"{'ac'[n % 2]}{n // 2 % KEYS}", BASE + 10 * n, None)
        for n in range(2 * KEYS * PER_KEY)
    ]
    chunk = len(rows) // (KILLS + 1)
    # key `once<k>` gets one record, early in chunk k: it is held (HOLD_MS is about a chunk of
    # stream time) when the worker is killed, and only the restored buffer can still emit it
    for k in reversed(range(KILLS)):
        at = k * chunk + chunk // 6
        rows.insert(at, (run.a, f"once{k}", rows[at][2], None))
    chunk += 1  # each of the first KILLS chunks has its `once` record
    total = len(rows)
    reader = IndependentReader(run.bs, [run.sums, run.held])
    try:
        run.start()
        for k in range(KILLS):
            _produce(run.bs, rows[k * chunk : (k + 1) * chunk])
            want = k * chunk + chunk // 3

            def enough(w: int = want) -> bool:
                return consumed(run) >= w

            # on the group's committed input offsets: a read_committed reader can stall behind
            # the killed worker's open transaction until the broker aborts it
            _wait(reader, run, f"{want} inputs done", enough)
            assert consumed(run) < (k + 1) * chunk  # the kill lands mid-stream
            run.kill()
            run.start()
        _produce(run.bs, rows[KILLS * chunk :])
        _wait(reader, run, "every sum", lambda: reader.count(run.sums) >= total)
        # far in stream time on every partition of `a`: every held key goes
        end = BASE + 10 * total + 60_000
        _produce(run.bs, [(run.a, f"tick{p}", end, p) for p in range(PARTITIONS)])

        def all_held() -> bool:
            got = _per_key(reader, run.held)
            return all(got.get(k, [None])[-1] == _final(k) for k in _keys())

        _wait(reader, run, "the held sums", all_held)
        run.stop()
        reader.read_to_end()
    finally:
        if run.alive():
            run.kill()
        reader.close()

    sums = {k: v for k, v in _per_key(reader, run.sums).items() if not k.startswith("tick")}
    assert sums == {k: list(range(1, _final(k) + 1)) for k in _keys()}
    held = {k: v for k, v in _per_key(reader, run.held).items() if not k.startswith("tick")}
    assert set(held) == set(_keys())
    for key, values in held.items():
        assert values == sorted(set(values)), (key, values)  # no repeats, in order
        assert values[-1] == _final(key) and all(1 <= v <= _final(key) for v in values)
    assert reader.errors == []


def _keys() -> list[str]:
    return [f"{side}{i}" for side in "ac" for i in range(KEYS)] + [f"once{k}" for k in range(KILLS)]


def _final(key: str) -> int:
    return 1 if key.startswith("once") else PER_KEY
