"""Crash test: a stateful pipeline under SIGKILL at random moments stays exact (exactly-once,
with a producer per task and with one per stream thread)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from support.groups import fast_group

from e2e.pipelines import WINDOW_MS, expected, make_input, stateful_topology
from e2e.support import LONG, Results, check_exact, create_topics, produce, worker
from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App, AppState

# Long runs (KSTREAM_LONG=1) push 100k records through 20 kills; the default run 20k through 5,
# each kill still landing mid-stream (asserted at every kill).
RECORDS = 100_000 if LONG else 20_000
KEYS = 500


@pytest.mark.timeout(1800 if LONG else 600)
@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_sigkill_at_random_moments_keeps_results_exact(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path, guarantee: str
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("crash")
    create_topics(bs, 4, inp, cnt, sm)
    data = make_input(RECORDS, KEYS)
    produce(bs, inp, data)
    counts, sums = expected(data)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    kills = 20 if LONG else 5
    batch = "200" if LONG else "500"
    res = Results(bs, cnt, sm)
    # A small per-record delay bounds the worker's speed (about 5k records/s at most), so that
    # every kill lands mid-stream however fast the engine gets; it does not change results.
    w = worker(
        tmp_path,
        "w",
        bs,
        app_id,
        inp,
        cnt,
        sm,
        "--batch",
        batch,
        "--delay",
        "0.0002",
        "--guarantee",
        guarantee,
    )
    done_kills = 0
    try:
        for _ in range(kills):
            w.start()
            res.wait(w.running, "the worker to run", 180, w)
            res.poll()
            # Outputs the last worker committed may still be arriving: count from here.
            remaining = RECORDS - res.total
            target = min(rng.randint(500, RECORDS // (2 * (kills + 2))), remaining // 2)
            if target <= 0:
                break
            res.wait_progress(target, 180, w)
            w.kill()
            res.poll()
            # mid-stream: some outputs are out, and some of the input is still to be processed
            assert 0 < res.total < RECORDS, (res.total, seed)
            done_kills += 1
        w.start()
        res.wait(lambda: res.complete(counts), f"all outputs (seed {seed})", 400, w)
        res.wait(w.running, "the last worker to run", 120, w)
        assert w.stop() == 0, w.tail()
    finally:
        if w.alive():
            w.kill()
    assert done_kills == kills, f"only {done_kills} kills happened mid-stream (seed {seed})"
    check_exact(res, counts, sums)
    res.close()

    # The stores, restored from their changelogs by a new instance, hold the same values.
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
