"""Several worker processes: a zombie is fenced, a rebalance keeps results exact, and the app
rides out a broker that stops answering for 10 seconds. Outputs are checked by an independent
read_committed reader (`e2e.independent_reader`), so these run on Apache Kafka."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from e2e.pipelines import expected, make_input
from e2e.support import (
    Results,
    Worker,
    check_exact,
    create_topics,
    produce,
    require_kafka,
    worker,
)
from kstream.testing.kafka import KafkaCluster

RECORDS = 12_000
KEYS = 200
SLOW = ("--delay", "0.0005", "--batch", "200")
# A request the paused broker took in and never answered fails only after librdkafka's
# socket.timeout.ms (60 s by default; Java clients' request.timeout.ms is 30 s), and a
# transaction it left is aborted within kstream's 30 s transaction call timeout: the worker
# of the pause test waits 10 s for an answer, so it is back within RESUME_BOUND_S.
PAUSE_KAFKA = ("--kafka", "socket.timeout.ms=10000")
RESUME_BOUND_S = 60.0


Input = list[tuple[str, int, int]]


def _setup(bs: str, unique_name: Callable[[str], str]) -> tuple[str, str, str, str, Input]:
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    create_topics(bs, 4, inp, cnt, sm)
    data = make_input(RECORDS, KEYS)
    produce(bs, inp, data)
    return inp, cnt, sm, unique_name("app"), data


def _finish(res: Results, data: Input, inp: str, *ws: Worker) -> None:
    counts, _ = expected(data)
    try:
        res.wait(lambda: res.complete(counts), "all outputs", 300, *ws)
        for w in ws:
            if w.alive():
                res.wait(w.running, "the worker to run", 120, w)
                try:
                    code = w.stop()
                except Exception:
                    w.signal(signal.SIGUSR1)
                    time.sleep(1)
                    raise AssertionError(f"worker did not stop:\n{w.tail(20_000)}") from None
                assert code == 0, w.tail()
    finally:
        for w in ws:
            if w.alive():
                w.kill()
    check_exact(res, data, inp)
    res.close()


@pytest.mark.timeout(600)
def test_zombie_is_fenced(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm, app_id, data = _setup(bs, unique_name)
    res = Results(bs, cnt, sm)
    a = worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *SLOW).start()
    b = worker(tmp_path, "b", bs, app_id, inp, cnt, sm, *SLOW)
    try:
        res.wait_progress(1000, 120, a)
        a.signal(signal.SIGSTOP)
        b.start()
        res.wait_progress(1000, 120, b)  # b owns every task: a's session timed out
        a.signal(signal.SIGCONT)
        res.wait(lambda: "fenced" in a.tail(200_000), "the zombie to be fenced", 120, a)
    except BaseException:
        for w in (a, b):
            if w.alive():
                w.signal(signal.SIGCONT)
        raise
    _finish(res, data, inp, a, b)


@pytest.mark.timeout(600)
def test_second_worker_joins_then_first_leaves(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm, app_id, data = _setup(bs, unique_name)
    res = Results(bs, cnt, sm)
    a = worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *SLOW).start()
    b = worker(tmp_path, "b", bs, app_id, inp, cnt, sm, *SLOW)
    try:
        res.wait_progress(1000, 120, a)
        b.start()
        res.wait(lambda: "assigned tasks" in b.tail(200_000), "b to get tasks", 120, a, b)
        res.wait_progress(1000, 120, a, b)
        assert a.stop() == 0, a.tail()
        res.wait_progress(500, 120, b)
    except BaseException:
        for w in (a, b):
            if w.alive():
                w.kill()
        raise
    _finish(res, data, inp, b)
    log_b = b.tail(400_000)
    assert log_b.count("assigned tasks") >= 2  # shared, then everything after a left


# KSTREAM_LONG=1: on Apache Kafka it passed in one full run (92 s) and in the next missed its
# 60 s bound with one transaction's 200 count records still hidden from read_committed
# readers (last stable offset behind); open, see the README's fault table
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_broker_paused_for_ten_seconds(unique_name: Callable[[str], str], tmp_path: Path) -> None:
    # a broker of its own: pausing the run's shared broker would stall every other test
    with KafkaCluster(nodes=1) as broker:
        node = broker.nodes[0]
        bs = broker.bootstrap_servers
        inp, cnt, sm, app_id, data = _setup(bs, unique_name)
        res = Results(bs, cnt, sm)
        a = worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *SLOW, *PAUSE_KAFKA).start()
        try:
            res.wait_progress(1000, 120, a)
            node.pause()
            try:
                time.sleep(10)
            finally:
                node.resume()
            resumed = time.monotonic()
            assert a.alive(), a.tail()
            counts, _ = expected(data)
            what = f"every output within {RESUME_BOUND_S:g}s of the broker's return"
            res.wait(partial(res.complete, counts), what, RESUME_BOUND_S, a)
            print(f"every output {time.monotonic() - resumed:.1f}s after the broker's return")
        except BaseException:
            if a.alive():
                a.kill()
            raise
        _finish(res, data, inp, a)
