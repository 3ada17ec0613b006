"""A worker killed between sending its offsets into a transaction and committing it: the
restarted app fences the predecessor rather than waiting out its transaction (or hanging).

Such a kill leaves the offsets pending in the group coordinator, and a read_committed consumer
cannot read the group's committed offsets until that transaction is over (KIP-447). The test
plays the predecessor with plain confluent-kafka producers (its transactional ids: per task
under exactly_once, the instance's under exactly_once_v2), left open for a minute, and checks
that every output is out well before then, exactly once (`e2e.independent_reader`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from e2e.pipelines import expected, make_input
from e2e.support import Results, check_exact, create_topics, produce, require_kafka, worker

PARTITIONS = 4


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "guarantee",
    [
        pytest.param(
            "exactly_once",
            marks=pytest.mark.xfail(
                reason="open: per-task exactly_once restarted after a "
                "kill between sending offsets and committing wrote wrong window sums (398 of "
                "2,000 in one run); the cause (kstream or this stand-in predecessor) is not found",
                strict=False,
            ),
        ),
        "exactly_once_v2",
    ],
)
def test_restart_after_a_kill_between_sending_offsets_and_committing(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, guarantee: str
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("pending")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    data = make_input(2_000, 100)
    produce(bs, inp, data)
    state = tmp_path / "state-w"
    if guarantee == "exactly_once_v2":
        # the instance's process id, kept in its state directory, names its transactional id
        (state / app_id).mkdir(parents=True)
        (state / app_id / "process-id").write_text("predecessor")
        txn_ids = [f"{app_id}-predecessor-1"]
    else:
        txn_ids = [f"{app_id}-0_{p}" for p in range(PARTITIONS)]
    # The predecessor: transactions holding offsets pending for the app's group, left open
    # (a minute before the broker would abort them); its producers are kept, unused, until
    # the end, as a killed process leaves its transactions.
    group = Consumer({"bootstrap.servers": bs, "group.id": app_id, "log_level": 3})
    predecessors: list[Producer] = []
    for txn_id in txn_ids:
        p = Producer(
            {
                "bootstrap.servers": bs,
                "transactional.id": txn_id,
                "transaction.timeout.ms": 60_000,
                "log_level": 3,
            }
        )
        p.init_transactions(30)
        p.begin_transaction()
        offsets = [TopicPartition(inp, n, 1) for n in range(PARTITIONS)]
        p.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
        predecessors.append(p)
    res = Results(bs, cnt, sm)
    w = worker(tmp_path, "w", bs, app_id, inp, cnt, sm, "--guarantee", guarantee)
    try:
        t0 = time.monotonic()
        w.start()
        counts, _ = expected(data)
        # well before the predecessor's transactions would time out
        res.wait(partial(res.complete, counts), "all outputs", 40, w)
        took = time.monotonic() - t0
        res.wait(w.running, "the worker to run", 30, w)
        assert w.stop() == 0, w.tail()
        verdicts = check_exact(res, data, inp)
    finally:
        if w.alive():
            w.kill()
        res.close()
        group.close()
    print(f"{guarantee}: all outputs {took:.1f}s after the start; {verdicts}")
