"""The three commit protocols, one class each, behind the interface the stream thread calls.

Each protocol holds a task's whole transaction lifecycle, in the order it happens:
`task_producer` (the producer a new task writes through) -> `begin` (before the task processes
or punctuates: the transaction, under exactly-once, and the task's commit period) -> the task
produces through its collector -> `commit` (changelogs, input offsets, commit, then the write
caches) or, on a failure, `rollback` (abort, discard) -> `recreate_producer` when the producer
is unusable -> `release_producer` when the task closes.

* `AtLeastOnce`: the tasks share one idempotent producer; a commit delivers every open task's
  outputs and changelog records (flush), applies the write caches, then commits the input
  offsets through the consumer. A crash in between replays the batch: at least once.
* `ExactlyOncePerTask` (`exactly_once`): every task has its own transactional producer
  (transactional id `<app_id>-<task id>`), so a new owner of a task fences the old one on any
  broker. Each task's batch is one transaction (outputs, changelogs, input offsets), committed
  one task after another.
* `ExactlyOnceV2` (`exactly_once_v2`): the tasks of a stream thread share the thread's
  transactional producer and commit in one transaction, as in Kafka Streams.

The task manager owns the tasks and asks the protocol for a task's producer, to `begin` a
task's period, to `commit` the open tasks and to `rollback` a failed one (with the tasks that
share its transaction). The calls run one way: a commit calls nothing back; it returns a
`CommitOutcome` (the steps that failed, the tasks whose stores were lost after the commit, a
retry from the committed offsets), which the task manager acts on (task_manager.py,
`TaskManager.commit`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import TopicPartition

from kstream.config import Config
from kstream.errors import KafkaClientError, ProducerFencedError, StoreLostError
from kstream.guarantee import AT_LEAST_ONCE, EXACTLY_ONCE, EXACTLY_ONCE_V2
from kstream.kafka.errors import CommitOutcomeUnknownError, TransactionAbortableError
from kstream.kafka.producer import Producer
from kstream.metrics import Metrics
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask

log = logging.getLogger("kstream.runtime")

__all__ = [
    "AtLeastOnce",
    "CommitConsumer",
    "CommitOutcome",
    "CommitProtocol",
    "ExactlyOncePerTask",
    "ExactlyOnceV2",
    "commit_protocol",
    "commit_transaction",
    "task_transactional_id",
]


def commit_transaction(producer: Producer) -> None:
    """Commit `producer`'s open transaction, telling a failed commit from one whose outcome is
    unknown. An abortable error or a fence means the broker did not commit it; any other
    failure (a timeout, a call abandoned at its deadline, a fatal state) may have come after
    the broker committed it, and is raised as `CommitOutcomeUnknownError` so that the
    transaction's tasks are revived from what the broker holds (failures.py)."""
    try:
        producer.commit()
    except (TransactionAbortableError, ProducerFencedError):
        raise
    except KafkaClientError as e:
        raise CommitOutcomeUnknownError(
            f"{e}; the transaction may have committed", code=e.code
        ) from e


def task_transactional_id(app_id: str, subtopology: int, partition: int) -> str:
    """exactly_once: the transactional id of task (`subtopology`, `partition`)'s producer,
    the same on every instance, so that a new owner of the task fences the old one."""
    return f"{app_id}-{subtopology}_{partition}"


@dataclass
class CommitOutcome:
    """What a commit did, for the task manager to act on (the protocol calls nothing back)."""

    #: the Kafka transactions committed (0 under at_least_once); None: no commit happened
    #: (nothing open, or it failed)
    transactions: int | None = None
    #: steps that raised, in order, each with its task: the task manager routes each
    #: (failures.py) and recovers the task
    failed: list[tuple[RuntimeTask, Exception]] = field(default_factory=list)
    #: tasks committed whose store lost its data while the write caches were applied: their
    #: changelogs hold the commit, so they are rebuilt from them (their `committed` moved on)
    lost: list[RuntimeTask] = field(default_factory=list)
    #: at_least_once: the commit failed with this client error; `retry` lists the tasks to
    #: roll back to their committed offsets (empty: the outputs were applied, only the offset
    #: commit failed, which the next commit retries)
    error: KafkaClientError | None = None
    retry: list[RuntimeTask] = field(default_factory=list)
    #: input offsets moved on: the run of failures is over
    progressed: bool = False


class CommitConsumer(Protocol):
    """The consumer calls a protocol makes (the stream thread's group consumer)."""

    def commit(self, offsets: list[TopicPartition]) -> Any: ...

    def consumer_group_metadata(self) -> Any: ...


class CommitProtocol:
    """One processing guarantee's way of committing and rolling back the thread's tasks: the
    object the stream thread, the task manager and the restore ask what the guarantee means
    for them (`transactional`, `start`, `fence_previous_owners`), so no other place tests the
    guarantee's name."""

    #: the processing guarantee this protocol carries out (kstream.guarantee)
    guarantee = AT_LEAST_ONCE
    #: tasks write in Kafka transactions: a restore reads changelogs read_committed up to
    #: their stable end, a failed step's producer may be fenced (failures.route)
    transactional = False
    #: every task has its own transactional id, so a new owner can fence the previous one
    #: task by task (`fence_previous_owners`)
    fences_per_task = False

    def __init__(self, ctx: RuntimeContext, metrics: Metrics) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self._producer: Producer | None = None
        # Tasks are created side by side: the lock makes one shared producer (a second one
        # with the same transactional id would fence the first).
        self._producer_lock = threading.Lock()

    # --- the thread's shared producer --------------------------------------------------

    def shared_producer(self) -> Producer:
        """The producer the thread's tasks share (not used by `ExactlyOncePerTask`)."""
        with self._producer_lock:
            if self._producer is None:
                self._producer = self._new_shared_producer()
            return self._producer

    def _new_shared_producer(self) -> Producer:
        return self.ctx.new_producer(None)

    def renew_shared_producer(self, tasks: Sequence[RuntimeTask]) -> None:
        """Replace a fatal shared producer (its tasks were rolled back)."""
        if self._producer is not None:
            try:
                self._producer.close(1.0, drop_undelivered=True)
            except Exception:
                pass
            self._producer = None
        producer = self.shared_producer()
        for rt in tasks:
            rt.producer = producer

    def start(self) -> None:
        """Before the thread joins its group: whatever the guarantee starts first (nothing,
        unless `ExactlyOnceV2`)."""

    def fence_previous_owners(self, keys: Sequence[tuple[int, int]]) -> None:
        """Fence the previous owners of tasks `keys`, whose open transaction holds up reading
        their committed offsets: possible only with per-task transactional ids
        (`fences_per_task`); nothing otherwise."""

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(5.0, drop_undelivered=True)
            self._producer = None

    # --- a task's lifecycle, in order -------------------------------------------------------

    def task_producer(self, subtopology: int, partition: int) -> Producer:
        """The producer a new task writes through: the thread's shared one, unless the
        protocol gives each task its own."""
        return self.shared_producer()

    def begin(self, rt: RuntimeTask) -> None:
        """Open `rt`'s commit period before it processes or punctuates (at most once per
        commit): under exactly-once its transaction first, unless the producer it shares
        is in one already."""
        if rt.open:
            return
        if self.transactional and not rt.producer.in_transaction:
            rt.producer.begin()
        rt.start_period()

    def commit(self, tasks: Sequence[RuntimeTask], consumer: CommitConsumer) -> CommitOutcome:
        """Commit the open `tasks`; what happened (`CommitOutcome`). A step that fails is
        reported, not recovered: the task manager rolls its task back."""
        raise NotImplementedError

    @staticmethod
    def _step(out: CommitOutcome, rt: RuntimeTask, fn: Callable[..., Any], *args: Any) -> bool:
        """Run one step of `rt`'s commit; a failure goes into `out.failed` (False)."""
        try:
            fn(*args)
            return True
        except Exception as e:
            out.failed.append((rt, e))
            return False

    @staticmethod
    def _apply(out: CommitOutcome, rt: RuntimeTask, delivered: dict[TP, int]) -> None:
        """Apply `rt`'s write caches after its commit (`delivered`: changelog offsets). A
        store that lost its data meanwhile goes into `out.lost`: its changelog holds this
        commit already, so the task manager rebuilds it from there."""
        try:
            rt.apply(delivered)
        except StoreLostError as e:
            log.warning("task %s: %s after its commit; rebuilding its stores", rt.id, e)
            rt.committed.update(rt.next_offsets)
            out.lost.append(rt)

    def scope(self, rt: RuntimeTask, tasks: Sequence[RuntimeTask]) -> list[RuntimeTask]:
        """The tasks a failure of `rt` rolls back: `rt` alone unless they share a transaction."""
        return [rt]

    def rollback(
        self, rt: RuntimeTask, tasks: Sequence[RuntimeTask], fenced: bool = False
    ) -> list[RuntimeTask]:
        """Roll back `rt` (and the tasks sharing its transaction); the tasks rolled back.

        Each task of the scope: its open transaction is aborted (the first task of a shared
        one ends it for all), then its uncommitted work is discarded. An abort that fails
        leaves the producer unusable, so it is recreated, unless it was fenced: a new
        producer with the same transactional id would fence the task's new owner.
        """
        if self.transactional and rt.producer.in_transaction:
            self.metrics.transaction_aborted()
        scope = self.scope(rt, tasks)
        log.debug("rolling back tasks %s", [one.id for one in scope])
        for one in scope:
            producer = one.producer
            if self.transactional and producer.in_transaction:
                try:
                    producer.abort()
                except Exception as e:
                    if not fenced and not producer.fenced():
                        log.warning(
                            "task %s: abort failed (%s); recreating its producer", one.id, e
                        )
                        self.recreate_producer(one, tasks)
            one.discard()
        return scope

    def recreate_producer(self, rt: RuntimeTask, tasks: Sequence[RuntimeTask]) -> None:
        """Replace `rt`'s unusable producer (after its tasks were rolled back); `tasks`: the
        thread's tasks, which a shared producer is replaced for."""

    def release_producer(self, producer: Producer) -> None:
        """A task closed (or could not be created): close `producer` if it was the task's
        own (a shared one closes with the protocol, `close`)."""

    def settle(self, keys: Sequence[tuple[int, int]], tasks: Sequence[RuntimeTask]) -> None:
        """Settle the last transaction of tasks `keys`, whose commit has an unknown outcome
        (`CommitOutcomeUnknownError`), before they are revived from the committed state: a new
        producer with the transactional id completes it if the broker took the commit, aborts
        it otherwise, and waits until its markers are written (so a restore that follows reads
        what it committed). `tasks`: the thread's tasks (a shared producer is theirs)."""

    def after_fenced(self) -> None:
        """The thread was fenced and has closed its tasks to rejoin the group: a producer that
        outlives its tasks (the shared one) is replaced before the thread rejoins, as Kafka
        Streams re-initialises its thread producer after a `TaskMigratedException`. A task's
        own producer closed with its task already; new tasks get new ones."""


class AtLeastOnce(CommitProtocol):
    """Flush outputs and changelogs, apply the write caches, then commit the input offsets.

    An offset commit that fails after the caches were applied leaves nothing to roll back
    (the outputs are delivered, the stores hold the batch): its offsets are kept and committed
    with the next commit, whether or not new input arrives by then, for the partitions the
    thread still owns (a partition another member took over is its to commit).
    """

    def __init__(self, ctx: RuntimeContext, metrics: Metrics) -> None:
        super().__init__(ctx, metrics)
        # input offsets applied but not yet committed (their offset commit failed)
        self._unacked: dict[TP, int] = {}

    def recreate_producer(self, rt: RuntimeTask, tasks: Sequence[RuntimeTask]) -> None:
        """The shared producer was abandoned in a stuck flush (kstream.kafka.deadline)."""
        self.renew_shared_producer(tasks)

    def commit(self, tasks: Sequence[RuntimeTask], consumer: CommitConsumer) -> CommitOutcome:
        out = CommitOutcome()
        open_tasks = [rt for rt in tasks if rt.open and self._step(out, rt, rt.verify_stores)]
        owned = {tp for rt in tasks for tp in rt.tps}
        self._unacked = {tp: o for tp, o in self._unacked.items() if tp in owned}
        if not open_tasks and not self._unacked:
            return out
        applied = False
        try:
            for rt in open_tasks:
                rt.produce_changelogs()
            producer = self.shared_producer()
            producer.flush(self.ctx.config.shutdown_timeout / 1000)
            delivered = producer.take_offsets()
            for rt in open_tasks:
                self._unacked.update(rt.next_offsets)
                self._apply(out, rt, delivered)
            applied = True
            if self._unacked:
                consumer.commit([TopicPartition(t, p, o) for (t, p), o in self._unacked.items()])
                self._unacked = {}
        except KafkaClientError as e:
            out.error = e
            if applied:
                # nothing to roll back: counted, backed off, committed with the next
                log.warning("committing offsets failed: %s; committing them with the next", e)
            else:
                log.warning("commit failed: %s; retrying from the committed offsets", e)
                out.retry = open_tasks
            return out
        out.transactions, out.progressed = 0, True
        return out


class ExactlyOncePerTask(CommitProtocol):
    """One transaction per task, committed one task after another.

    Each task has its own transactional producer (`task_transactional_id`), so a commit
    costs one broker round trip per task. Ending them side by side on a pool would cost about
    one, but on the test broker it made some committed transactions read as aborted: a
    read_committed reader then skipped every later record of those producers (about one
    benchmark run in twenty; none in a hundred one after another). Kafka Streams also commits
    its tasks one after another.
    """

    guarantee = EXACTLY_ONCE
    transactional = True
    fences_per_task = True

    def task_producer(self, subtopology: int, partition: int) -> Producer:
        return self.ctx.new_producer(task_transactional_id(self.ctx.app_id, subtopology, partition))

    def fence_previous_owners(self, keys: Sequence[tuple[int, int]]) -> None:
        """Start a producer with each task's transactional id (`task_transactional_id`) and
        close it, aborting the previous owner's open transaction; side by side, one round trip
        for all."""

        def fence(key: tuple[int, int]) -> None:
            self.task_producer(*key).close(1.0, drop_undelivered=True)

        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = [pool.submit(fence, key) for key in keys]
        for fut in futures:
            if fut.exception() is not None:
                log.warning("fencing a previous owner: %s", fut.exception())

    def commit(self, tasks: Sequence[RuntimeTask], consumer: CommitConsumer) -> CommitOutcome:
        out = CommitOutcome()
        step = self._step
        meta = consumer.consumer_group_metadata()

        def end(rt: RuntimeTask) -> None:
            """Send the task's input offsets into its transaction and commit it."""
            offsets = rt.offsets()
            if offsets:
                rt.producer.send_offsets(offsets, meta)
            commit_transaction(rt.producer)

        committed = 0
        for rt in list(tasks):
            if not rt.open or not step(out, rt, rt.verify_stores):
                continue
            if not step(out, rt, rt.produce_changelogs):
                continue
            if step(out, rt, end, rt):
                self._apply(out, rt, rt.producer.take_offsets())
                committed += 1
                if rt.next_offsets:
                    out.progressed = True
        out.transactions = committed or None
        return out

    def recreate_producer(self, rt: RuntimeTask, tasks: Sequence[RuntimeTask]) -> None:
        try:
            rt.producer.close(1.0, drop_undelivered=True)
        except Exception:
            pass
        rt.producer = self.task_producer(rt.subtopology, rt.partition)

    def release_producer(self, producer: Producer) -> None:
        producer.close(1.0, drop_undelivered=True)

    def settle(self, keys: Sequence[tuple[int, int]], tasks: Sequence[RuntimeTask]) -> None:
        for key in keys:
            self.task_producer(*key).close(1.0, drop_undelivered=True)


class ExactlyOnceV2(CommitProtocol):
    """One transaction holds every open task's outputs, changelogs and input offsets.

    A zombie is fenced only by a broker that checks consumer-group generations in
    transactional offset commits (KIP-447); the producer's transactional id is the thread's,
    the same across restarts, so a restarted instance fences its predecessor at once.
    """

    guarantee = EXACTLY_ONCE_V2
    transactional = True

    def __init__(self, ctx: RuntimeContext, metrics: Metrics, transactional_id: str) -> None:
        super().__init__(ctx, metrics)
        self.transactional_id = transactional_id

    def _new_shared_producer(self) -> Producer:
        return self.ctx.new_producer(
            self.transactional_id, shared_producer_settings(self.ctx.config)
        )

    def start(self) -> None:
        """The thread's transactional producer, started before joining, fences this
        instance's predecessor (same transactional id) and aborts its open transaction, whose
        pending offsets would hold up reading the committed ones
        (`TaskPartitions.read_committed`, partitions.py)."""
        self.shared_producer()

    def scope(self, rt: RuntimeTask, tasks: Sequence[RuntimeTask]) -> list[RuntimeTask]:
        return [rt, *(o for o in tasks if o.open and o is not rt)]

    def recreate_producer(self, rt: RuntimeTask, tasks: Sequence[RuntimeTask]) -> None:
        self.renew_shared_producer(tasks)

    def settle(self, keys: Sequence[tuple[int, int]], tasks: Sequence[RuntimeTask]) -> None:
        self.renew_shared_producer(tasks)

    def after_fenced(self) -> None:
        """A fenced producer stays fenced: every later call fails the same way, so keeping it
        would fail the first `begin` after each rejoin, for good. Its transactional id is this
        thread's alone (the state directory's, whose lock no live instance shares), so what
        fenced it was the broker aborting a transaction open past `transaction.timeout.ms`
        (a slow batch, a long pause) or a predecessor's producer: the new producer's
        `init_transactions` takes the id back and the tasks start again from their
        committed offsets."""
        if self._producer is not None and self._producer.is_fatal():
            log.info(
                "transactional.id=%r: replacing the fenced producer before rejoining",
                self.transactional_id,
            )
            self.renew_shared_producer([])

    def commit(self, tasks: Sequence[RuntimeTask], consumer: CommitConsumer) -> CommitOutcome:
        out = CommitOutcome()
        meta = consumer.consumer_group_metadata()
        open_tasks = [rt for rt in tasks if rt.open]
        if not open_tasks:
            return out
        for rt in open_tasks:
            if not self._step(out, rt, rt.verify_stores):
                return out  # its rollback rolls back every task of the shared transaction

        def end() -> None:
            offsets: list[TopicPartition] = []
            for rt in open_tasks:
                rt.produce_changelogs()
                offsets += rt.offsets()
            producer = open_tasks[0].producer
            if offsets:
                producer.send_offsets(offsets, meta)
            commit_transaction(producer)

        if not self._step(out, open_tasks[0], end):
            return out
        delivered = open_tasks[0].producer.take_offsets()
        for rt in open_tasks:
            self._apply(out, rt, delivered)
        out.progressed = any(rt.next_offsets for rt in open_tasks)
        out.transactions = len(open_tasks)
        return out


def shared_producer_settings(cfg: Config) -> dict[str, Any]:
    """exactly_once_v2's producer settings: the user's `kafka`, lingering up to a commit.

    A transaction's records are invisible to read_committed readers until it commits, and the
    commit sends whatever still lingers at once; so the one producer of all the thread's tasks
    can batch for a whole commit interval (capped at Kafka Streams' producer default, 100 ms)
    without delaying a single output. It then writes one batch per partition per commit instead
    of one per 5 ms, which on the test broker halves the latency tail (whose fetches list every
    batch a partition holds). Per-task producers keep the 5 ms default: measured, a longer
    linger did not move their latency and cost their throughput. An explicit `linger.ms` (or
    its alias `queue.buffering.max.ms`) in `kafka` wins.
    """
    kafka = dict(cfg.kafka)
    if "linger.ms" not in kafka and "queue.buffering.max.ms" not in kafka:
        kafka["linger.ms"] = max(5, min(100, cfg.commit_interval))
    return kafka


def commit_protocol(ctx: RuntimeContext, metrics: Metrics, transactional_id: str) -> CommitProtocol:
    """The protocol of the app's processing guarantee (`ctx.guarantee`; `transactional_id`:
    v2's producer): the one place that turns the guarantee's name into behaviour."""
    guarantee = ctx.guarantee
    if guarantee == AT_LEAST_ONCE:
        return AtLeastOnce(ctx, metrics)
    if guarantee == EXACTLY_ONCE_V2:
        return ExactlyOnceV2(ctx, metrics, transactional_id)
    return ExactlyOncePerTask(ctx, metrics)
