"""Standby replicas on Apache Kafka: a SIGKILLed owner's task resumes from the survivor's warm
copy, restoring only the tail of its changelogs, with results exact.

Two worker processes run the stateful pipeline (a running count and a windowed sum per key)
with `num_standby_replicas=1` over two input partitions: each runs one task and keeps the
standby of the other's (kstream.runtime.placement never puts a standby with its active task).
The owner of one task is killed with SIGKILL, once while idle and once while it processes
(inside its transactions); the survivor takes that task over from its standby. Its log says
how many changelog records each store's restore applied, which must be a small part of what
the changelog holds (a restore from nothing reads all of it), and a plain read_committed
reader (e2e.independent_reader) finds every output once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.independent_reader import IndependentReader
from e2e.pipelines import expected, make_input
from e2e.support import Results, Worker, check_exact, create_topics, produce, require_kafka, worker

PARTITIONS = 2
KEYS = 400
FIRST = 12_000
SECOND = 3_000
#: the takeover may restore at most this part of a changelog partition (a restore without a
#: standby reads all of it; with one, only what the standby had not applied when the owner died)
TAIL_SHARE = 0.1

_RESTORED = re.compile(
    r"task (\d+)_(\d+): restored store '([^']+)': (\d+) record\(s\) applied.*offsets (\d+)\.\.(\d+)"
)


def _log_after(w: Worker, start: int) -> str:
    return w.logs[-1].read_text(errors="replace")[start:]


def _wait_for(what: str, done: Callable[[], bool], deadline_s: float, *workers: Worker) -> None:
    end = time.monotonic() + deadline_s
    while not done():
        if time.monotonic() > end:
            raise AssertionError(
                f"gave up waiting for {what}\n" + "\n".join(w.tail() for w in workers)
            )
        time.sleep(0.1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("when", ["idle", "mid-stream"])
def test_the_survivor_takes_over_from_its_standby_and_restores_only_the_tail(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, when: str
) -> None:
    """`idle`: the owner is killed between transactions, its standby caught up; `mid-stream`:
    while it processes the second part of the input (slowed down, so the kill lands inside
    its transactions), when the standby is a commit or two behind and the owner's last
    transaction never commits: the standby must not have applied any of it."""
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("standby")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    extra: tuple[str, ...] = ("--guarantee", "exactly_once_v2", "--standbys", "1")
    if when == "mid-stream":
        # about 2,000 records/s per task; a transaction the kill leaves open with offsets
        # pending is aborted by the broker after 10 s (Kafka Streams' setting), not 60
        extra += ("--delay", "0.0005", "--kafka", "transaction.timeout.ms=10000")
    a = worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *extra).start()
    b = worker(tmp_path, "b", bs, app_id, inp, cnt, sm, *extra).start()
    results = Results(bs, cnt, sm)
    try:
        # each instance runs one task and keeps the other's standby
        for w in (a, b):
            _wait_for(
                "one active task and one standby on each instance",
                lambda w=w: w.running() and "standby tasks now ['0_" in w.logs[-1].read_text(),
                90,
                a,
                b,
            )
        data = make_input(FIRST + SECOND, KEYS)
        produce(bs, inp, data[:FIRST])
        counts, _ = expected(data[:FIRST])
        results.wait(lambda: results.complete(counts), "the first outputs", 120, a, b)
        at = len(b.logs[-1].read_text(errors="replace"))
        if when == "idle":
            # the standby applies each commit within a fetch or two; leave it that long before
            # the kill (were it further behind, the tail restored below would only be longer)
            time.sleep(2)
            a.kill()  # SIGKILL: no commit, no leaving the group, no tombstone in the registry
            produce(bs, inp, data[FIRST:])
        else:
            produce(bs, inp, data[FIRST:])
            results.wait_total(FIRST + SECOND // 4, "the second part to flow", 60, a, b)
            a.kill()
        counts, _ = expected(data)
        results.wait(lambda: results.complete(counts), "every output after the kill", 120, b)
        check_exact(results, data, inp)
        ends = _changelog_ends(bs, app_id)
        after = _log_after(b, at)
        taken = re.findall(r"task (\d+_\d+): taking over its standby stores", after)
        assert taken, f"the survivor took no task over from a standby:\n{after[-3000:]}"
        restores = [m for m in _RESTORED.finditer(after) if f"{m[1]}_{m[2]}" in taken]
        assert restores, after[-3000:]
        for m in restores:
            store, partition, applied = m[3], int(m[2]), int(m[4])
            end = ends[(f"{app_id}-{store}-changelog", partition)]
            # the restore went on from the standby's position, near the end, not from 0
            assert int(m[5]) > 0, m[0]
            assert applied <= TAIL_SHARE * end, (
                f"store {store!r} partition {partition}: the takeover restored {applied} of "
                f"the changelog's {end} records ({m[0]})"
            )
    finally:
        for w in (a, b):
            if w.alive():
                w.stop()
        results.close()


def _changelog_ends(bootstrap: str, app_id: str) -> dict[tuple[str, int], int]:
    """The end offset of every changelog partition of the pipeline's two stores."""
    topics = [f"{app_id}-{s}-changelog" for s in ("running", "sums")]
    with IndependentReader(bootstrap, topics) as r:
        return r.ends()
