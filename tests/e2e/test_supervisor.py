"""`kstreamd run --processes 2`: one supervisor, two worker processes of one app, on the broker.

Workers are SIGKILLed while records flow and the counts stay exact; SIGTERM to the supervisor
closes every worker and exits 0; the supervisor's one address serves both workers' metrics,
health for the whole app, and key queries answered by the owning worker.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from support.exposition import lint_exposition

from e2e.pipelines import expected, make_input
from e2e.supervised import Supervised, pid_gone, start_supervisor
from e2e.support import Results, check_exact, create_topics, produce, require_kafka


def wait(res: Results, sup: Supervised, done: Callable[[], bool], what: str, secs: float) -> None:
    """`res.wait`, failing with the supervisor's log (a hang guard, not a timing assertion)."""
    try:
        res.wait(done, what, secs)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- supervisor log:\n{sup.tail()}") from None


def reached(res: Results, outputs: int) -> bool:
    return res.total >= outputs


def restarted(sup: Supervised, index: int, restarts: int) -> bool:
    return bool(sup.workers()[index]["restarts"] == restarts)


def restarts_in_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kstream_supervisor_worker_restarts_total{"):
            labels, value = line.rsplit(" ", 1)
            worker = labels.split('instance_id="')[1].split('"')[0]
            out[worker] = float(value)
    return out


RECORDS = 6_000
CHUNKS = 5
KEYS = 200


@pytest.mark.timeout(300)
def test_workers_killed_mid_stream_keep_counts_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = (unique_name("in"), unique_name("counts"), unique_name("sums"))
    create_topics(bs, 4, *topics)
    data = make_input(RECORDS, KEYS)
    counts, _ = expected(data)
    chunk = RECORDS // CHUNKS
    kills = CHUNKS - 1
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # an independent read_committed reader: each count exactly once, without kstream's help
    res = Results(bs, topics[1], topics[2])
    # 4 ms per record holds each worker under 250 records/s, so every kill lands with most of
    # a chunk still to process however fast the engine gets and however long the supervisor
    # takes to answer who to kill (at 1 ms a loaded machine once let a chunk finish first); it
    # does not change results
    sup = start_supervisor(tmp_path, bs, unique_name("sup"), topics, 0.004)
    produced = 0
    killed: list[int] = []
    try:
        for k in range(kills):
            wait(res, sup, sup.ready, "both workers ready", 120)
            produce(bs, topics[0], data[produced : produced + chunk])
            produced += chunk
            target = res.total + rng.randint(100, 300)
            wait(res, sup, partial(reached, res, target), f"{target} outputs (seed {seed})", 120)
            victim = sup.workers()[k % 2]
            restarts = int(victim["restarts"])
            os.kill(victim["pid"], signal.SIGKILL)
            killed.append(victim["pid"])
            res.poll()
            # mid-stream: outputs are out, and input produced before the kill is still pending
            assert 0 < res.total < produced, (k, res.total, produced, seed)
            wait(
                res,
                sup,
                partial(restarted, sup, k % 2, restarts + 1),
                "the supervisor to notice the kill",
                30,
            )
        wait(res, sup, sup.ready, "both workers ready after the last kill", 120)
        produce(bs, topics[0], data[produced:])
        wait(res, sup, lambda: res.complete(counts), f"all outputs (seed {seed})", 180)
        status, text = sup.get("/metrics")
        assert status == 200
        counted = restarts_in_metrics(text.decode())
        assert counted == {"sup-0": kills - kills // 2, "sup-1": kills // 2}, counted
        assert sup.stop() == 0, sup.tail()
    finally:
        if sup.proc.poll() is None:
            sup.proc.kill()
            sup.proc.wait()
    log = sup.tail(200_000)
    assert log.count("was killed by SIGKILL; restart") == kills, log
    assert all(pid_gone(p) for p in killed)
    check_exact(res, data, topics[0])
    res.close()


@pytest.fixture(scope="module")
def fleet(
    kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Supervised, dict[str, int]]]:
    """A supervised app that has processed 1,000 records, both workers ready, and 200 more
    after that (so each worker has consumed records, however fast the first one was alone)."""
    bs = kafka_broker.bootstrap_servers
    tmp = tmp_path_factory.mktemp("fleet")
    # unique on the broker: each pytest-xdist worker that runs a test of this module builds
    # its own fleet, and tmp names repeat across workers
    suffix = f"{tmp.name.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    topics = (f"fleet-in-{suffix}", f"fleet-counts-{suffix}", f"fleet-sums-{suffix}")
    create_topics(bs, 4, *topics)
    data = make_input(1_000, 50)
    produce(bs, topics[0], data)
    counts, _ = expected(data)
    sup = start_supervisor(tmp, bs, f"fleet-{suffix}", topics, 0.0)
    res = Results(bs, topics[1], topics[2])
    try:
        wait(res, sup, lambda: res.complete(counts), "all outputs", 120)
        wait(res, sup, sup.ready, "both workers ready", 120)
        # under the cooperative protocol a joining worker is ready after a first round that
        # gives it nothing and takes its partitions in the second: produce once both have some
        wait(res, sup, lambda: _both_assigned(sup), "both workers assigned", 120)
        more = make_input(200, 50, start_ts=data[-1][2] + 10)
        produce(bs, topics[0], more)
        counts, _ = expected(data + more)
        wait(res, sup, lambda: res.complete(counts), "the later outputs", 120)
        yield sup, counts
    finally:
        res.close()
        if sup.proc.poll() is None:
            sup.proc.kill()
            sup.proc.wait()


def test_one_address_serves_both_workers(fleet: tuple[Supervised, dict[str, int]]) -> None:
    sup, counts = fleet
    # a worker that took a partition in a late rebalance (the 200 later records) is briefly
    # not ready: readiness is asked for once it settles
    deadline = time.monotonic() + 60
    while not sup.ready() and time.monotonic() < deadline:
        time.sleep(0.2)
    status, body = sup.health()
    assert status == 200 and body["state"] == "RUNNING"
    assert [(w["instance_id"], w["alive"], w["ready"]) for w in body["workers"]] == [
        ("sup-0", True, True),
        ("sup-1", True, True),
    ]
    assert sup.get("/health/live", token=None)[0] == 200
    assert sup.get("/metrics", token=None)[0] == 401
    status, raw = sup.get("/metrics")
    assert status == 200
    text = raw.decode()
    assert lint_exposition(text) == []
    for worker in ("sup-0", "sup-1"):
        assert f'instance_id="{worker}"' in _lines(text, "kstream_app_info")
        assert f'instance_id="{worker}"' in _lines(text, "process_cpu_seconds_total")
    consumed = _lines(text, "kstream_records_consumed_total{")
    assert {p for p in ("sup-0", "sup-1") if f'instance_id="{p}"' in consumed} == {"sup-0", "sup-1"}
    assert 'kstream_supervisor_workers_alive{app_id="' in text
    assert restarts_in_metrics(text) == {"sup-0": 0.0, "sup-1": 0.0}
    # each series once, though two workers serve the same families
    series = [ln.rsplit(" ", 1)[0] for ln in text.splitlines() if not ln.startswith("#")]
    assert len(series) == len(set(series))
    # every key's count, asked of the one address, comes from the worker that owns it
    owners = set()
    for key in sorted(counts)[:12]:
        status, raw = sup.get(f"/stores/running/keys/{key}")
        assert status == 200, raw
        answer = json.loads(raw)
        assert answer["value"] == counts[key]
        owners.add(answer["instance_id"])
    assert owners == {"sup-0", "sup-1"}


def test_sigterm_closes_every_worker_and_exits_0(
    fleet: tuple[Supervised, dict[str, int]],
) -> None:
    sup, _ = fleet
    pids = [w["pid"] for w in sup.workers()]
    assert sup.stop() == 0, sup.tail()
    log = sup.tail(200_000)
    for worker in ("sup-0", "sup-1"):
        assert f"worker {worker} closed cleanly" in log
    assert all(pid_gone(p) for p in pids)


def _both_assigned(sup: Supervised) -> bool:
    """Whether each worker reports input partitions assigned (`kstream_assigned_partitions`)."""
    status, raw = sup.get("/metrics")
    if status != 200:
        return False
    assigned = [
        ln for ln in raw.decode().splitlines() if ln.startswith("kstream_assigned_partitions{")
    ]
    return all(
        any(f'instance_id="{w}"' in ln and float(ln.rsplit(" ", 1)[1]) > 0 for ln in assigned)
        for w in ("sup-0", "sup-1")
    )


def _lines(text: str, prefix: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if ln.startswith(prefix))
