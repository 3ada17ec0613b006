"""Broker failover on a three-node Apache Kafka cluster (replication factor 3, min.insync.replicas
2): a stateful app with changelogged stores, under exactly_once_v2, keeps its outputs exact.

One after another, while records flow, the test SIGKILLs the broker that coordinates the app's
transactions (the leader of the `__transaction_state` partition its transactional id maps to),
then the broker leading a partition of the input topic, of the output topic and of a store's
changelog. It restarts each one, waits until every partition is fully in sync and restores the
preferred leaders, before the next. With each broker down the app must make progress within
`FAULT_BOUND_S`, and every output must be out within `COMPLETION_BOUND_S` of the last fault. A
slow variant (`KSTREAM_LONG=1`, the pause alone takes 30 seconds) SIGSTOPs the transaction
coordinator for 30 seconds, then SIGCONTs it.

The broker coordinating the app's consumer group is never the one faulted: with librdkafka 2.10
or later (confluent-kafka 2.16.1 bundles 2.16.0), `send_offsets_to_transaction` can hang for
good, whatever its timeout, when the group coordinator's broker leaves the cluster's metadata
(librdkafka issue #5511, open): the stream thread would wait forever in `Producer.send_offsets`.
The app's names are chosen so that the two coordinators' preferred leaders differ.

Outputs are read by an independent read_committed reader (`e2e.independent_reader`, plain
confluent-kafka): every running count and running sum exactly once per key, in order.
"""

from __future__ import annotations

import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from e2e.pipelines import expected, make_input
from e2e.support import Results, Worker, check_exact, create_topics, produce, worker
from kstream.testing.kafka import KafkaCluster

PARTITIONS = 4
KEYS = 200
CHUNK = 1_500  # input records produced before each fault (at least AFTER left at the fault)
FINAL = 1_000
# at most 500 records/s: a chunk lasts three seconds, so every fault lands mid-chunk
DELAY = "0.002"
FAULT_BOUND_S = 60.0  # for progress with a broker down, or after a pause
AFTER = 400  # outputs that show progress after a fault (a transaction holds at most 200)
COMPLETION_BOUND_S = 90.0  # for every output, from the last fault (a restart on the way)
FAULTS = ("coordinator", "input", "output", "changelog")
PAUSE_S = 30.0
TXN_STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"


def java_hash(text: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of `__transaction_state` (for a transactional id) or `__consumer_offsets`
    (for a group id) whose leader coordinates `key`: Kafka's
    `Utils.abs(key.hashCode()) % partitions`, where abs(MIN_VALUE) is 0."""
    h = java_hash(key)
    return 0 if h == -(1 << 31) else abs(h) % partitions


# errors of a group coordinator lookup while __consumer_offsets is still coming up
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
}


class Cluster:
    """What the test asks the cluster: leaders, replicas, coordinators."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 3})

    def partitions(self, topic: str) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, replicas) of `topic`."""
        md = self.admin.list_topics(topic, timeout=10)
        found = md.topics[topic]
        assert found.error is None and found.partitions, f"{topic}: {found.error}"
        return {n: (p.leader, list(p.replicas)) for n, p in found.partitions.items()}

    def leader(self, topic: str, partition: int) -> int:
        leader = self.partitions(topic)[partition][0]
        assert leader >= 0, f"{topic}[{partition}] has no leader"
        return leader

    def coordinator(self, topic: str, key: str, preferred: bool = False) -> int:
        """The broker coordinating `key` (the leader, or the preferred leader, of its
        partition of `topic`)."""
        parts = self.partitions(topic)
        leader, replicas = parts[coordinator_partition(key, len(parts))]
        return replicas[0] if preferred else leader

    def replicas(self, topics: Iterable[str]) -> dict[str, set[int]]:
        """Each topic's replication factors (one per partition)."""
        md = self.admin.list_topics(timeout=10)
        return {t: {len(p.replicas) for p in md.topics[t].partitions.values()} for t in topics}

    def out_of_sync(self) -> list[str]:
        """Partitions (of every topic, internal ones included) without a leader or with fewer
        than all replicas in sync."""
        md = self.admin.list_topics(timeout=10)
        return [
            f"{name}[{n}] leader {p.leader} isr {p.isrs}"
            for name, t in md.topics.items()
            for n, p in t.partitions.items()
            if p.leader < 0 or len(p.isrs) < len(self.cluster.nodes)
        ]

    def off_preferred(self) -> list[str]:
        """Partitions whose leader is not their preferred one (the first replica)."""
        md = self.admin.list_topics(timeout=10)
        return [
            f"{name}[{n}]"
            for name, t in md.topics.items()
            for n, p in t.partitions.items()
            if p.replicas and p.leader != p.replicas[0]
        ]

    def elect_preferred(self) -> bool:
        """Move every partition's leadership back to its preferred replica (as the broker's
        leader rebalancing would, every five minutes); True once every leader is."""
        try:
            self.admin.elect_leaders(ElectionType.PREFERRED, None).result()
        except Exception:
            pass  # "election not needed" for some partitions is reported as an error too
        return not self.off_preferred()

    def create_internal_topics(self, bootstrap: str, topic: str) -> None:
        """`__consumer_offsets` and `__transaction_state` exist from their first use on: a
        group's committed offsets asked for (by a consumer: librdkafka's admin client can
        crash on a fresh cluster, see `e2e.independent_reader.committed_offsets`) and a
        transactional producer started."""
        warm = f"warm-{uuid.uuid4().hex}"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": warm, "log_level": 3})
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    consumer.committed([TopicPartition(topic, 0)], 30)
                    break
                except KafkaException as e:
                    # while __consumer_offsets is being created and its leaders elected, the
                    # coordinator lookup can answer NOT_COORDINATOR (retriable; seen on CI)
                    err = e.args[0]
                    coordinator = err.code() in _COORDINATOR_MOVING
                    if not (coordinator or err.retriable()) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            consumer.close()
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": warm, "log_level": 3}
        )
        producer.init_transactions(60)
        producer.flush(1)
        for _ in range(120):
            md = self.admin.list_topics(timeout=10)
            internal = [md.topics.get(t) for t in (OFFSETS, TXN_STATE)]
            if all(
                t is not None and t.partitions and all(p.leader >= 0 for p in t.partitions.values())
                for t in internal
            ):
                return
            time.sleep(0.5)
        raise AssertionError(f"{OFFSETS} and {TXN_STATE} did not come up")


def _reached(res: Results, n: int) -> bool:
    return res.total >= n


def _in_sync_and_balanced(cluster: Cluster) -> bool:
    return not cluster.out_of_sync() and cluster.elect_preferred()


class Run:
    """The app and its outputs on the three-node cluster."""

    def __init__(
        self, kafka: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path, chunks: int
    ) -> None:
        self.kafka = kafka
        self.cluster = Cluster(kafka)
        bs = kafka.bootstrap_servers
        self.bs = bs
        self.inp, self.cnt, self.sm = unique_name("in"), unique_name("counts"), unique_name("sums")
        self.app_id = unique_name("failover")
        create_topics(bs, PARTITIONS, self.inp, self.cnt, self.sm, replication_factor=3)
        self.data = make_input(CHUNK * chunks + FINAL, KEYS)
        self.produced = 0
        self.res = Results(bs, self.cnt, self.sm)
        self.w: Worker = worker(
            tmp_path,
            "w",
            bs,
            self.app_id,
            self.inp,
            self.cnt,
            self.sm,
            "--guarantee",
            "exactly_once_v2",
            "--batch",
            "200",
            "--delay",
            DELAY,
        )
        self.state_dir = tmp_path / "state-w"
        self.changelogs = [f"{self.app_id}-{s}-changelog" for s in ("running", "sums")]
        self.log: list[str] = []
        self.transactional_id = self._pick_transactional_id()

    def _pick_transactional_id(self) -> str:
        """The app's transactional id under exactly_once_v2 is `<app_id>-<process id>-1`, the
        process id kept in its state directory: write one whose transaction coordinator's
        preferred broker is not the group coordinator's (see the module docstring)."""
        self.cluster.create_internal_topics(self.bs, self.inp)
        group_home = self.cluster.coordinator(OFFSETS, self.app_id, preferred=True)
        txn_parts = self.cluster.partitions(TXN_STATE)
        for n in range(1000):
            pid = f"failover{n}"
            txn_id = f"{self.app_id}-{pid}-1"
            _, replicas = txn_parts[coordinator_partition(txn_id, len(txn_parts))]
            if replicas[0] != group_home:
                (self.state_dir / self.app_id).mkdir(parents=True, exist_ok=True)
                (self.state_dir / self.app_id / "process-id").write_text(pid)
                return txn_id
        raise AssertionError("no process id puts the two coordinators on different brokers")

    def produce_chunk(self, n: int = CHUNK) -> None:
        produce(self.bs, self.inp, self.data[self.produced : self.produced + n])
        self.produced = min(len(self.data), self.produced + n)

    def wait(self, done: Callable[[], bool], what: str, deadline_s: float) -> None:
        try:
            self.res.wait(done, what, deadline_s, self.w)
        except AssertionError as e:
            stacks = ""
            if self.w.alive():  # where the app is stuck: its threads' stacks (faulthandler)
                self.w.signal(signal.SIGUSR1)
                time.sleep(1)
                stacks = self.w.tail(12_000)
            raise AssertionError(f"{e}\n--- faults so far: {self.log}\n{stacks}") from None

    def progress(self, n: int, what: str, deadline_s: float) -> float:
        """Wait for `n` more outputs; the seconds it took."""
        t0 = time.monotonic()
        self.wait(partial(_reached, self.res, self.res.total + n), what, deadline_s)
        return time.monotonic() - t0

    def target(self, what: str, i: int) -> tuple[int, str]:
        """The broker to fault for `what` (never the group coordinator), and a description."""
        group_coordinator = self.cluster.coordinator(OFFSETS, self.app_id)
        if what == "coordinator":
            node = self.cluster.coordinator(TXN_STATE, self.transactional_id)
            assert node != group_coordinator, (node, group_coordinator)
            return node, f"transaction coordinator of {self.transactional_id}"
        topic = {"input": self.inp, "output": self.cnt}.get(what) or self.changelogs[i % 2]
        leaders = self.cluster.partitions(topic)
        for k in range(PARTITIONS):
            p = (i + k) % PARTITIONS
            if leaders[p][0] != group_coordinator:
                return leaders[p][0], f"leader of {topic}[{p}]"
        raise AssertionError(f"every partition of {topic} is led by the group coordinator")

    def start(self) -> None:
        self.w.start()
        self.wait(self.w.running, "the app to run", 120)
        # every topic of the app, its changelogs included, has three replicas
        factors = self.cluster.replicas([self.inp, self.cnt, self.sm, *self.changelogs])
        assert all(f == {3} for f in factors.values()), factors

    def restored(self) -> None:
        """Every replica back in sync and every leader its preferred one: the next fault
        must not leave a partition with fewer than min.insync.replicas."""
        self.wait(partial(_in_sync_and_balanced, self.cluster), "every replica in sync", 90)

    def finish(self, since: float) -> float:
        """Produce the rest, wait for every output (within `COMPLETION_BOUND_S` of `since`,
        the last fault), stop the app and check the outputs; the seconds from `since`."""
        self.produce_chunk(len(self.data))
        counts, _ = expected(self.data)
        left = COMPLETION_BOUND_S - (time.monotonic() - since)
        what = f"all outputs within {COMPLETION_BOUND_S:g}s of the last fault"
        self.wait(partial(self.res.complete, counts), what, max(0.0, left))
        took = time.monotonic() - since
        self.wait(self.w.running, "the app to run", 30)
        assert self.w.stop() == 0, self.w.tail()
        verdicts = check_exact(self.res, self.data, self.inp)
        print(f"faults: {self.log}; {verdicts}")
        return took

    def close(self) -> None:
        if self.w.alive():
            self.w.kill()
        self.res.close()


@pytest.mark.timeout(400)
def test_leader_and_coordinator_kills_keep_results_exact(
    kafka_cluster3: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    run = Run(kafka_cluster3, unique_name, tmp_path, len(FAULTS))
    last_fault = time.monotonic()
    try:
        run.start()
        for i, what in enumerate(FAULTS):
            run.produce_chunk()
            run.progress(100, f"outputs before the {what} fault", 60)
            node_id, described = run.target(what, i)
            node = kafka_cluster3.node(node_id)
            node.kill()
            last_fault = time.monotonic()
            # The app goes on without the broker: AFTER outputs more than one transaction holds
            # (a batch, 200 records), so at least one transaction committed after the kill.
            took = run.progress(AFTER, f"progress with node {node_id} down", FAULT_BOUND_S)
            node.restart()
            run.restored()
            run.log.append(
                f"SIGKILL node {node_id} ({described}): {AFTER} outputs {took:.1f}s later"
            )
        took = run.finish(last_fault)
        print(f"every output {took:.1f}s after the last kill")
    finally:
        run.close()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_transaction_coordinator_paused_for_30_seconds_keeps_results_exact(
    kafka_cluster3: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    run = Run(kafka_cluster3, unique_name, tmp_path, 2)
    try:
        run.start()
        run.produce_chunk()
        run.progress(100, "outputs before the pause", 60)
        node_id, described = run.target("coordinator", 0)
        node = kafka_cluster3.node(node_id)
        before = run.res.total
        node.pause()
        paused_at = time.monotonic()
        try:
            time.sleep(PAUSE_S)
            run.res.poll()
            during = run.res.total - before
        finally:
            node.resume()
        resumed_at = time.monotonic()
        # new input after the pause: the app takes it on within the bound
        run.produce_chunk()
        took = run.progress(AFTER, "progress after the pause", FAULT_BOUND_S)
        run.log.append(
            f"SIGSTOP node {node_id} ({described}) for {resumed_at - paused_at:.0f}s: "
            f"{during} outputs during the pause, {AFTER} more {took:.1f}s after SIGCONT"
        )
        run.restored()
        took = run.finish(resumed_at)
        print(f"every output {took:.1f}s after SIGCONT")
    finally:
        run.close()
