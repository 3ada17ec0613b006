"""The task manager: the stream thread's tasks, from the rebalance that assigns them to their
close.

As in Kafka Streams, the stream thread keeps the poll loop and this object owns the tasks: the
rebalance callbacks (assign, revoke, lost); routing each batch to its tasks and running their
steps (`process`, `process_idle`, `punctuate`, through the `TaskExecutor`,
task_executor.py); committing them (`commit`, through the guarantee's `CommitProtocol`,
commit.py, which returns a `CommitOutcome`, acted on in `_settle`). It composes the parts that
do the rest, as Kafka Streams' TaskManager composes its TaskExecutor and StateUpdater:

* `NewTasks` (new_tasks.py): an assignment's new tasks, their committed offsets read, their
  stores restored beside the running tasks (restorer.py), then created;
* `TaskRecovery` (recovery.py): a task whose step or commit failed, recovered as the table of
  failures.py says (rollback, rebuild, revive, or a rejoin the thread performs);
* `TaskPartitions` (partitions.py): the tasks' partitions at the consumer (committed offsets,
  assignment, pauses, seeks back);
* `ActiveTasks` (active_tasks.py): the running tasks, their creation and close.

The calls run one way: thread -> task manager -> new tasks -> recovery -> partitions -> active
tasks -> executor, protocol, tasks; nothing calls back up. The thread reads what it must act
on: `error` (a rebalance callback gave up) and `rejoin_pending` (a fenced producer).

Under the cooperative protocol (kstream.runtime.rebalance) the callbacks get only the
partitions that move: a revoke commits every open task and closes the moved ones, an assign
creates the new ones, and the tasks that stay are not touched. Under the eager protocol a
revoke takes every partition, so every task closes; as Kafka Streams suspends such tasks, their
stores stay open until the assignment, and the tasks it gives back resume from them (a standby
keeps them instead when standby replicas are on).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

from kstream.kafka.consumer import Consumer
from kstream.metrics import Metrics
from kstream.runtime.active_tasks import ActiveTasks, TaskId, unique
from kstream.runtime.commit import CommitOutcome, CommitProtocol
from kstream.runtime.future_timestamps import FutureTimestamps
from kstream.runtime.new_tasks import RESTORE_SLICE, RESTORE_SLICE_IDLE, NewTasks
from kstream.runtime.partitions import TaskPartitions
from kstream.runtime.purge import RepartitionPurge
from kstream.runtime.recovery import TaskRecovery
from kstream.runtime.retries import Halt, RetryBudget
from kstream.runtime.standby import StandbyTasks
from kstream.runtime.task_executor import TaskExecutor, fetched_lag
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask

log = logging.getLogger("kstream.runtime")

__all__ = ["TaskManager"]


class TaskManager:
    """Owns the stream thread's tasks: rebalance callbacks, processing and commit, over the
    parts it composes (module docstring)."""

    def __init__(
        self,
        ctx: RuntimeContext,
        commits: CommitProtocol,
        retries: RetryBudget,
        metrics: Metrics,
        stop: threading.Event,
        on_state: Callable[[str], None],
        cooperative: bool = False,
        standbys: StandbyTasks | None = None,
        broker_assigned: bool = False,
    ) -> None:
        """`cooperative`: the consumer's group rebalances incrementally (revokes and assigns
        only the partitions that move; kstream.runtime.rebalance). `standbys`: the thread's
        standby replicas (kstream.runtime.standby), which hand their stores to a task
        assigned here and keep those of a task given up. `broker_assigned`: the broker assigns
        the partitions (the consumer protocol, KIP-848): no generation barrier to wait out,
        and every assignment is checked for split tasks (`split_tasks`). `retries`: the
        thread's retry budget (retries.py), which failed steps and reads count against."""
        self.ctx = ctx
        self.commits = commits
        self.retries = retries
        self.metrics = metrics
        self.on_state = on_state
        # the thread's stop, and the error a rebalance callback gave up on (raised by the
        # thread at its next turn)
        self.halt = Halt(stop)
        self.active = ActiveTasks(ctx, commits, metrics, self.halt, standbys)
        self.partitions = TaskPartitions(
            ctx, commits, retries, self.halt, self.active, cooperative, broker_assigned
        )
        self.recovery = TaskRecovery(ctx, commits, retries, self.active, self.partitions)
        self.new_tasks = NewTasks(
            ctx, commits, self.halt, self.active, self.partitions, self.recovery
        )
        # runs each task's step (task_executor.py)
        self.executor = TaskExecutor(
            commits, FutureTimestamps(ctx.config.future_timestamp_warning, metrics)
        )
        # deletes consumed repartition records after commits, as Kafka Streams does
        self.purge = RepartitionPurge(ctx)
        # when the last commit began (the thread commits again `commit_interval` after it)
        self.last_commit = time.monotonic()
        # the running tasks, by id and by partition (the thread and the app read them)
        self.tasks: dict[TaskId, RuntimeTask] = self.active.tasks
        self.task_of: dict[TP, RuntimeTask] = self.active.task_of

    # --- what the thread reads -------------------------------------------------------------

    @property
    def consumer(self) -> Consumer | None:
        return self.partitions.consumer

    @property
    def error(self) -> BaseException | None:
        """The error a rebalance callback gave up on (the thread raises it at its next turn)."""
        return self.halt.error

    @error.setter
    def error(self, error: BaseException | None) -> None:
        self.halt.error = error

    @property
    def rejoin_pending(self) -> bool:
        """A producer was fenced: the thread leaves the group and rejoins (`rejoin`)."""
        return self.recovery.rejoin_pending

    @property
    def restoring(self) -> bool:
        """Some new task is being restored (its partitions paused)."""
        return self.new_tasks.restoring

    @property
    def rebalancing(self) -> bool:
        """The group moved to a generation whose assignment has not arrived (no commit then;
        `TaskPartitions.rebalancing`)."""
        return self.partitions.rebalancing

    @property
    def awaiting_seek(self) -> dict[TP, int]:
        """Partitions rolled back whose seek waits for the rebalance to end."""
        return self.partitions.awaiting_seek

    @property
    def cooperative(self) -> bool:
        """The group rebalances incrementally: a revoke takes only the partitions that move."""
        return self.partitions.cooperative

    @property
    def tasks_created(self) -> int:
        return self.active.created

    @property
    def tasks_closed(self) -> int:
        return self.active.closed

    @property
    def tasks_resumed(self) -> int:
        return self.active.resumed

    @property
    def split_assignments(self) -> int:
        return self.partitions.split_assignments

    # --- the group -------------------------------------------------------------------------

    def subscribe(self, consumer: Consumer) -> None:
        """Subscribe `consumer` (the thread's) to the source topics, with this manager's
        rebalance callbacks."""
        self.partitions.consumer = consumer
        consumer.subscribe(
            self.ctx.compiled.source_topics,
            on_assign=self.on_assign,
            on_revoke=self.on_revoke,
            on_lost=self.on_lost,
        )

    def rejoin(self) -> None:
        """After a fenced producer (`rejoin_pending`): roll every task back without aborting,
        close them, let the protocol replace what the fence left unusable, leave the group and
        join it again (the assignment creates the tasks from the committed state)."""
        consumer = self.consumer
        assert consumer is not None
        self.recovery.rejoin_pending = False
        for rt in self.tasks.values():
            self.recovery.rollback(rt, fenced=True)
        self.close_all()
        self.commits.after_fenced()
        log.info("leaving and rejoining the group")
        consumer.unsubscribe()
        self.subscribe(consumer)

    def apply_seeks(self) -> None:
        """Carry out the seeks deferred while the group rebalanced."""
        self.partitions.apply_seeks()

    def seek_back(self, tasks: list[RuntimeTask]) -> None:
        """Seek the partitions of `tasks`, rolled back, to their committed offsets."""
        self.partitions.seek_back(tasks)

    def rollback(self, rt: RuntimeTask, fenced: bool = False) -> list[RuntimeTask]:
        """Roll back `rt` (and the tasks sharing its transaction); the tasks rolled back."""
        return self.recovery.rollback(rt, fenced=fenced)

    # --- processing ------------------------------------------------------------------------

    def process(self, msgs: list[Any]) -> tuple[dict[TP, list[Any]], int]:
        """Route a consumed batch to its tasks and run each task's share (`TaskExecutor`),
        under `TaskRecovery.guard`. Returns the batch by partition and the records
        processed."""
        groups, per_task = self.executor.route(msgs, self.task_of, self.awaiting_seek)
        guard, processed = self.recovery.guard, 0
        for rt, parts in per_task.items():
            if guard(rt, self.executor.process, rt, parts, self.fetched_lag):
                processed += sum(len(v) for v in parts.values())
        return groups, processed

    def process_idle(self) -> None:
        """Give the tasks that hold back buffered records (task idling) their turn even when
        the batch brought them nothing."""
        now_ms = 0
        for rt in list(self.tasks.values()):
            if rt.buffers is None or not rt.buffers.pending:
                continue
            now_ms = now_ms or int(time.time() * 1000)
            if self.executor.ready_to_drain(rt, now_ms, self.fetched_lag):
                self.recovery.guard(rt, self.executor.drain, rt, now_ms, self.fetched_lag)

    def punctuate(self, now_ms: int) -> None:
        """The tasks' wall-clock punctuations due at `now_ms`."""
        for rt in list(self.tasks.values()):
            if rt.punctuates_wall_clock:
                self.recovery.guard(rt, self.executor.punctuate, rt, now_ms)

    def fetched_lag(self, tp: TP, position: int | None) -> int | None:
        """What the consumer's last fetch says lies past `position` in `tp` (task idling's
        lag, `task_executor.fetched_lag`)."""
        assert self.consumer is not None
        return fetched_lag(self.consumer, tp, position)

    # --- commit ----------------------------------------------------------------------------

    def commit(self) -> int | None:
        """Commit the open tasks now (the thread does every `commit_interval`, when a task
        asks, and at the end; a revoke does first): the guarantee's protocol commits, then its
        outcome is acted on here (`_settle`). The Kafka transactions committed, or None."""
        assert self.consumer is not None
        self.last_commit = time.monotonic()
        t0 = time.perf_counter()
        out = self.commits.commit(list(self.tasks.values()), self.consumer)
        self._settle(out)
        if out.transactions is not None:
            self.metrics.commit(time.perf_counter() - t0, out.transactions)
            self.purge.after_commit(self.tasks.values())
        return out.transactions

    def commit_all_or_rollback(self) -> list[RuntimeTask]:
        """Commit the open tasks (at a revoke or the end); if that raises, roll every task
        back. The tasks rolled back (their partitions must be sought back if they go on)."""
        try:
            self.commit()
        except Exception as e:
            log.warning("final commit failed: %s", e)
            rolled: list[RuntimeTask] = []
            for rt in self.tasks.values():
                rolled += self.recovery.rollback(rt)
            return rolled
        return []

    def _settle(self, out: CommitOutcome) -> None:
        """Act on a commit's outcome: a commit that moved offsets on ends the run of
        failures; each failed step's task is recovered (`recover_from`); a store lost after
        its commit is rebuilt from its changelog, which holds the commit; a failed
        at_least_once commit retries from the committed offsets."""
        if out.progressed:
            self.retries.progressed()
        for rt, error in out.failed:
            self.recovery.recover_from(rt, error)
        for rt in out.lost:
            if self.tasks.get((rt.subtopology, rt.partition)) is rt:
                self.recovery.rebuild(rt)
        if out.error is not None:
            self.recovery.retry_from_committed(out.retry, out.error)

    # --- rebalancing -----------------------------------------------------------------------

    def on_revoke(self, parts: list[TopicPartition]) -> None:
        """Give up `parts`: the tasks they feed close, the others go on (all of them under
        the eager protocol, whose revoke takes every partition).

        Before that the thread commits every open task, as Kafka Streams does: the moving
        tasks' output and offsets must be committed before another instance takes them over,
        and under exactly_once_v2 they share one transaction with the tasks that stay.
        """
        self.on_state("REBALANCING")
        self.new_tasks.stop_restoring(parts)
        moving = self.active.of(parts)
        if moving:
            rolled: list[RuntimeTask] = []
            if self.error is None:
                rolled = self.commit_all_or_rollback()
                # a failed commit may have replaced tasks (revived or rebuilt): the ones that
                # run the partitions now are closed, not the replaced ones again
                moving = self.active.of(parts)
            self._close_tasks(moving, park=True)
            self.seek_back([rt for rt in unique(rolled) if rt in self.tasks.values()])
        self.partitions.release(parts)
        self.partitions.check_split()
        self.active.changed("revoked", moving)

    def on_lost(self, parts: list[TopicPartition]) -> None:
        """`parts` belong to another member already (this one's session ended): their tasks
        are discarded without a commit. Rolling one back rolls back the transaction it
        shares, so the tasks that stay are sought back to their committed offsets."""
        self.on_state("REBALANCING")
        self.new_tasks.stop_restoring(parts)
        lost = self.active.of(parts)
        rolled: list[RuntimeTask] = []
        for rt in lost:
            rolled += self.recovery.rollback(rt)
        self._close_tasks(lost, park=True)
        self.seek_back([rt for rt in unique(rolled) if rt in self.tasks.values()])
        self.partitions.release(parts)
        self.active.changed("lost", lost)

    def on_assign(self, parts: list[TopicPartition]) -> None:
        """Take `parts` (under the cooperative protocol only the partitions added): their new
        tasks go to the restorer (`NewTasks.add`), their partitions are assigned at the
        committed offsets and paused until the tasks are restored (`restore`); tasks with no
        changelog to read are created at once. The tasks already running are left as they
        are."""
        self.on_state("REBALANCING")
        assert self.consumer is not None
        wanted = self.new_tasks.add(parts)
        self.partitions.take(parts, self.new_tasks.start)
        self.new_tasks.pause_restoring(parts)
        self.partitions.check_split()
        self.partitions.assigned()
        self.active.close_suspended()
        self.metrics.rebalance()
        self.active.changed("assigned", [self.tasks[k] for k in wanted if k in self.tasks])
        if not self.restoring:
            self.on_state("RUNNING")

    def restore(self) -> None:
        """One slice of restoration (the thread asks every turn): a few changelog batches
        (`RESTORE_SLICE`, more while no task runs), then each task restored is created and its
        partitions resumed; the app turns RUNNING when none is left restoring."""
        if not self.restoring:
            return
        done = self.new_tasks.step(RESTORE_SLICE if self.tasks else RESTORE_SLICE_IDLE)
        if done and not self.restoring and not self.rebalancing:
            self.on_state("RUNNING")

    # --- close -----------------------------------------------------------------------------

    def _close_tasks(self, tasks: list[RuntimeTask], park: bool = False) -> None:
        """Close `tasks` (their pending seeks dropped); `park`: a task given up in a rebalance
        keeps its stores open (`ActiveTasks.close`)."""
        self.partitions.forget(tasks)
        self.active.close_tasks(tasks, park)

    def close_all(self) -> None:
        """Close every task (a rejoin, the thread's end), the ones being restored, and the
        stores kept suspended."""
        self.new_tasks.close()
        self.partitions.forget(self.tasks.values())
        self.active.close_all()
