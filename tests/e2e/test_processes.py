"""Several worker processes: a zombie is fenced, a rebalance keeps results exact, and the app
rides out a broker that stops answering for 10 seconds."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.pipelines import expected, make_input
from e2e.support import Results, Worker, check_exact, create_topics, produce, worker
from kstream.kafka.broker import EmbeddedBroker

RECORDS = 12_000
KEYS = 200
SLOW = ("--delay", "0.0005", "--batch", "200")


def _setup(
    bs: str, unique_name: Callable[[str], str]
) -> tuple[str, str, str, str, dict[str, int], dict[str, int]]:
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    create_topics(bs, 4, inp, cnt, sm)
    data = make_input(RECORDS, KEYS)
    produce(bs, inp, data)
    counts, sums = expected(data)
    return inp, cnt, sm, unique_name("app"), counts, sums


def _finish(res: Results, counts: dict[str, int], sums: dict[str, int], *ws: Worker) -> None:
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
    check_exact(res, counts, sums)
    res.close()


@pytest.mark.timeout(600)
def test_zombie_is_fenced(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm, app_id, counts, sums = _setup(bs, unique_name)
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
    _finish(res, counts, sums, a, b)


@pytest.mark.timeout(600)
def test_second_worker_joins_then_first_leaves(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm, app_id, counts, sums = _setup(bs, unique_name)
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
    _finish(res, counts, sums, b)
    log_b = b.tail(400_000)
    assert log_b.count("assigned tasks") >= 2  # shared, then everything after a left


@pytest.mark.timeout(600)
def test_broker_paused_for_ten_seconds(unique_name: Callable[[str], str], tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        bs = broker.bootstrap_servers
        inp, cnt, sm, app_id, counts, sums = _setup(bs, unique_name)
        res = Results(bs, cnt, sm)
        a = worker(tmp_path, "a", bs, app_id, inp, cnt, sm, *SLOW).start()
        pid = broker.pid
        assert pid is not None
        try:
            res.wait_progress(1000, 120, a)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(10)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert a.alive(), a.tail()
        except BaseException:
            if a.alive():
                a.kill()
            raise
        _finish(res, counts, sums, a)
