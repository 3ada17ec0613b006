"""Incremental rebalancing of a multi-topic topology with the broker-assigned group protocols
on Apache Kafka: Kafka's consumer group protocol (KIP-848, `rebalance_protocol="consumer"`) and
Kafka Streams' own (KIP-1071, `rebalance_protocol="streams"`; kstream.runtime.rebalance). The
tests below run under each (`protocol`), where the broker offers it.

* A second and a third instance join while orders flow into a stream-table join followed by a
  repartitioned count: the first instance keeps running the tasks it keeps (the same task
  objects, never closed), goes on processing through each rebalance (its records per half
  second are printed), the broker's assignment never splits a task's co-partitioned
  partitions and spreads every sub-topology, and a plain read_committed reader finds every
  join result and every count once.
* Static members: one restarted within the group's session timeout (a group config set on the
  broker) gets its tasks back, and the other is not rebalanced at all.
* An instance SIGKILLed mid-stream and restarted: the outputs stay exact.
* All of it in one run under the Streams protocol with a standby replica per task: a second
  and a third instance join, the third leaves, the second is SIGKILLed and restarted; the
  first instance keeps its tasks through every step (the same objects), the broker's standbys
  are where it takes tasks from, its records per half second are printed as one timeline, and
  a plain read_committed reader finds every join result and every count once.
* A broker without the protocol (Tansu): the app stops with an error naming it.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from e2e.in_process_log import evidence
from e2e.incremental_worker import REGION, app
from e2e.independent_reader import IndependentReader, Verdict, check_updates
from e2e.support import Worker, create_topics, produce, require_kafka
from e2e.test_cooperative_rebalance import SAMPLE_S, Timeline, _manager, _started, _tasks, _wait
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState
from kstream.runtime.rebalance import split_tasks
from kstream.runtime.streams_topology import partitions_of, tasks_of
from kstream.serde import serde

WORKER = str(Path(__file__).with_name("incremental_worker.py"))
PARTITIONS = 6  # three instances: two tasks of each sub-topology apiece
CUSTOMERS = 60
REGIONS = 5
RATE = 1000  # orders a second while instances join
BASE_TS = 1_700_000_000_000


def _region(customer: int) -> int:
    return customer % REGIONS


def _order(n: int) -> tuple[str, int, int]:
    """Order `n`: (customer id, order number, timestamp)."""
    return f"c{n % CUSTOMERS}", n, BASE_TS + n


class Orders:
    """Produces orders 0, 1, 2, ... at about `RATE` a second until stopped; `sent` says how
    many."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Orders:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        ks, vs = serde("string"), serde("long")
        step = RATE // 20
        with Producer(self.bootstrap, idempotent=True) as p:
            while not self._stop.wait(0.05):
                for n in range(self.sent, self.sent + step):
                    k, v, ts = _order(n)
                    p.produce(self.topic, vs.to_bytes(v), ks.to_bytes(k), timestamp=ts)
                p.flush()
                self.sent += step


def _expected(orders: int) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """The join results per customer and the counts per region that `orders` orders make."""
    joined: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    for n in range(orders):
        key, order, _ = _order(n)
        region = _region(n % CUSTOMERS)
        joined.setdefault(key, []).append(region * REGION + order)
        counts[f"r{region}"] = counts.get(f"r{region}", 0) + 1
    return joined, {r: list(range(1, c + 1)) for r, c in counts.items()}


PROTOCOLS = [
    pytest.param("consumer", marks=pytest.mark.kafka_feature("consumer_group_protocol")),
    pytest.param("streams", marks=pytest.mark.kafka_feature("streams_group_protocol")),
]


def _worker(
    tmp: Path,
    name: str,
    bs: str,
    app_id: str,
    topics: tuple[str, str, str, str],
    protocol: str = "consumer",
    *extra: str,
) -> Worker:
    orders, customers, joined, counts = topics
    args = ["--bootstrap", bs, "--app-id", app_id, "--orders", orders, "--protocol", protocol]
    args += extra
    args += ["--customers", customers, "--joined", joined, "--counts", counts]
    args += ["--state-dir", str(tmp / f"state-{name}")]
    return Worker(args, tmp / f"{name}.log", script=WORKER)


def _members(a: App, bs: str, group: str) -> list[list[tuple[str, int]]]:
    """Each member's assignment (its partitions) as the group coordinator describes it."""
    if _protocol(a) == "streams":
        from kstream.kafka.streams_group import StreamsGroupClient

        compiled = _manager(a).ctx.compiled
        with StreamsGroupClient(bs) as client:
            described = client.describe(group)
        return [
            sorted(
                (tp.topic, tp.partition)
                for tp in partitions_of(compiled, tasks_of(m["assignment"]["active"]))
            )
            for m in described["members"]
        ]
    admin = AdminClient({"bootstrap.servers": bs})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return [
        sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        for m in desc.members
    ]


def _placed(a: App, bs: str, group: str, instances: int) -> list[list[tuple[str, int]]]:
    """The members' assignments once `instances` members hold every partition, checked: no
    member holds only some of a task's partitions, and each holds an even share of every
    topic (every sub-topology's tasks are spread; the Streams group's sticky task assignor
    balances each member's tasks over all sub-topologies together)."""
    compiled = _manager(a).ctx.compiled
    topics = compiled.source_topics
    found: list[list[tuple[str, int]]] = []

    share = len(compiled.subtopologies) * PARTITIONS // instances

    def tasks(member: list[tuple[str, int]]) -> int:
        return len({(compiled.subtopology_for_topic(t).id, p) for t, p in member})

    def complete() -> bool:
        nonlocal found
        found = _members(a, bs, group)
        held = [tp for m in found for tp in m]
        done = len(found) == instances and len(held) == len(set(held)) == len(topics) * PARTITIONS
        # the Streams group's first member may hold every task until the others have joined
        # and it has released theirs: its settled state is an even share of tasks each
        return done and (_protocol(a) != "streams" or all(tasks(m) == share for m in found))

    _wait(complete, f"{instances} members to hold every partition")
    for member in found:
        assert split_tasks(compiled, member) == {}, member
        if _protocol(a) == "streams":
            continue
        for topic in topics:
            assert sum(1 for t, _ in member if t == topic) == PARTITIONS // instances, member
    return found


def _protocol(a: App) -> str:
    return str(a.config.rebalance_protocol)


def _topics(unique_name: Callable[[str], str]) -> tuple[str, str, str, str]:
    """The names (orders, customers, joined, counts), unique to the test."""
    return (
        unique_name("orders"),
        unique_name("customers"),
        unique_name("joined"),
        unique_name("counts"),
    )


def _verdicts(bs: str, topics: tuple[str, str, str, str], total: int) -> list[Verdict]:
    """The join results and the counts of `total` orders, read to the end by a plain
    read_committed reader and checked against what the orders make."""
    want_joined, want_counts = _expected(total)
    with IndependentReader(bs, [topics[2], topics[3]]) as reader:

        def counted() -> bool:
            reader.poll(1.0)
            return reader.count(topics[3]) >= total

        _wait(counted, f"the {total} orders' counts", 120)
        reader.read_to_end()
        return [
            check_updates(reader, topics[2], want_joined),
            check_updates(reader, topics[3], want_counts),
        ]


def _created(bs: str, unique_name: Callable[[str], str]) -> tuple[str, str, str, str]:
    """`_topics`, created with `PARTITIONS` partitions each, the customers table written."""
    topics = _topics(unique_name)
    create_topics(bs, PARTITIONS, *topics)
    produce(bs, topics[1], [(f"c{c}", _region(c), BASE_TS - 1) for c in range(CUSTOMERS)])
    return topics


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_instances_joining_a_multi_topic_app_leave_the_kept_tasks_running(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = _created(bs, unique_name)
    app_id = unique_name(f"join-{protocol}")
    a = app(bs, app_id, topics, str(tmp_path / "a"), rebalance_protocol=protocol)
    # the joining instances are processes of their own: their restores and start-ups do not
    # compete with the measured one for this process's interpreter lock
    joiners = [_worker(tmp_path, name, bs, app_id, topics, protocol) for name in ("b", "c")]
    events: list[tuple[float, AppState, int]] = []
    a.on_state_change(lambda new, _old: events.append((time.monotonic(), new, a.processed)))
    report: list[str] = []
    try:
        with _started(a), Timeline(a) as line:
            with Orders(bs, topics[0]) as feed:
                _wait(lambda: len(_tasks(a)) == 2 * PARTITIONS, "a to run every task")
                _wait(lambda: a.processed > 2 * RATE, "a to process a steady flow")
                _placed(a, bs, app_id, 1)
                for n, w in enumerate(joiners, start=2):
                    report.append(_join(a, w, n, bs, app_id, events, line))
                assert _manager(a).split_assignments == 0
            total = feed.sent
            verdicts = _verdicts(bs, topics, total)
    finally:
        for w in joiners:
            if w.alive():
                assert w.stop() == 0, w.tail()
    logs = "".join(p.read_text(errors="replace") for w in joiners for p in w.logs)
    print(f"rebalance_protocol={protocol}")
    print("\n".join(report))
    print(f"{total} orders; " + "; ".join(str(v) for v in verdicts))
    assert all(v.exact for v in verdicts), verdicts
    assert "splits tasks" not in logs
    assert "rebalancing eagerly" not in logs


def _join(
    a: App,
    w: Worker,
    n: int,
    bs: str,
    app_id: str,
    events: list[tuple[float, AppState, int]],
    line: Timeline,
) -> str:
    """Start worker `w` as the group's `n`th instance and check what `a` went through until
    the group settles; the line of the report that says it."""
    before, closed = _tasks(a), _manager(a).tasks_closed
    joined = time.monotonic()
    w.start()
    _wait(
        lambda: (
            "assigned tasks ['" in w.tail(200_000)
            and a.state == AppState.RUNNING
            and len(_tasks(a)) == 2 * PARTITIONS // n
        ),
        f"instance {n} to run its tasks",
    )
    _placed(a, bs, app_id, n)
    settled, at_settled = time.monotonic(), a.processed
    time.sleep(4 * SAMPLE_S)
    after = _tasks(a)
    closes = _manager(a).tasks_closed - closed
    kept = sorted(set(before) & set(after))
    moved = sorted(set(before) - set(after))
    gained = sorted(set(after) - set(before))  # the range assignor is not sticky
    revoked = next(e for e in events if e[0] >= joined and e[1] == AppState.REBALANCING)
    said = (
        f"instance {n} joined: a kept {kept}, gave up {moved}, took {gained}, closed {closes} "
        f"task(s); it processed {at_settled - revoked[2]} records from its revoke to instance "
        f"{n} running ({settled - revoked[0]:.2f} s), {a.processed - revoked[2]} by "
        f"{4 * SAMPLE_S:g} s later; per {SAMPLE_S:g} s from the join ({settled - joined:.1f} s "
        f"before settled) to then: {line.per_slot(joined, settled + 4 * SAMPLE_S)}"
    )
    # a kept tasks through the rebalance, the very objects that ran before (never closed,
    # reopened or restored), and closed only the moved ones
    assert kept and moved, said
    assert all(after[k] is before[k] for k in kept), said
    assert closes == len(moved), said
    return said


def _group_session(bs: str, group: str, ms: int, protocol: str = "consumer") -> None:
    """Set `group`'s session timeout (the group config `<protocol>.session.timeout.ms`: under
    the broker-assigned protocols the session is the broker's, not the client's)."""
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                f"{protocol}.session.timeout.ms",
                str(ms),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=30)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_static_member_restarting_within_the_group_session_moves_nothing(
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    protocol: str,
) -> None:
    """Both instances run in this process (so do their librdkafka clients): a native crash
    ends it, and `evidence` keeps what says why (e2e.in_process_log; one full-suite run lost
    its xdist worker here to an abort in librdkafka under the consumer protocol, and left only
    the Python stacks)."""
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = _created(bs, unique_name)
    app_id = unique_name(f"static-{protocol}")
    _group_session(bs, app_id, 30_000, protocol)

    def make(name: str) -> App:
        return app(
            bs,
            app_id,
            topics,
            str(tmp_path / name),
            group_instance_id=name,
            rebalance_protocol=protocol,
        )

    with evidence(tmp_path, capfd):
        a, b = make("a"), make("b")
        with Orders(bs, topics[0]), _started(a):
            with _started(b):
                # each runs its share: the first to get an assignment holds all 12 tasks for
                # a moment (b may even process some) before the coordinator moves half of
                # them, and a rebalance of a counted after the baseline below failed the
                # check that b's restart rebalances nothing (a chaos run, streams protocol)
                _wait(
                    lambda: (
                        a.state == b.state == AppState.RUNNING
                        and len(_tasks(a)) == len(_tasks(b)) == PARTITIONS
                        and b.processed > 0
                    ),
                    "both instances to run their share",
                )
                a_tasks, b_tasks = _tasks(a), sorted(_tasks(b))
                a_rebalances = a.metrics.rebalances_total
                placed = _placed(a, bs, app_id, 2)
            down = time.monotonic()
            # while b is away the coordinator keeps its static member and assignment (it left
            # with epoch -2), and gives a nothing of it: a few heartbeats later nothing moved
            time.sleep(1.5)
            assert sorted(_placed(a, bs, app_id, 2)) == sorted(placed)
            assert a.metrics.rebalances_total == a_rebalances
            b2 = make("b")
            with _started(b2):
                _wait(lambda: b2.state == AppState.RUNNING and b2.processed > 0, "b to run again")
                restarted = time.monotonic() - down
                time.sleep(1)
                assert sorted(_tasks(b2)) == b_tasks
                assert _tasks(a) == a_tasks
                assert all(_tasks(a)[k] is rt for k, rt in a_tasks.items())
                assert a.metrics.rebalances_total == a_rebalances
                assert sorted(_placed(a, bs, app_id, 2)) == sorted(placed)
    print(
        f"static membership ({protocol} protocol): b restarted in {restarted:.1f} s; a kept "
        f"{sorted(a_tasks)} without a rebalance, b got {b_tasks} back"
    )


@pytest.mark.timeout(120)
def test_a_broker_without_the_protocol_stops_the_app_with_an_error_naming_it(
    tansu_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Tansu has no consumer group protocol, and librdkafka reports nothing: the consumer
    just never gets a member epoch. The app stops once `connect_timeout` has passed, saying
    so (`broker_compat="tansu"` refuses the protocol at start-up already)."""
    bs = tansu_broker.bootstrap_servers
    topics = _topics(unique_name)
    create_topics(bs, 1, *topics)
    # as a user who did not say which broker this is would run it (not the Tansu lane's env)
    a = app(
        bs,
        unique_name("kip848tansu"),
        topics,
        str(tmp_path / "a"),
        connect_timeout=3000,
        broker_compat="none",
    )
    with _started(a):
        _wait(lambda: a.error is not None, "the app to stop on an error", 60)
    assert "KIP-848" in str(a.error) and bs in str(a.error), a.error
    assert a.state == AppState.ERROR


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_instance_killed_and_restarted_mid_stream_leaves_the_outputs_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    """An instance SIGKILLed mid-stream (its transaction open) and restarted: the restart
    fences its predecessor (the same transactional id, from its state directory) and joins as
    a new member; the dead member's tasks move once the group's session expires. A plain
    read_committed reader finds every join result and every count once.

    (Not restarted, the dead instance's open transaction would hold its tasks' committed
    offsets pending until the broker aborts it, after the producer's transaction.timeout.ms,
    60 s by default: as under the classic protocols.)"""
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    topics = _created(bs, unique_name)
    app_id = unique_name(f"kill-{protocol}")
    a = app(bs, app_id, topics, str(tmp_path / "a"), rebalance_protocol=protocol)
    b = _worker(tmp_path, "b", bs, app_id, topics, protocol)
    try:
        with _started(a):
            with Orders(bs, topics[0]) as feed:
                b.start()
                _wait(
                    lambda: "assigned tasks ['" in b.tail(200_000) and len(_tasks(a)) == PARTITIONS,
                    "b to run its tasks",
                )
                time.sleep(1)
                b.kill()
                killed = time.monotonic()
                b.start()
                _wait(
                    lambda: "assigned tasks ['" in b.logs[-1].read_text(errors="replace"),
                    "the restarted b to run tasks",
                    120,
                )
                back = time.monotonic() - killed
                time.sleep(1)
            total = feed.sent
            verdicts = _verdicts(bs, topics, total)
            assert b.stop() == 0, b.tail()
    finally:
        if b.alive():
            b.kill()
    print(
        f"rebalance_protocol={protocol}: b killed and restarted: running tasks again "
        f"{back:.1f} s later; {total} orders; " + "; ".join(str(v) for v in verdicts)
    )
    assert all(v.exact for v in verdicts), verdicts


@pytest.mark.timeout(300)
@pytest.mark.kafka_feature("streams_group_protocol")
def test_joining_leaving_and_a_kill_under_the_streams_protocol_leave_the_kept_tasks_running(
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's whole scenario in one run (module docstring, last point). `a` runs in this
    process, measured; `b` and `c` are worker processes. After each step the group settles
    to an even share of tasks per member, none split, and `a` has kept tasks running through
    it (the same objects) and closed only the tasks it gave up (`_join`, `_lose`). Which of
    the tasks `a` takes over it had a standby of is the broker's choice: printed, with `a`'s
    standbys, not asserted."""
    require_kafka(kafka_broker)
    caplog.set_level(logging.INFO, logger="kstream.runtime")
    bs = kafka_broker.bootstrap_servers
    topics = _created(bs, unique_name)
    app_id = unique_name("streams-all")
    a = app(
        bs,
        app_id,
        topics,
        str(tmp_path / "a"),
        rebalance_protocol="streams",
        num_standby_replicas=1,
    )
    b, c = (
        _worker(tmp_path, name, bs, app_id, topics, "streams", "--standbys", "1")
        for name in ("b", "c")
    )
    events: list[tuple[float, AppState, int]] = []
    a.on_state_change(lambda new, _old: events.append((time.monotonic(), new, a.processed)))
    report: list[str] = []
    steps: list[tuple[str, float]] = []
    try:
        with _started(a), Timeline(a) as line:
            with Orders(bs, topics[0]) as feed:
                _wait(lambda: len(_tasks(a)) == 2 * PARTITIONS, "a to run every task")
                _wait(lambda: a.processed > 2 * RATE, "a to process a steady flow")
                _placed(a, bs, app_id, 1)
                steps.append(("start", time.monotonic()))
                for n, w in ((2, b), (3, c)):
                    steps.append((f"instance {n} joins", time.monotonic()))
                    report.append(_join(a, w, n, bs, app_id, events, line))
                # the coordinator puts a standby of each task on another process
                _wait(lambda: bool(a.standby_partitions()), "the broker to give a standbys")
                standbys = sorted(a.standby_partitions())
                steps.append(("c leaves (SIGTERM)", time.monotonic()))

                def stop_c() -> None:
                    assert c.stop() == 0, c.tail()

                report.append(_lose(a, "left", 2, bs, app_id, stop_c))

                def kill_and_restart_b() -> None:
                    # the restart's producer (the same transactional id, from its state
                    # directory) fences the killed one's open transaction at once
                    b.kill()
                    b.start()

                steps.append(("b SIGKILLed and restarted", time.monotonic()))
                report.append(
                    _lose(a, "was SIGKILLed and restarted", 2, bs, app_id, kill_and_restart_b, b)
                )
                steps.append(("end", time.monotonic()))
                assert _manager(a).split_assignments == 0
            total = feed.sent
            verdicts = _verdicts(bs, topics, total)
    finally:
        for w in (b, c):
            if w.alive():
                w.kill()
    taken = sorted(set(re.findall(r"task (\d+_\d+): taking over its standby stores", caplog.text)))
    print("rebalance_protocol=streams, one standby replica per task")
    print("\n".join(report))
    print(
        f"a's standbys with three instances: {standbys}; tasks a took over from a standby: {taken}"
    )
    print("a's records per 0.5 s, from each step to the next:")
    for (what, at), (_, until) in itertools.pairwise(steps):
        print(f"  {what}: {line.per_slot(at, until)}")
    print(f"{total} orders; " + "; ".join(str(v) for v in verdicts))
    assert all(v.exact for v in verdicts), verdicts


def _lose(
    a: App,
    how: str,
    members: int,
    bs: str,
    app_id: str,
    act: Callable[[], None],
    back: Worker | None = None,
) -> str:
    """`act` takes an instance out of the group (a stop; a kill, and `back` restarted); check
    what `a` went through until the group settles at `members` members, each with an even
    share (the restarted one running); the line of the report that says it.

    `a` keeps tasks running through it, the same objects. Not every one of them: a SIGKILLed
    member stays in the group until its session expires, and its restart, a member of the
    same process, shares that process's capacity with it (the broker's sticky assignor
    balances processes by their members), so the coordinator may move some of `a`'s tasks
    to the restart meanwhile, and others to `a` and on again."""
    before, closed, processed = _tasks(a), _manager(a).tasks_closed, a.processed
    started = time.monotonic()
    act()
    if back is not None:
        # then the killed member's tasks move once its session expires: the restart holds
        # tasks and the group is down to `members` members again
        _wait(
            lambda: back.running() and "assigned tasks ['" in back.logs[-1].read_text(),
            "the restarted instance to run tasks",
            120,
        )
    _placed(a, bs, app_id, members)
    _wait(lambda: a.state == AppState.RUNNING, f"the group to settle after an instance {how}")
    after = _tasks(a)
    kept = sorted(k for k in before if k in after and after[k] is before[k])
    closes = _manager(a).tasks_closed - closed
    said = (
        f"an instance {how}: a kept {kept} (the same task objects), closed {closes} task(s), "
        f"now runs {sorted(after)}; it processed {a.processed - processed} records until the "
        f"group settled ({time.monotonic() - started:.1f} s)"
    )
    # (how many it closed is reported, not checked: while a killed member's session runs
    # out, a task can come to `a` and move on again)
    assert kept, said
    return said
