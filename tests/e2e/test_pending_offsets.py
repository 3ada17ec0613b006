"""A worker killed between sending its offsets into a transaction and committing it: the
restarted app fences the predecessor rather than waiting out its transaction (or hanging), and
nothing of the predecessor's open transaction reaches its outputs or its state.

Such a kill leaves the offsets pending in the group coordinator, and a read_committed consumer
cannot read the group's committed offsets until that transaction is over (KIP-447). The test
plays the predecessor with plain confluent-kafka producers using its transactional ids (per task
under exactly_once, the instance's under exactly_once_v2) and writes, in each open transaction,
what the real one had written by then (`play_predecessor`): the outputs and changelog records of
the first records of its input partitions, and those partitions' offsets, and only those. The
transactions are left open for a minute; the test checks that every output is out well before
then, exactly once (`e2e.independent_reader`), so that the restarted app neither restored the
aborted changelog records nor started after the aborted offsets nor let the aborted outputs be
read.

A transaction holds the offsets of its own input partitions only, as a real predecessor's does:
an earlier version of this stand-in sent every input partition's offsets in every task's
transaction, which no kstream instance does under exactly_once (a task's transaction carries
its own partition's offsets), so it tested a state no real kill leaves.

`check_exact` checks the input topic first: a key's records out of order there (a retried
batch landing after later ones, which only an idempotent producer rules out) keep its running
counts exact and make its running sums wrong, the very signature (hundreds of wrong sums, no
wrong count) this test once failed with, when the input was produced without idempotence.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from e2e.independent_reader import IndependentReader
from e2e.pipelines import WINDOW_MS, expected, make_input, stateful_topology
from e2e.support import Results, check_exact, create_topics, produce, require_kafka, worker
from kstream.kafka.admin import Admin
from kstream.state.keys import esc, ts8

PARTITIONS = 4
# input records of each partition the predecessor had processed in its open transaction
DONE_PER_PARTITION = 40
_LONG = struct.Struct(">q")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_restart_after_a_kill_between_sending_offsets_and_committing(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, guarantee: str
) -> None:
    restart_after_a_kill(kafka_broker, unique_name, tmp_path, guarantee, offsets_sent=True)


@pytest.mark.timeout(300)
def test_restart_after_a_kill_before_sending_offsets(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """exactly_once, killed with outputs and changelog records in its open transactions but
    no offsets yet: the committed offsets read at once, so the stores are restored while the
    transactions are still open (up to their changelogs' last stable offsets, before them),
    and the tasks' producers fence them only after that."""
    restart_after_a_kill(kafka_broker, unique_name, tmp_path, "exactly_once", offsets_sent=False)


def restart_after_a_kill(
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    guarantee: str,
    offsets_sent: bool,
) -> None:
    """Play the predecessor (`play_predecessor`), start the app under `guarantee`, and check
    its outputs are all out well before the predecessor's transactions would time out, exactly
    once."""
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("pending")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    data = make_input(2_000, 100)
    produce(bs, inp, data)
    state = tmp_path / "state-w"
    if guarantee == "exactly_once_v2":
        # the instance's process id, kept in its state directory, names its transactional id;
        # its one transaction holds every task's writes
        (state / app_id).mkdir(parents=True)
        (state / app_id / "process-id").write_text("predecessor")
        txns = {f"{app_id}-predecessor-1": list(range(PARTITIONS))}
    else:
        txns = {f"{app_id}-0_{p}": [p] for p in range(PARTITIONS)}
    group = Consumer({"bootstrap.servers": bs, "group.id": app_id, "log_level": 3})
    predecessors, pending = play_predecessor(
        bs, app_id, inp, cnt, sm, txns, group if offsets_sent else None
    )
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
        # the aborted outputs are there for a read_uncommitted reader: the app had them to
        # hide, not nothing
        with IndependentReader(bs, [cnt], isolation="read_uncommitted") as everything:
            everything.read_to_end(60)
            assert everything.count(cnt) == len(data) + pending, everything.count(cnt)
    finally:
        if w.alive():
            w.kill()
        res.close()
        group.close()
    sent = "sent" if offsets_sent else "not sent"
    print(
        f"{guarantee}, offsets {sent}: {len(predecessors)} predecessor transaction(s) aborted, "
        f"{pending} of their outputs hidden; all outputs {took:.1f}s after the start; {verdicts}"
    )


def play_predecessor(
    bootstrap: str,
    app_id: str,
    input_topic: str,
    counts_topic: str,
    sums_topic: str,
    txns: dict[str, list[int]],
    group: Consumer | None,
) -> tuple[list[Producer], int]:
    """Leave open, per transactional id of `txns`, the transaction a predecessor killed before
    its commit leaves: for each of its input partitions, the outputs and changelog records of
    the partition's first `DONE_PER_PARTITION` records, then (with `group`, the app's group)
    the partition's next offset sent to the transaction. Returns the producers (kept, unused,
    until the end, as a killed process leaves its transactions) and the number of count
    outputs written.

    The changelog topics are created as the app creates them (the predecessor was the same
    app); their records are encoded as the stores log them: a running count under the key, a
    window's sum under the key followed by the window's start.
    """
    compiled = stateful_topology(input_topic, counts_topic, sums_topic).compile(app_id)
    admin = Admin(bootstrap)
    for name, topic in compiled.internal_topics.items():
        admin.create_topic(name, PARTITIONS, topic.topic_config())
    running_log, sums_log = f"{app_id}-running-changelog", f"{app_id}-sums-changelog"
    with IndependentReader(bootstrap, [input_topic], isolation="read_uncommitted") as r:
        r.read_to_end(60)
        first: dict[int, list[tuple[str, int, int]]] = {}
        for u in r.records[input_topic]:
            done = first.setdefault(u.partition, [])
            if len(done) < DONE_PER_PARTITION:
                assert isinstance(u.key, str) and isinstance(u.value, int)
                done.append((u.key, u.value, u.timestamp))
    producers: list[Producer] = []
    written = 0
    for txn_id, partitions in txns.items():
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": txn_id,
                "transaction.timeout.ms": 60_000,
                # the app's sinks' partitioner: each output lands where the app writes its key
                "partitioner": "murmur2_random",
                "log_level": 3,
            }
        )
        p.init_transactions(30)
        p.begin_transaction()
        offsets = []
        for n in partitions:
            # what Tally computed for these records, from empty stores
            count: dict[str, int] = {}
            total: dict[str, int] = {}
            for key, value, ts in first[n]:
                count[key] = count.get(key, 0) + 1
                start = ts - ts % WINDOW_MS
                window = f"{key}@{start}"
                total[window] = total.get(window, 0) + value
                kb = key.encode()
                n_bytes, sum_bytes = _LONG.pack(count[key]), _LONG.pack(total[window])
                p.produce(counts_topic, n_bytes, kb, timestamp=ts)
                p.produce(sums_topic, sum_bytes, window.encode(), timestamp=ts)
                p.produce(running_log, n_bytes, kb, partition=n, timestamp=ts)
                window_key = esc(kb) + ts8(start)
                p.produce(sums_log, sum_bytes, window_key, partition=n, timestamp=ts)
                written += 1
            offsets.append(TopicPartition(input_topic, n, len(first[n])))
        p.flush(30)
        if group is not None:
            p.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
        producers.append(p)
    return producers, written
