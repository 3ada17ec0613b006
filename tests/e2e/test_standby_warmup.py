"""Warm-up before joining (KIP-441, as far as the group protocol allows) on Apache Kafka.

A first instance runs the stateful pipeline alone with `num_standby_replicas=1` and builds up
state. A second one starts: before it joins the consumer group it follows the standbys the
placement gives it (every task, since the first instance runs them all) until each is within
`acceptable_recovery_lag` (0 here) of its changelog's end. Only then does it join, so the tasks
the group moves to it start from warm copies: their restores read a small tail, not the
changelogs. A plain read_committed reader finds every output once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.pipelines import expected, make_input
from e2e.support import Results, check_exact, create_topics, produce, require_kafka, worker
from e2e.test_standby_failover import _RESTORED, TAIL_SHARE, _changelog_ends, _wait_for

PARTITIONS = 2
KEYS = 400
FIRST = 12_000
SECOND = 3_000


@pytest.mark.timeout(240)
def test_a_joining_instance_warms_up_before_it_takes_tasks(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("warmup")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    extra = (
        "--guarantee",
        "exactly_once_v2",
        "--standbys",
        "1",
        "--acceptable-recovery-lag",
        "0",
    )
    a = worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *extra).start()
    results = Results(bs, cnt, sm)
    b = None
    try:
        _wait_for("the first instance to run", a.running, 90, a)
        data = make_input(FIRST + SECOND, KEYS)
        produce(bs, inp, data[:FIRST])
        counts, _ = expected(data[:FIRST])
        results.wait(lambda: results.complete(counts), "the first outputs", 120, a)
        ends = _changelog_ends(bs, app_id)
        b = worker(tmp_path, "b", bs, app_id, inp, cnt, sm, *extra).start()
        _wait_for("the second instance to run", b.running, 120, a, b)
        _wait_for(
            "the second instance to take a task",
            lambda: "assigned tasks ['0_" in b.logs[-1].read_text(errors="replace"),
            60,
            a,
            b,
        )
        log = b.logs[-1].read_text(errors="replace")
        warming = log.find("warming up standby tasks ['0_0', '0_1']")
        warmed = log.find("warmed up standby tasks")
        joined = log.find("assigned tasks ['0_")
        assert 0 <= warming < warmed < joined, log[-4000:]
        taken = re.findall(r"task (\d+_\d+): taking over its standby stores", log[warmed:])
        assert taken, log[-4000:]
        restores = [m for m in _RESTORED.finditer(log[warmed:]) if f"{m[1]}_{m[2]}" in taken]
        assert restores, log[-4000:]
        for m in restores:
            store, partition, applied = m[3], int(m[2]), int(m[4])
            end = ends[(f"{app_id}-{store}-changelog", partition)]
            assert int(m[5]) > 0, m[0]  # from the warm copy's position, not from 0
            assert applied <= TAIL_SHARE * end, f"{store}[{partition}]: {applied} of {end}"
        produce(bs, inp, data[FIRST:])
        counts, _ = expected(data)
        results.wait(lambda: results.complete(counts), "every output", 120, a, b)
        check_exact(results, data, inp)
    finally:
        for w in (a, b):
            if w is not None and w.alive():
                w.stop()
        results.close()
