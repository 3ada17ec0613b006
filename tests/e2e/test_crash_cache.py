"""Crash test with the record cache on: SIGKILLed mid-stream, results stay exact.

The app (e2e.cache_worker: the DSL's count and one-minute windowed sum per key, under
`exactly_once_v2`, `cache_max_bytes` 10 MB, a 200 ms commit interval) is killed and restarted
a few times while input keeps coming, as in e2e.test_crash. The outputs are read by the
independent reader (plain confluent-kafka, read_committed, no deduplication). With the cache
on, a key's updates between two commits are forwarded once, so intermediate running values may
be missing; what must hold is what a Kafka Streams user relies on:

- every key's last output is its exact final count / sum;
- every output is one of the key's correct running values (nothing wrong), each at most once
  (nothing duplicated), in increasing order (nothing out of order): a subsequence of the
  updates the uncached pipeline emits;
- fewer outputs than updates (the cache did coalesce).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.independent_reader import IndependentReader, committed_offsets
from e2e.pipelines import expected_updates, make_input
from e2e.support import Results, Worker, check_input, create_topics, produce, require_kafka

CACHE_WORKER = str(Path(__file__).with_name("cache_worker.py"))
KILLS = 4
CHUNK = 600  # input records produced for each kill
FINAL = 600  # and after the last
KEYS = 60  # few keys: several updates of a key fall in one commit interval
PARTITIONS = 4
DELAY = 0.003  # at most ~330 records/s: a kill lands with input pending
SESSION_MS = 1000


class CacheWorker(Worker):
    """A worker process running e2e.cache_worker (its own log per start)."""

    def start(self) -> CacheWorker:
        path = self.log_path.with_name(f"{self.log_path.stem}-{len(self.logs)}.log")
        self.logs.append(path)
        out = open(path, "wb")  # noqa: SIM115 (owned by the child)
        self.proc = subprocess.Popen(
            [sys.executable, CACHE_WORKER, *self.args], stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        return self


@dataclass
class Coalesced:
    """Outputs of one topic against the updates the uncached pipeline emits."""

    topic: str
    updates: int = 0
    read: int = 0
    wrong: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    final_missing: int = 0
    split_keys: int = 0

    @property
    def correct(self) -> bool:
        return (
            not (self.wrong or self.duplicated or self.out_of_order or self.final_missing)
            and not self.split_keys
        )

    def __str__(self) -> str:
        return (
            f"{self.topic}: {self.read} outputs for {self.updates} updates; {self.wrong} wrong, "
            f"{self.duplicated} duplicated, {self.out_of_order} out of order, "
            f"{self.final_missing} keys without their final value, {self.split_keys} keys on "
            "more than one partition"
        )


def check_coalesced(
    reader: IndependentReader, topic: str, expected: dict[str, list[int]]
) -> Coalesced:
    """Per key, the values read must be a subsequence of `expected` (strictly increasing
    running values) that ends with the final one."""
    got = reader.updates(topic)
    v = Coalesced(topic, updates=sum(len(s) for s in expected.values()))
    v.read = sum(len(s) for s in got.values())
    for key, want in expected.items():
        seq = got.get(key, [])
        position = {value: i for i, value in enumerate(want)}
        last = -1
        seen: set[int | None] = set()
        for value in seq:
            if value not in position:
                v.wrong += 1
                continue
            if value in seen:
                v.duplicated += 1
                continue
            seen.add(value)
            if position[value] <= last:
                v.out_of_order += 1
            last = max(last, position[value])
        if not seq or seq[-1] != want[-1]:
            v.final_missing += 1
    v.wrong += sum(len(s) for k, s in got.items() if k not in expected)
    v.split_keys = sum(1 for parts in reader.partitions_of_keys(topic).values() if len(parts) > 1)
    return v


def finals_reached(res: Results, counts: dict[str, list[int]]) -> bool:
    """Every key's latest count read is its final one."""
    latest = {k: seq[-1] for k, seq in res.reader.updates(res.counts_topic).items() if seq}
    return all(latest.get(k) == seq[-1] for k, seq in counts.items())


@pytest.mark.timeout(300)
def test_sigkill_with_the_record_cache_on_keeps_results_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("crashcache")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    # recent timestamps: a window store's changelog records carry their windows' times, and
    # the broker deletes them by time past the store's retention (+ a day), as in Kafka
    data = make_input(CHUNK * KILLS + FINAL, KEYS, start_ts=int(time.time() * 1000) - 60_000)
    counts, sums = expected_updates(data)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    res = Results(bs, cnt, sm)
    w = CacheWorker(
        [
            "--bootstrap", bs, "--app-id", app_id, "--input", inp, "--counts", cnt,
            "--sums", sm, "--state-dir", str(tmp_path / "state"), "--delay", str(DELAY),
            "--session-ms", str(SESSION_MS),
        ],
        tmp_path / "w.log",
    )  # fmt: skip
    produced = 0
    t0 = time.monotonic()
    try:
        for _ in range(KILLS):
            produce(bs, inp, data[produced : produced + CHUNK])
            produced += CHUNK
            w.start()
            res.wait_total(res.total + rng.randint(20, 60), f"seed {seed}", 120, w)
            w.kill()
            done = committed_offsets(bs, app_id, inp, PARTITIONS)
            assert 0 < done < produced, f"committed {done} of {produced} (seed {seed})"
        produce(bs, inp, data[produced:])
        w.start()
        res.wait(lambda: finals_reached(res, counts), f"final counts (seed {seed})", 120, w)
        assert w.stop() == 0, w.tail()
        elapsed = time.monotonic() - t0
        check_input(bs, inp, data)
        res.reader.read_to_end(60)
        verdicts = [check_coalesced(res.reader, cnt, counts), check_coalesced(res.reader, sm, sums)]
        assert not res.reader.errors, res.reader.errors[:5]
    finally:
        if w.alive():
            w.kill()
        res.close()
    assert all(v.correct for v in verdicts), "\n".join(map(str, verdicts))
    assert verdicts[0].read < verdicts[0].updates, f"nothing was coalesced: {verdicts[0]}"
    print(
        f"cache on: {KILLS} SIGKILLs in {elapsed:.1f}s (seed {seed}); "
        + "; ".join(map(str, verdicts))
    )
