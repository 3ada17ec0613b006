"""Cooperative rebalancing and static membership on Apache Kafka (kstream.runtime.rebalance).

* A second instance joins while input flows: under the cooperative protocol the first one
  keeps half its tasks running through the rebalance (the same task objects, stores never
  closed or restored) and goes on processing; under the eager one every task is closed and
  created again. The records each processed per half second are printed as a timeline.
* A static member (`group_instance_id`) restarted within the session timeout: the group's
  generation does not change and no task moves.
* Worker processes joining, being SIGKILLed and leaving under exactly_once_v2 with the
  cooperative protocol: a plain read_committed reader finds every update once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from support.groups import fast_group

from e2e.pipelines import expected, make_input, stateful_topology
from e2e.support import Results, check_exact, create_topics, produce, require_kafka, worker
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState
from kstream.runtime.rebalance import generation
from kstream.serde import serde

PARTITIONS = 4
KEYS = 200
RATE = 1500  # input records a second while an instance joins
SAMPLE_S = 0.5


class Feeder:
    """Produces the pipeline's input at about `RATE` records a second until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        ks, vs = serde("string"), serde("long")
        step = RATE // 20
        with Producer(self.bootstrap) as p:
            while not self._stop.wait(0.05):
                for k, v, ts in make_input(step, KEYS, start_ts=1_700_000_000_000 + self.sent):
                    p.produce(self.topic, vs.to_bytes(v), ks.to_bytes(k), timestamp=ts)
                self.sent += step
                p.flush()


class Timeline:
    """Samples an app's processed-records counter every `SAMPLE_S` seconds."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), self.app.processed))
            if self._stop.wait(SAMPLE_S):
                return

    def per_slot(self, start: float, end: float) -> list[int]:
        """Records processed in each sample interval that overlaps [start, end]."""
        s = self.samples
        return [
            s[i + 1][1] - s[i][1]
            for i in range(len(s) - 1)
            if s[i + 1][0] >= start and s[i][0] <= end
        ]


def _app(bs: str, app_id: str, topics: tuple[str, str, str], state_dir: Path, **cfg: Any) -> App:
    return App(
        stateful_topology(*topics),
        app_id,
        bs,
        "exactly_once_v2",
        config=fast_group(
            {
                "state_dir": str(state_dir),
                "commit_interval": 100,
                "batch_max_wait": 50,
                "batch_max_records": 200,
                # this file tests the classic protocols (the default, "auto", runs the
                # Streams protocol on a broker that offers it)
                "rebalance_protocol": "cooperative",
                **cfg,
            }
        ),
    )


@contextmanager
def _started(app: App) -> Iterator[App]:
    app.start()
    try:
        yield app
    finally:
        app.close(60)


def _wait(done: Callable[[], bool], what: str, deadline_s: float = 120) -> None:
    """Poll until `done()` (a hang guard, not a timing assertion)."""
    end = time.monotonic() + deadline_s
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _tasks(app: App) -> dict[tuple[int, int], Any]:
    assert app._stream is not None
    return dict(app._stream.tasks)


def _manager(app: App) -> Any:
    assert app._stream is not None
    return app._stream.task_manager


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_a_joining_instance_leaves_the_kept_tasks_running(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = (unique_name("in"), unique_name("counts"), unique_name("sums"))
    create_topics(bs, PARTITIONS, *topics)
    app_id = unique_name("coop")
    a = _app(bs, app_id, topics, tmp_path / "a", rebalance_protocol=protocol)
    # the joining instance is a process of its own: its restore and start-up do not compete
    # with the measured one for this process's interpreter lock
    b = worker(
        tmp_path,
        "b",
        bs,
        app_id,
        *topics,
        "--guarantee",
        "exactly_once_v2",
        "--rebalance-protocol",
        protocol,
    )
    events: list[tuple[float, AppState, int]] = []
    a.on_state_change(lambda new, _old: events.append((time.monotonic(), new, a.processed)))
    with Feeder(bs, topics[0]), _started(a), Timeline(a) as line:
        _wait(lambda: len(_tasks(a)) == PARTITIONS and a.processed > 0, "a to run every task")
        _wait(lambda: a.processed > 2 * RATE, "a to process a steady flow")
        before = _tasks(a)
        closed = _manager(a).tasks_closed
        joined = time.monotonic()
        b.start()
        try:
            _wait(
                lambda: (
                    "assigned tasks ['" in b.tail(200_000)
                    and a.state == AppState.RUNNING
                    and len(_tasks(a)) < PARTITIONS
                ),
                "the rebalance to settle",
            )
            settled, at_settled = time.monotonic(), a.processed
            after = _tasks(a)
            time.sleep(2 * SAMPLE_S)
            closes = _manager(a).tasks_closed - closed
        finally:
            assert b.stop() == 0, b.tail()
    kept = sorted(k for k in after if after[k] is before[k])
    moved = sorted(set(before) - set(after))
    # from a's first revoke until b runs the moved tasks: the rebalance as a's users see it
    revoked = next(e for e in events if e[0] >= joined and e[1] == AppState.REBALANCING)
    in_rebalance = at_settled - revoked[2]
    slots = line.per_slot(joined, settled)
    print(
        f"{protocol}: a kept {kept}, gave up {moved}, closed {closes} task(s); from its "
        f"revoke to b running ({settled - revoked[0]:.2f} s) it processed {in_rebalance} "
        f"records; per {SAMPLE_S} s from the join to settled ({settled - joined:.1f} s): {slots}"
    )
    assert moved and len(after) == PARTITIONS - len(moved)
    if protocol == "cooperative":
        # the tasks that stayed are the very objects that ran before: never closed, reopened
        # or restored; only the moved ones were closed
        assert kept == sorted(after)
        assert closes == len(moved)
        # How many records a processed from its revoke until b ran the moved tasks (and per
        # half second) is printed, not asserted: that window can be shorter than one batch and
        # the revoke's commit on a loaded machine (a chaos run beside two CPU burners: 0 in
        # 0.53 s, between half-seconds of 591 and 527), and the tasks' staying open is what the
        # assertions above check.
    else:
        assert kept == []
        assert closes == PARTITIONS


def _generation(app: App) -> tuple[int, str]:
    """The (generation, member id) of `app`'s group consumer, as librdkafka has them."""
    assert app._stream is not None and app._stream.consumer is not None
    consumer = app._stream.consumer
    gen = generation(consumer)
    assert gen is not None
    return gen, str(consumer.raw.memberid())


@pytest.mark.timeout(300)
def test_a_static_member_restarting_within_the_session_moves_nothing(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = (unique_name("in"), unique_name("counts"), unique_name("sums"))
    create_topics(bs, PARTITIONS, *topics)
    app_id = unique_name("static")
    session = {"session.timeout.ms": 30_000, "heartbeat.interval.ms": 1000}

    def make(name: str) -> App:
        return _app(bs, app_id, topics, tmp_path / name, group_instance_id=name, kafka=session)

    a, b = make("a"), make("b")
    with Feeder(bs, topics[0]), _started(a):
        with _started(b):
            _wait(
                lambda: (
                    a.state == b.state == AppState.RUNNING
                    and len(_tasks(a)) + len(_tasks(b)) == PARTITIONS
                    and b.processed > 0
                ),
                "both instances to run",
            )
            # the join's rounds are over (a loaded machine may still be in a trailing one):
            # the count this test compares against holds still for 3 s
            settled: list[tuple[float, int]] = [(time.monotonic(), a.metrics.rebalances_total)]

            def rebalances_settled() -> bool:
                now, count = time.monotonic(), a.metrics.rebalances_total
                if count != settled[0][1]:
                    settled[0] = (now, count)
                return now - settled[0][0] >= 3.0

            _wait(rebalances_settled, "the join's rebalances to end")
            gen_a, member_a = _generation(a)
            gen_b, member_b = _generation(b)
            a_tasks, b_tasks = _tasks(a), sorted(_tasks(b))
            a_rebalances = a.metrics.rebalances_total
        down = time.monotonic()
        b2 = make("b")
        with _started(b2):
            _wait(lambda: b2.state == AppState.RUNNING and b2.processed > 0, "b to run again")
            restarted = time.monotonic() - down
            gen_b2, member_b2 = _generation(b2)
            gen_a2, _ = _generation(a)
            time.sleep(1)
            assert sorted(_tasks(b2)) == b_tasks
            assert all(_tasks(a).get(k) is rt for k, rt in a_tasks.items())
            assert len(_tasks(a)) == len(a_tasks)
            assert a.metrics.rebalances_total == a_rebalances
    print(
        f"static membership: b restarted in {restarted:.1f}s; generation a {gen_a} -> "
        f"{gen_a2}, b {gen_b} -> {gen_b2} (member id {member_b} -> {member_b2}); "
        f"a kept {sorted(a_tasks)}, b got {b_tasks} back"
    )
    assert gen_a2 == gen_a and gen_b2 == gen_b
    assert member_b2 != member_b  # a new member took the static id over
    assert member_a


CHUNK = 600
DELAY = 0.003  # per record: the workers are mid-stream at every step
SESSION_MS = 1000


@pytest.mark.timeout(300)
def test_instances_joining_dying_and_leaving_under_exactly_once_v2_stay_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Worker processes (cooperative, asked for explicitly) join one by
    one, one is SIGKILLed and comes back, one leaves with SIGTERM: every update is read once."""
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    inp, cnt, sm = unique_name("in"), unique_name("counts"), unique_name("sums")
    app_id = unique_name("coopeos")
    create_topics(bs, PARTITIONS, inp, cnt, sm)
    steps = ["start 1", "start 2", "start 3", "kill 2", "start 2", "stop 1", "start 1"]
    data = make_input(CHUNK * (len(steps) + 1), 300)
    res = Results(bs, cnt, sm)
    opts = ["--batch", "100", "--delay", str(DELAY), "--session-ms", str(SESSION_MS)]
    opts += ["--rebalance-protocol", "cooperative"]
    workers = [
        worker(tmp_path, f"w{n}", bs, app_id, inp, cnt, sm, *opts, "--guarantee", "exactly_once_v2")
        for n in (1, 2, 3)
    ]
    produced = 0
    try:
        for step in steps:
            produce(bs, inp, data[produced : produced + CHUNK])
            produced += CHUNK
            action, n = step.split()
            w = workers[int(n) - 1]
            if action == "start":
                w.start()
                res.wait(w.running, f"worker {n} to run", 120, *workers)
            elif action == "kill":
                w.kill()
            else:
                assert w.stop() == 0, w.tail()
            # progress since the step, but no more outputs than the records produced so far:
            # the workers may have processed every one of them already (a target above that
            # can never be met, and once read as 150 lost outputs)
            res.wait_total(min(res.total + 150, produced), step, 120, *workers)
        produce(bs, inp, data[produced:])
        counts, _ = expected(data)
        res.wait(partial(res.complete, counts), "all outputs", 180, *workers)
        for w in workers:
            if w.alive():
                assert w.stop() == 0, w.tail()
        verdicts = check_exact(res, data, inp)
        logs = "".join(p.read_text(errors="replace") for w in workers for p in w.logs)
    finally:
        for w in workers:
            if w.alive():
                w.kill()
        res.close()
    kept = logs.count("revoked tasks")
    print(f"cooperative exactly_once_v2, {' / '.join(steps)}: {kept} revokes; {verdicts}")
    assert "rebalancing eagerly" not in logs  # the pipeline ran the cooperative protocol
    assert kept > 0
