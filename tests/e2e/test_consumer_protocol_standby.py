"""Standby replicas under Kafka's consumer group protocol (KIP-848, `rebalance_protocol=
"consumer"`) and exactly_once_v2, on Apache Kafka: a SIGKILLed owner's task resumes from the
survivor's warm copy, restoring only the tail of its changelogs, with results exact.

As test_standby_failover's mid-stream case, under the other protocol: two worker processes run
the stateful pipeline with `num_standby_replicas=1` over two input partitions, each running
one task and keeping the standby of the other's; the owner of one task is SIGKILLed while it
processes (inside its transactions). Either both start at once, or one runs both tasks alone
and the other joins (warming up first): the first keeps the task it gives up as a standby,
and keeps it while the task is on its way to the newcomer (not dropped and rebuilt from the
changelog's start), and then the newcomer is the one killed. The group's session is short (the
group config consumer.session.timeout.ms, set on the broker: the protocol refuses the
client's), so the coordinator gives the dead member's task to the survivor within seconds; the
survivor's restore goes on from its standby's position, and a plain read_committed reader
(e2e.independent_reader) finds every output once.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from e2e.pipelines import expected, make_input
from e2e.support import Results, Worker, check_exact, create_topics, produce, require_kafka, worker
from e2e.test_incremental_rebalance import _group_session
from e2e.test_standby_failover import (
    _RESTORED,
    KEYS,
    PARTITIONS,
    TAIL_SHARE,
    _changelog_ends,
    _log_after,
    _wait_for,
)

PROTOCOLS = [
    # Apache Kafka 4.0+ (support.kafka_features): skipped on an older broker
    pytest.param("consumer", marks=pytest.mark.kafka_feature("consumer_group_protocol")),
    # Kafka Streams' own protocol (KIP-1071, 4.2+): the coordinator places the standbys
    pytest.param("streams", marks=pytest.mark.kafka_feature("streams_group_protocol")),
]

_PUBLISHED = re.compile(r"published partitions (\{.*\}), standbys (\{.*\})$", re.MULTILINE)
SESSION_MS = 2000
"""The group's session timeout: how soon the coordinator gives the dead member's task away."""
FIRST = 6_000
SECOND = 9_000
"""About 2 s of processing for the two tasks at 2,000 records/s each (--delay): the kill lands
well inside it however slowly the reader follows."""


def consumer_worker(tmp: Path, name: str, *args: str, protocol: str = "consumer") -> Worker:
    """e2e.support.worker's pipeline worker, run under a broker-assigned group protocol."""
    return worker(tmp, name, *args, "--rebalance-protocol", protocol)


def _one_active_one_standby(w: Worker) -> bool:
    """The worker's last published assignment is one active and one standby partition.

    (Not test_standby_failover's "standby tasks now" line: an instance that ran both tasks
    before the other joined keeps the one it gives up as a standby, "kept as a standby", and
    the placement, which agrees, logs nothing more.)"""
    published = _PUBLISHED.findall(w.logs[-1].read_text(errors="replace"))
    if not published:
        return False
    active, standby = (ast.literal_eval(held) for held in published[-1])
    return [len(p) for p in active.values()] == [len(p) for p in standby.values()] == [1]


def group_type(bootstrap: str, group: str) -> ConsumerGroupType:
    """The protocol of `group` as its coordinator describes it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return ConsumerGroupType(desc.type)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("start", ["together", "joining"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_survivor_takes_over_from_its_standby_under_the_consumer_protocol(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, start: str, protocol: str
) -> None:
    """`together`: both instances start at once, and `a` is killed. `joining`: `a` runs both
    tasks alone, `b` joins (warming up first), `a` keeps the task it gives up as a standby,
    and `b` is killed: the survivor's warm copy is the one it kept."""
    require_kafka(kafka_broker)
    began = time.monotonic()
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name(f"standby-{protocol}")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    _group_session(bs, app_id, SESSION_MS, protocol)
    # about 2,000 records/s per task, so the kill lands inside the owner's transactions; the
    # transaction it leaves open with offsets pending is aborted by the broker after 10 s
    extra = ("--guarantee", "exactly_once_v2", "--standbys", "1", "--delay", "0.0005")
    extra += ("--kafka", "transaction.timeout.ms=10000")
    a = consumer_worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *extra, protocol=protocol)
    b = consumer_worker(tmp_path, "b", bs, app_id, inp, cnt, sm, *extra, protocol=protocol)
    a.start()
    victim, survivor = (a, b) if start == "together" else (b, a)
    results = Results(bs, cnt, sm)
    data = make_input(FIRST + SECOND, KEYS)
    try:
        if start == "joining":
            _wait_for("a to run", a.running, 90, a)
            produce(bs, inp, data[:FIRST])
        b.start()
        for w in (a, b):
            _wait_for(
                "one active task and one standby on each instance",
                lambda w=w: w.running() and _one_active_one_standby(w),
                90,
                a,
                b,
            )
        if protocol == "consumer":
            assert group_type(bs, app_id) == ConsumerGroupType.CONSUMER
        if start == "together":
            produce(bs, inp, data[:FIRST])
        counts, _ = expected(data[:FIRST])
        results.wait(lambda: results.complete(counts), "the first outputs", 120, a, b)
        # with two instances every task's standby ends on the instance not running it: a copy
        # dropped on the way there is rebuilt from its changelog's start
        for w in (a, b):
            log = w.logs[-1].read_text(errors="replace")
            assert "dropped (placed elsewhere)" not in log, w.tail(20_000)
        at = len(survivor.logs[-1].read_text(errors="replace"))
        produce(bs, inp, data[FIRST:])
        results.wait_total(FIRST + SECOND // 8, "the second part to flow", 60, a, b)
        victim.kill()  # SIGKILL: no commit, no leaving the group, no tombstone in the registry
        killed = time.monotonic()
        results.poll()
        # mid-stream: some of the second part is out, and some is still to come
        assert FIRST < results.total < FIRST + SECOND, results.total
        counts, _ = expected(data)
        results.wait(lambda: results.complete(counts), "every output after the kill", 120, a, b)
        resumed = time.monotonic() - killed
        verdicts = check_exact(results, data, inp)
        ends = _changelog_ends(bs, app_id)
        after = _log_after(survivor, at)
        taken = re.findall(r"task (\d+_\d+): taking over its standby stores", after)
        assert taken, f"the survivor took no task over from a standby:\n{after[-3000:]}"
        restores = [m for m in _RESTORED.finditer(after) if f"{m[1]}_{m[2]}" in taken]
        assert restores, after[-3000:]
        tails = []
        for m in restores:
            store, partition, applied = m[3], int(m[2]), int(m[4])
            end = ends[(f"{app_id}-{store}-changelog", partition)]
            tails.append(f"{store}: {applied} of {end}")
            # the restore went on from the standby's position, near the end, not from 0
            assert int(m[5]) > 0, m[0]
            assert applied <= TAIL_SHARE * end, (
                f"store {store!r} partition {partition}: the takeover restored {applied} of "
                f"the changelog's {end} records ({m[0]})"
            )
        assert survivor.stop() == 0, survivor.tail()
    finally:
        for w in (a, b):
            if w.alive():
                w.kill()
        results.close()
    print(
        f"{protocol} protocol ({start}): the survivor took {taken} over from its standby, "
        f"restoring {tails} changelog records; every output {resumed:.1f} s after the kill; "
        + "; ".join(str(v) for v in verdicts)
        + f"; {time.monotonic() - began:.1f} s in all"
    )
