"""Crash tests: a stateful pipeline SIGKILLed at random moments, 20 times a run, stays exact.

Under `exactly_once` (a transactional producer per task) and `exactly_once_v2` (one per stream
thread) a worker process is killed and restarted; with `kstreamd run --processes 2` the worker
processes, and now and then the supervisor itself, are. Outputs are checked by an independent
reader (`e2e.independent_reader`: plain confluent-kafka, read_committed, no deduplication):
every running count and running sum appears exactly once per key, in order, and nothing else.

Input arrives a chunk per kill and a per-record delay bounds how fast the app goes, so every
kill lands mid-stream however fast the engine gets: asserted at each kill (the group's
committed input offsets fall short of the input produced, and so does the output read).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from support.groups import fast_group

from e2e.independent_reader import committed_offsets
from e2e.pipelines import WINDOW_MS, expected, make_input, stateful_topology
from e2e.supervised import Supervised, pid_gone, start_supervisor
from e2e.support import LONG, Results, check_exact, create_topics, produce, require_kafka, worker
from kstream.runtime import App, AppState

# `make test` kills each run 8 times (the whole suite stays near 6 minutes on 2 cores);
# KSTREAM_LONG=1 40 times. 20 kills a run took 190-220 s each beside the rest of the suite.
KILLS = 40 if LONG else 8
CHUNK = 600  # input records produced for each kill
FINAL = 1_000  # and after the last
KEYS = 300
PARTITIONS = 4
# At most ~330 records/s per worker: a kill waits for 100-300 new outputs of a chunk of 600, so
# it lands with at least 0.9 s of input pending (more than a loaded reader lags; at 1 ms a
# record one CI run read 300 outputs only after all 600 were done), and restarts dominate.
DELAY = 0.003
SESSION_MS = 1000  # a killed worker's partitions move on after a second


@pytest.mark.timeout(1200 if LONG else 300)
@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_sigkill_at_random_moments_keeps_results_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, guarantee: str
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("crash")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    data = make_input(CHUNK * KILLS + FINAL, KEYS)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    res = Results(bs, cnt, sm)
    w = worker(
        tmp_path,
        "w",
        bs,
        app_id,
        inp,
        cnt,
        sm,
        "--batch",
        "200",
        "--delay",
        str(DELAY),
        "--session-ms",
        str(SESSION_MS),
        "--guarantee",
        guarantee,
    )
    produced = 0
    kills = 0
    t0 = time.monotonic()
    try:
        for _ in range(KILLS):
            # the worker is down: the chunk waits for the next one
            produce(bs, inp, data[produced : produced + CHUNK])
            produced += CHUNK
            w.start()
            res.wait_total(res.total + rng.randint(100, 300), f"seed {seed}", 120, w)
            w.kill()
            kills += 1
            _assert_mid_stream(res, bs, app_id, inp, produced, seed)
        produce(bs, inp, data[produced:])
        w.start()
        counts, _ = expected(data)
        res.wait(partial(res.complete, counts), f"all outputs (seed {seed})", 180, w)
        res.wait(w.running, "the last worker to run", 60, w)
        assert w.stop() == 0, w.tail()
        elapsed = time.monotonic() - t0
        verdicts = check_exact(res, data, inp)
    finally:
        if w.alive():
            w.kill()
        res.close()
    assert kills == KILLS
    print(f"{guarantee}: {kills} SIGKILLs in {elapsed:.1f}s (seed {seed}); {verdicts}")
    _check_stores(bs, app_id, inp, cnt, sm, data, tmp_path)


# Of every 10 kills in the processes run, 8 kill one worker process (the supervisor restarts
# it), one the supervisor alone (its workers see their pipe close and stop; a new supervisor
# takes their state over) and one the supervisor and both workers at once (the whole app).
WORKER, SUPERVISOR, EVERYTHING = "worker", "supervisor", "supervisor and workers"
PLAN = (WORKER, WORKER, WORKER, WORKER, SUPERVISOR, WORKER, WORKER, WORKER, WORKER, EVERYTHING)


@pytest.mark.slow  # KSTREAM_LONG=1: its kills must land mid-stream, which a loaded suite missed
@pytest.mark.timeout(1200 if LONG else 300)
def test_sigkill_worker_processes_and_supervisor_keeps_results_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = (unique_name("in"), unique_name("counts"), unique_name("sums"))
    inp = topics[0]
    app_id = unique_name("crashp")
    create_topics(bs, PARTITIONS, *topics)
    data = make_input(CHUNK * KILLS + FINAL, KEYS)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    res = Results(bs, topics[1], topics[2])
    fleet = _Fleet(tmp_path, bs, app_id, topics, res, seed)
    produced = 0
    sigkills = 0
    kinds: list[str] = []
    t0 = time.monotonic()
    try:
        sup = fleet.start()
        for k in range(KILLS):
            fleet.wait(sup.ready, "both workers ready", 120)
            # the chunk is produced once both run: neither can finish it before the kill
            produce(bs, inp, data[produced : produced + CHUNK])
            produced += CHUNK
            fleet.wait(partial(_reached, res, res.total + rng.randint(100, 300)), "outputs", 120)
            kind = PLAN[k % len(PLAN)]
            workers = sup.workers()
            victim = workers[k % 2]
            if kind == WORKER:
                os.kill(victim["pid"], signal.SIGKILL)
                sigkills += 1
            else:
                sup.kill()
                sigkills += 1
                if kind == EVERYTHING:
                    for w in workers:
                        os.kill(w["pid"], signal.SIGKILL)
                    sigkills += 2
            kinds.append(kind)
            _assert_mid_stream(res, bs, app_id, inp, produced, seed)
            if kind == WORKER:
                restarted = partial(_restarted, sup, k % 2, victim["restarts"] + 1)
                fleet.wait(restarted, "the supervisor to restart the worker", 30)
            else:
                # orphaned workers stop by themselves; a new supervisor takes their state over
                gone = partial(_all_gone, [w["pid"] for w in workers])
                fleet.wait(gone, "the old workers to exit", 60)
                sup = fleet.start()
        produce(bs, inp, data[produced:])
        counts, _ = expected(data)
        fleet.wait(partial(res.complete, counts), "all outputs", 180)
        fleet.wait(sup.ready, "both workers ready at the end", 120)
        assert sup.stop() == 0, sup.tail()
        elapsed = time.monotonic() - t0
        verdicts = check_exact(res, data, inp)
    finally:
        fleet.kill()
        res.close()
    assert len(kinds) == KILLS
    print(
        f"processes 2: {len(kinds)} kills ({sigkills} SIGKILLs: {kinds.count(WORKER)} of a "
        f"worker, {kinds.count(SUPERVISOR)} of the supervisor, {kinds.count(EVERYTHING)} of "
        f"all three) in {elapsed:.1f}s (seed {seed}); {verdicts}"
    )


def _reached(res: Results, n: int) -> bool:
    return res.total >= n


def _restarted(sup: Supervised, index: int, restarts: int) -> bool:
    return bool(sup.workers()[index]["restarts"] >= restarts)


def _all_gone(pids: list[int]) -> bool:
    return all(pid_gone(p) for p in pids)


def _assert_mid_stream(
    res: Results, bs: str, app_id: str, inp: str, produced: int, seed: int
) -> None:
    """Right after a kill: outputs are out, and the input produced so far is unfinished (the
    group's committed offsets, which a transaction moves with its outputs, fall short)."""
    done = committed_offsets(bs, app_id, inp, PARTITIONS)
    res.poll()
    assert 0 < done < produced, f"committed {done} of {produced} input records (seed {seed})"
    assert 0 < res.total < produced, f"{res.total} outputs read of {produced} (seed {seed})"


class _Fleet:
    """The supervisors of the processes run, one after another, on one state directory."""

    def __init__(
        self,
        tmp: Path,
        bootstrap: str,
        app_id: str,
        topics: tuple[str, str, str],
        res: Results,
        seed: int,
    ) -> None:
        self.tmp, self.bootstrap, self.app_id, self.topics = tmp, bootstrap, app_id, topics
        self.res, self.seed = res, seed
        self.sups: list[Supervised] = []

    def start(self) -> Supervised:
        sup = start_supervisor(
            self.tmp,
            self.bootstrap,
            self.app_id,
            self.topics,
            2 * DELAY,
            guarantee="exactly_once_v2",
            session_ms=SESSION_MS,
            log_name=f"supervisor-{len(self.sups)}.log",
        )
        self.sups.append(sup)
        return sup

    def wait(self, done: Callable[[], bool], what: str, secs: float) -> None:
        try:
            self.res.wait(done, f"{what} (seed {self.seed})", secs)
        except AssertionError as e:
            tail = self.sups[-1].tail() if self.sups else ""
            raise AssertionError(f"{e}\n--- supervisor log:\n{tail}") from None

    def kill(self) -> None:
        for sup in self.sups:
            sup.kill()


def _check_stores(
    bs: str,
    app_id: str,
    inp: str,
    cnt: str,
    sm: str,
    data: list[tuple[str, int, int]],
    tmp_path: Path,
) -> None:
    """The stores, restored from their changelogs by a new instance, hold the final values."""
    counts, sums = expected(data)
    app = App(
        stateful_topology(inp, cnt, sm),
        app_id,
        bs,
        config=fast_group({"state_dir": str(tmp_path / "verify")}),
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=120)
        running = app.store("running")
        assert {k: running.get(k) for k in counts} == counts
        window_sums = app.store("sums")
        got = {}
        for wk in sums:
            key, start = wk.split("@")
            (found,) = window_sums.fetch(key, int(start), int(start))
            got[wk] = found[1]
            assert found[0] == int(start) and int(start) % WINDOW_MS == 0
        assert got == sums
    finally:
        app.close()
