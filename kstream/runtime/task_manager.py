"""The task manager: the stream thread's tasks, from the rebalance that assigns them to their
close.

As in Kafka Streams, the stream thread keeps the poll loop and this object owns the tasks: the
rebalance callbacks (assign, revoke, lost), reading the committed offsets of new tasks,
restoring their stores and creating them; routing each batch to its tasks and running their
steps (`process`, `process_idle`, `punctuate`, through the `TaskExecutor`,
task_executor.py); committing them (`commit`, through the guarantee's `CommitProtocol`,
commit.py, which returns a `CommitOutcome`); and recovering a task whose step failed (`guard`:
the table of failures.py, then rollback, rebuild, revive or rejoin). The calls run one way:
thread -> task manager -> executor, protocol, tasks; nothing here calls the thread back. The
thread reads what it must act on: `error` (a rebalance callback gave up) and `rejoin_pending`
(a fenced producer).

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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

from kstream.errors import KafkaClientError, StoreError
from kstream.kafka.consumer import Consumer
from kstream.metrics import Metrics
from kstream.runtime.commit import CommitOutcome, CommitProtocol
from kstream.runtime.failures import Recovery, route
from kstream.runtime.future_timestamps import FutureTimestamps
from kstream.runtime.purge import RepartitionPurge
from kstream.runtime.rebalance import generation, split_tasks
from kstream.runtime.restorer import Restored, Restorer
from kstream.runtime.retries import RetryBudget
from kstream.runtime.standby import StandbyTasks, keepable
from kstream.runtime.task_executor import TaskExecutor, fetched_lag
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask, restore_tasks
from kstream.state import Store
from kstream.state.restore import RestoreResult

log = logging.getLogger("kstream.runtime")

__all__ = ["TaskManager"]

TaskId = tuple[int, int]
"""(sub-topology, partition)"""


RESTORE_SLICE = 1
"""Changelog batches (`restorer.RESTORE_BATCH` records each) restored per loop turn while tasks
run (`TaskManager.restore`): the running tasks' turns go on between the batches."""
RESTORE_SLICE_IDLE = 25
"""Changelog batches restored per loop turn when no task runs yet: restoration has the thread
to itself, and the loop still turns between slices (heartbeats, revokes, standbys)."""

FIRST_READ_S = 0.5
"""exactly_once: how long the first read of a new task's committed offsets may wait before its
previous owners are fenced (`TaskManager._read_committed`)."""


class TaskManager:
    """Owns the stream thread's tasks: rebalances, creation, restore, processing, commit,
    rollback and rebuild."""

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
        self.standbys = standbys
        self.cooperative = cooperative
        self.broker_assigned = broker_assigned
        # assignments seen holding only some of a task's partitions (consumer protocol)
        self.split_assignments = 0
        # tasks created and closed since the start, rebuilt ones included (a task kept across
        # a cooperative rebalance is neither)
        self.tasks_created = 0
        self.tasks_closed = 0
        # the group generation of the last assignment (None: unknown)
        self._generation: int | None = None
        # partition -> offset: seeks deferred while the group rebalances (seek_back)
        self._seeks: dict[TP, int] = {}
        self.commits = commits
        self.retries = retries
        self.metrics = metrics
        # runs each task's step (task_executor.py)
        self.executor = TaskExecutor(
            commits, FutureTimestamps(ctx.config.future_timestamp_warning, metrics)
        )
        # deletes consumed repartition records after commits, as Kafka Streams does
        self.purge = RepartitionPurge(ctx)
        # the error a rebalance callback gave up on (the thread raises it at its next turn)
        self.error: BaseException | None = None
        # a producer was fenced: the thread leaves the group and rejoins at its next turn
        self.rejoin_pending = False
        # when the last commit began (the thread commits again `commit_interval` after it)
        self.last_commit = time.monotonic()
        self.stop = stop
        self.on_state = on_state
        self.tasks: dict[TaskId, RuntimeTask] = {}
        self.task_of: dict[TP, RuntimeTask] = {}
        self.consumer: Consumer | None = None
        # new tasks whose stores are being restored beside the running ones (restorer.py)
        self.restorer = Restorer(ctx, commits.transactional)
        # the stores of tasks given up in the rebalance under way, kept until its assignment
        # (`_suspend`), when standby replicas do not keep them
        self._suspended: dict[TaskId, dict[str, Store]] = {}
        # tasks created from their suspended stores, since the start
        self.tasks_resumed = 0

    def subscribe(self, consumer: Consumer) -> None:
        """Subscribe `consumer` (the thread's) to the source topics, with this manager's
        rebalance callbacks."""
        self.consumer = consumer
        consumer.subscribe(
            self.ctx.compiled.source_topics,
            on_assign=self.on_assign,
            on_revoke=self.on_revoke,
            on_lost=self.on_lost,
        )

    def fail(self, error: BaseException) -> None:
        """Give up (from a rebalance callback, whose errors the consumer swallows): the
        thread raises `error` at its next turn."""
        self.error = error
        self.stop.set()

    def rejoin(self) -> None:
        """After a fenced producer (`rejoin_pending`): roll every task back without aborting,
        close them, let the protocol replace what the fence left unusable, leave the group and
        join it again (the assignment creates the tasks from the committed state)."""
        assert self.consumer is not None
        self.rejoin_pending = False
        for rt in self.tasks.values():
            self.rollback(rt, fenced=True)
        self.close_all()
        self.commits.after_fenced()
        log.info("leaving and rejoining the group")
        self.consumer.unsubscribe()
        self.subscribe(self.consumer)

    # --- processing ------------------------------------------------------------------------

    def process(self, msgs: list[Any]) -> tuple[dict[TP, list[Any]], int]:
        """Route a consumed batch to its tasks and run each task's share (`TaskExecutor`),
        under `guard`. Returns the batch by partition and the records processed."""
        groups, per_task = self.executor.route(msgs, self.task_of, self._seeks)
        processed = 0
        for rt, parts in per_task.items():
            if self.guard(rt, self.executor.process, rt, parts, self.fetched_lag):
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
                self.guard(rt, self.executor.drain, rt, now_ms, self.fetched_lag)

    def punctuate(self, now_ms: int) -> None:
        """The tasks' wall-clock punctuations due at `now_ms`."""
        for rt in list(self.tasks.values()):
            if rt.punctuates_wall_clock:
                self.guard(rt, self.executor.punctuate, rt, now_ms)

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
                rolled += self.rollback(rt)
            return rolled
        return []

    def _settle(self, out: CommitOutcome) -> None:
        """Act on a commit's outcome: a commit that moved offsets on ends the run of
        failures; each failed step's task is recovered (`_recover_from`); a store lost after
        its commit is rebuilt from its changelog, which holds the commit; a failed
        at_least_once commit retries from the committed offsets."""
        if out.progressed:
            self.retries.progressed()
        for rt, error in out.failed:
            self._recover_from(rt, error)
        for rt in out.lost:
            if self.tasks.get((rt.subtopology, rt.partition)) is rt:
                self.rebuild(rt)
        if out.error is not None:
            self._retry_from_committed(out.retry, out.error)

    # --- failures --------------------------------------------------------------------------

    def guard(self, rt: RuntimeTask, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn(*args)`, a step of `rt`; on a failure recover `rt` (`_recover_from`) and
        return False. An error the table of failures.py says stops the thread is raised."""
        try:
            fn(*args)
            return True
        except Exception as e:
            self._recover_from(rt, e)
            return False

    def _recover_from(self, rt: RuntimeTask, error: Exception) -> None:
        """The table of failures.py routes `error`, raised by a step of `rt`; raise it if the
        table says stop, else carry out the recovery (the loop retries)."""
        recovery = route(error, rt.producer if self.commits.transactional else None)
        if recovery is Recovery.STOP:
            raise error
        log.warning("task %s: %s; %s", rt.id, error, recovery.value)
        self._recover(rt, recovery, error)

    def _recover(self, rt: RuntimeTask, recovery: Recovery, e: BaseException) -> None:
        """Carry out `recovery` of `rt` after its step failed with `e`: with a broker that
        answers (an outage is waited out first, and counts no retry), since a recovery may
        need a new producer, which could not start without one."""
        waited = recovery is not Recovery.REBUILD and self.retries.wait_out(e)
        if recovery is Recovery.REJOIN:
            self.rollback(rt, fenced=True)
            self.rejoin_pending = True
            return
        if recovery is Recovery.REVIVE:
            try:
                self.revive(rt)
            except KafkaClientError as revive_error:
                # the group's assignment creates the tasks from the committed state too
                log.warning("reviving the tasks: %s; rejoining the group", revive_error)
                self.rejoin_pending = True
                return
        elif recovery is Recovery.REBUILD:
            self.seek_back(self.rollback_quietly(rt))
            self.rebuild(rt)
        else:
            failed = rt.producer
            self.seek_back(self.rollback(rt))
            # a stuck producer's abort failed at once and the rollback replaced it already
            if recovery is Recovery.RECREATE_PRODUCER or (
                recovery is Recovery.ABANDON_PRODUCER and rt.producer is failed
            ):
                self.commits.recreate_producer(rt, list(self.tasks.values()))
        if not waited:
            self.retries.failed_once(e)

    def _retry_from_committed(self, tasks: Sequence[RuntimeTask], error: BaseException) -> None:
        """After a failed commit: roll `tasks` back, seek to their committed offsets, back off
        (an outage is waited out first, and counts no retry)."""
        waited = self.retries.wait_out(error)
        for rt in tasks:
            self.seek_back(self.rollback(rt))
        if tasks and route(error) is Recovery.ABANDON_PRODUCER:  # a flush stuck for good
            self.commits.recreate_producer(tasks[0], list(self.tasks.values()))
        if not waited:
            self.retries.failed_once(error)

    # --- rebalancing -----------------------------------------------------------------------

    def on_revoke(self, parts: list[TopicPartition]) -> None:
        """Give up `parts`: the tasks they feed close, the others go on (all of them under
        the eager protocol, whose revoke takes every partition).

        Before that the thread commits every open task, as Kafka Streams does: the moving
        tasks' output and offsets must be committed before another instance takes them over,
        and under exactly_once_v2 they share one transaction with the tasks that stay.
        """
        self.on_state("REBALANCING")
        self._stop_restoring(parts)
        moving = self._tasks_of(parts)
        if moving:
            rolled: list[RuntimeTask] = []
            if self.error is None:
                rolled = self.commit_all_or_rollback()
                # a failed commit may have replaced tasks (revived or rebuilt): the ones that
                # run the partitions now are closed, not the replaced ones again
                moving = self._tasks_of(parts)
            self._close_tasks(moving, park=True)
            self.seek_back([rt for rt in _unique(rolled) if rt in self.tasks.values()])
        self._release(parts)
        if self.broker_assigned:
            self._check_split()
        self._after_change("revoked", moving)

    def on_lost(self, parts: list[TopicPartition]) -> None:
        """`parts` belong to another member already (this one's session ended): their tasks
        are discarded without a commit. Rolling one back rolls back the transaction it
        shares, so the tasks that stay are sought back to their committed offsets."""
        self.on_state("REBALANCING")
        self._stop_restoring(parts)
        lost = self._tasks_of(parts)
        rolled: list[RuntimeTask] = []
        for rt in lost:
            rolled += self.rollback(rt)
        self._close_tasks(lost, park=True)
        self.seek_back([rt for rt in _unique(rolled) if rt in self.tasks.values()])
        self._release(parts)
        self._after_change("lost", lost)

    def on_assign(self, parts: list[TopicPartition]) -> None:
        """Take `parts` (under the cooperative protocol only the partitions added): their new
        tasks go to the restorer, their partitions are assigned at the committed offsets and
        paused until the tasks are restored (`restore`); tasks with no changelog to read are
        created at once. The tasks already running are left as they are."""
        self.on_state("REBALANCING")
        assert self.consumer is not None
        compiled = self.ctx.compiled
        wanted: dict[TaskId, None] = {}
        for p in parts:
            sub = compiled.subtopology_for_topic(p.topic)
            key = (sub.id, p.partition)
            if key not in self.tasks and key not in self.restorer:
                wanted[key] = None
        ready: list[Restored] = []
        if wanted:
            tps = [(t, n) for sid, n in wanted for t in compiled.subtopologies[sid].source_topics]
            keys = list(wanted)
            committed = self._read_committed(keys, tps)
            # a suspended task's or a standby's stores go on from their checkpoints: only the
            # tail is restored
            handed = {k: self._handed(k) for k in keys}
            try:
                # every store of every new task, restored by one consumer
                ready = self.restorer.add(keys, committed, handed)
                if not self.tasks:
                    # no task runs that restoring beside could keep going: restored here, as
                    # the tasks of a start or of an eager rebalance are
                    ready += self.restorer.finish()
            except BaseException as e:
                self.fail(e)
                raise
            for done in ready:
                # the tasks of earlier assignments had their partitions assigned and paused
                self._activate(done, resume=not set(done.keys) <= set(wanted))
        self._take(parts)
        self._pause_restoring(parts)
        if self.broker_assigned:
            self._check_split()
        self._generation = generation(self.consumer)
        self._close_suspended()
        self.metrics.rebalance()
        self._after_change("assigned", [self.tasks[k] for k in wanted if k in self.tasks])
        if not self.restorer.active:
            self.on_state("RUNNING")

    # --- restoration beside processing -------------------------------------------------------

    @property
    def restoring(self) -> bool:
        """Some new task is being restored (its partitions paused)."""
        return self.restorer.active

    def restore(self) -> None:
        """One slice of restoration (the thread asks every turn): a few changelog batches
        (`RESTORE_SLICE`, more while no task runs), then each task restored is created and its
        partitions resumed; the app turns RUNNING when none is left restoring."""
        if not self.restorer.active:
            return
        try:
            done = self.restorer.step(RESTORE_SLICE if self.tasks else RESTORE_SLICE_IDLE)
            for group in done:
                self._activate(group, resume=True)
        except BaseException as e:
            self.fail(e)
            raise
        if done and not self.restorer.active and not self.rebalancing:
            self.on_state("RUNNING")

    def _activate(self, done: Restored, resume: bool) -> None:
        """Create the tasks `done` restored; `resume`: their partitions were assigned and
        paused meanwhile, and are resumed now, each sought to where its task starts.

        The seek is not optional: librdkafka drops what it had fetched of a partition when it
        is paused, and unless a record of it was consumed since the assignment (none was) it
        goes on fetching after what it dropped. So each partition is sought to its task's
        committed offset (a new one if it moved while the tasks were created,
        `_restore_again_if_committed_moved`), or, with none committed, to where the offset
        reset would have put it had it been assigned now."""
        compiled = self.ctx.compiled
        keys = done.keys
        tps = [(t, n) for sid, n in keys for t in compiled.subtopologies[sid].source_topics]
        self._create(keys, done.committed, done.results)
        if self.commits.transactional:
            self._restore_again_if_committed_moved(keys, tps)
        if resume:
            created = [self.tasks[k] for k in keys if k in self.tasks]
            self._set_paused(tps, paused=False)
            reset = _reset_offset(self.ctx.config.kafka)
            for rt in created:
                for tp in rt.tps:
                    self._seeks[tp] = rt.committed.get(tp, reset)
            if not self.rebalancing:
                self.apply_seeks()
            self._after_change("restored", created)

    def _pause_restoring(self, parts: list[TopicPartition]) -> None:
        """Pause the partitions of `parts` whose tasks are being restored."""
        waiting = set(self.restorer.task_ids())
        compiled = self.ctx.compiled
        self._set_paused(
            [
                (p.topic, p.partition)
                for p in parts
                if (compiled.subtopology_for_topic(p.topic).id, p.partition) in waiting
            ],
            paused=True,
        )

    def _stop_restoring(self, parts: list[TopicPartition]) -> None:
        """Drop the tasks of `parts` that are being restored (revoked or lost meanwhile),
        resuming their partitions before they are released (librdkafka keeps a partition's
        pause across assignments)."""
        compiled = self.ctx.compiled
        keys = {(compiled.subtopology_for_topic(p.topic).id, p.partition) for p in parts}
        dropped = [key for key in self.restorer.task_ids() if key in keys]
        if not dropped:
            return
        self.restorer.remove(dropped)
        self._set_paused(
            [(p.topic, p.partition) for p in parts if (p.topic, p.partition) not in self.task_of],
            paused=False,
        )
        log.info("dropped tasks %s while restoring", sorted(f"{s}_{n}" for s, n in dropped))

    def _set_paused(self, tps: list[TP], paused: bool) -> None:
        if not tps:
            return
        assert self.consumer is not None
        try:
            if paused:
                self.consumer.pause(tps)
            else:
                self.consumer.resume(tps)
        except Exception as e:  # the consumer is closing, or the partition left meanwhile
            log.debug("%s %s: %s", "pausing" if paused else "resuming", tps, e)

    @property
    def rebalancing(self) -> bool:
        """The group has moved to a new generation whose assignment this consumer has not
        received yet (a cooperative revoke is followed by such a rejoin).

        The thread then commits nothing, as Kafka Streams skips commits while a rebalance is
        in progress: the coordinator would refuse the old generation's offsets. The tasks go
        on processing meanwhile and commit once the assignment arrives; seeks of tasks rolled
        back meanwhile wait for it too (`seek_back`).
        """
        if self.consumer is None or self._generation is None or self.broker_assigned:
            # the consumer protocol has no such barrier: the member epoch librdkafka commits
            # with is the one the coordinator knows, and it moves without a callback here
            return False
        now = generation(self.consumer)
        return now is not None and now != self._generation

    def _check_split(self) -> None:
        """Log (and count) every task of which the consumer now holds only some partitions.

        The broker's range assignor keeps a task's co-partitioned partitions on one member
        (kstream.runtime.rebalance); a split would mean another member's task of the same id
        reads the rest, and a join there or here would miss matches."""
        assert self.consumer is not None
        try:
            held = [(p.topic, p.partition) for p in self.consumer.assignment()]
        except Exception as e:
            # the last revoke of a consumer being closed: librdkafka answers "broker handle
            # destroyed", and an exception out of the callback would end the stream thread
            log.debug("no assignment to check for split tasks: %s", e)
            return
        split = split_tasks(self.ctx.compiled, held)
        if split:
            self.split_assignments += 1
            log.error(
                "the group's assignment splits tasks: %s",
                "; ".join(
                    f"task {sid}_{n} misses "
                    + ", ".join(f"topic={t!r} partition={p}" for t, p in miss)
                    for (sid, n), miss in sorted(split.items())
                ),
            )

    def _tasks_of(self, parts: list[TopicPartition]) -> list[RuntimeTask]:
        """The tasks that read any of `parts`."""
        found = [self.task_of.get((p.topic, p.partition)) for p in parts]
        return _unique([rt for rt in found if rt is not None])

    def _close_tasks(self, tasks: list[RuntimeTask], park: bool = False) -> None:
        """Close `tasks` and forget them; `park`: their stores stay open as standbys when
        standby replicas are on (a task given up in a rebalance)."""
        for rt in tasks:
            self.tasks.pop((rt.subtopology, rt.partition), None)
            for tp in rt.tps:
                if self.task_of.get(tp) is rt:
                    del self.task_of[tp]
                # A pending seek goes with its task: whoever runs the partition next (another
                # instance, or a new task here if it comes back before the rebalance ends)
                # starts from the committed offset, which may have moved on since.
                self._seeks.pop(tp, None)
            self.tasks_closed += 1
            try:
                self._close(rt, park)
            except Exception as e:
                log.warning("closing task %s: %s", rt.id, e)

    def _take(self, parts: list[TopicPartition]) -> None:
        """Apply the assignment of `parts` from the callback (confluent-kafka would apply it
        after the callback returns otherwise): incrementally under the cooperative protocol.

        Each partition starts at the committed offset its task was restored for
        (`RuntimeTask.committed`), not at one the client would read again by itself: should
        the group's committed offset move between the two reads (a previous owner's late
        commit), the task would go on after records whose updates its stores never saw.
        """
        raw = getattr(self.consumer, "raw", None)
        if raw is None:  # an in-memory consumer applies it itself
            return
        parts = [self._at_restored_offset(p) for p in parts]
        if self.cooperative:
            raw.incremental_assign(parts)
        else:
            raw.assign(parts)

    def _at_restored_offset(self, part: TopicPartition) -> TopicPartition:
        """`part` to start at its task's committed offset (as the callback gave it when
        nothing was committed: the consumer's offset reset applies)."""
        tp = (part.topic, part.partition)
        rt = self.task_of.get(tp)
        offset = self.restorer.committed(tp) if rt is None else rt.committed.get(tp)
        if offset is None:
            return part
        return TopicPartition(part.topic, part.partition, offset)

    def _release(self, parts: list[TopicPartition]) -> None:
        """Apply the revocation (or loss) of `parts` from the callback."""
        raw = getattr(self.consumer, "raw", None)
        if raw is None:
            return
        try:
            if self.cooperative:
                raw.incremental_unassign(parts)
            else:
                raw.unassign()
        except Exception as e:  # the consumer is closing: it releases them itself
            log.debug("releasing %d partition(s): %s", len(parts), e)

    def _after_change(self, what: str, changed: list[RuntimeTask]) -> None:
        """Log a change of the task set and publish the partitions now held."""
        if changed or what == "assigned":
            log.info(
                "%s tasks %s; running %s",
                what,
                sorted(rt.id for rt in changed),
                sorted(rt.id for rt in self.tasks.values()),
            )
        self.metrics.set_assigned(list(self.task_of))

    def _create(
        self, keys: list[TaskId], committed: dict[TP, int], restored: list[list[RestoreResult]]
    ) -> None:
        """Create the tasks `keys` from their restored stores; none of them if one fails."""
        # The tasks' producers start side by side (each initialises its transactions with a
        # round trip to the broker): the pause is the slowest one's, not the sum.
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = {
                key: pool.submit(self._new_task, key, committed, stores)
                for key, stores in zip(keys, restored, strict=True)
            }
        try:
            for key, fut in futures.items():
                self._add(key, fut.result())
        except BaseException as e:
            for fut in futures.values():
                if fut.exception() is None:
                    self._close(fut.result())
            for key in keys:  # the tasks running already stay, to be closed by the thread
                rt = self.tasks.pop(key, None)
                for tp in rt.tps if rt is not None else ():
                    self.task_of.pop(tp, None)
            self.fail(e)
            raise

    def _new_task(
        self,
        key: TaskId,
        committed: dict[TP, int],
        restored: list[RestoreResult],
    ) -> RuntimeTask:
        """Task `key` with the producer the commit protocol gives it (released again if the
        task cannot be created)."""
        producer = self.commits.task_producer(*key)
        try:
            return RuntimeTask(self.ctx, key[0], key[1], committed, producer, restored)
        except BaseException:
            self.commits.release_producer(producer)
            raise

    def _close(self, rt: RuntimeTask, park: bool = False) -> None:
        """Close `rt`, then release its producer to the commit protocol. `park` (a task given
        up in a rebalance): its stores stay open, kept by a standby when standby replicas are
        on, else suspended until the rebalance's assignment."""
        key = (rt.subtopology, rt.partition)
        try:
            if not park:
                rt.close()
            elif self.standbys is not None and self.standbys.enabled:
                for store in self.standbys.park(key, rt.close_keeping_stores()):
                    store.close()
            else:
                self._suspend(key, rt.close_keeping_stores())
        finally:
            self.commits.release_producer(rt.producer)

    def _suspend(self, key: TaskId, stores: list[Store]) -> None:
        """Keep the stores of task `key`, given up in a rebalance, until its assignment: an
        eager rebalance revokes every task, and those it gives back resume from their stores
        (restoring only what their changelogs gained meanwhile, usually nothing) instead of
        rebuilding them, as Kafka Streams suspends and resumes them. The others close then."""
        kept, rest = keepable(stores)
        for store in rest:
            store.close()
        if kept:
            self._suspended[key] = kept

    def _handed(self, key: TaskId) -> dict[str, Store]:
        """The open stores task `key` starts from: its own, suspended in this rebalance, or
        a standby's; empty when there are none."""
        suspended = self._suspended.pop(key, None)
        if suspended:
            log.info("task %d_%d: resuming with the stores it had before the rebalance", *key)
            self.tasks_resumed += 1
            return suspended
        return self.standbys.take(key) if self.standbys is not None else {}

    def _close_suspended(self) -> None:
        """Close the stores of the tasks given up and not given back."""
        suspended, self._suspended = self._suspended, {}
        for stores in suspended.values():
            self._close_stores(stores)

    @staticmethod
    def _close_stores(stores: dict[str, Store]) -> None:
        for store in stores.values():
            try:
                store.close()
            except Exception as e:
                log.warning("closing store %r: %s", store.name, e)

    def _add(self, key: TaskId, rt: RuntimeTask) -> None:
        self.tasks_created += 1
        self.tasks[key] = rt
        for tp in rt.tps:
            self.task_of[tp] = rt

    def _read_committed(
        self, keys: list[TaskId], tps: list[TP], fence: bool = True
    ) -> dict[TP, int]:
        """The group's committed offsets of `tps` (the partitions of tasks `keys`), read again
        until the read succeeds.

        A read_committed consumer's read waits while an open transaction holds offsets pending
        for these partitions (KIP-447): that of a previous owner killed between sending its
        offsets and committing, until a producer with its transactional id starts up (fencing
        it) or the broker aborts it after `transaction.timeout.ms`. Under exactly_once the
        tasks' transactional ids are known, so a failed read fences their previous owners and
        reads again; under exactly_once_v2 `open` fenced this instance's predecessor, and
        another instance's transaction ends with its restart or its timeout. The read is
        retried rather than raised: out of the rebalance callback, an error would leave the
        partitions assigned (confluent-kafka assigns them anyway) with no task to run them. A
        partition answered with an error fails the read too (`_checked`). `fence`: whether a
        failed read fences (not once the tasks' own producers are up: it would fence them).
        """
        assert self.consumer is not None
        per_task = fence and self.commits.fences_per_task
        full = self.ctx.config.connect_timeout / 1000
        # A read takes milliseconds unless a previous owner's open transaction holds offsets
        # pending (a SIGKILLed owner's, until fenced or timed out). Under exactly_once the first
        # try is short, so the fence comes soon: the owner is gone, and every second of the
        # try is a second of the failover (2 s made one standby failover take 5.0 s instead
        # of 2.2-2.4). A slow answer fences a previous owner that needed no fencing: harmless,
        # since the task is this instance's now.
        timeout = min(FIRST_READ_S, full) if per_task else full
        while True:
            try:
                found = _checked(self.consumer.committed(tps, timeout=timeout))
                break
            except KafkaClientError as e:
                if self.stop.is_set():
                    raise
                log.warning(
                    "tasks %s: %s (an open transaction of a previous owner?); %s",
                    sorted(f"{sid}_{p}" for sid, p in keys),
                    e,
                    "fencing their previous owners, reading again" if per_task else "retrying",
                )
                if per_task:
                    self.commits.fence_previous_owners(keys)
                try:
                    self.retries.failed_once(e)
                except BaseException:
                    self.fail(e)
                    raise
                timeout = full
        committed: dict[TP, int] = {}
        for c in found:
            if c.offset is not None and c.offset >= 0:
                committed[(c.topic, c.partition)] = c.offset
        return committed

    def _restore_again_if_committed_moved(
        self, keys: list[TaskId], tps: list[TP]
    ) -> list[RuntimeTask]:
        """Restore again the tasks whose committed offsets moved while they were created.

        The offsets were read before the tasks' producers fenced the previous owner, which may
        still have been committing: a broker that completes a rebalance before every member
        rejoined, and accepts offsets from a departed member (the test broker), lets it go on
        until it is fenced. A task restored with the older offsets would then skip that
        owner's last committed changelog records while the consumer resumes after them,
        losing their updates. Now that every task's producer is initialised the offsets are
        final, so a task whose offsets moved is rebuilt from them. Returns the rebuilt tasks
        (their partitions must start at the new offsets).
        """
        assert self.consumer is not None
        # read as before, but with the tasks' own producers up: fencing now would fence them
        final = self._read_committed(keys, tps, fence=False)
        rebuilt: list[RuntimeTask] = []
        for rt in [self.tasks[k] for k in keys if k in self.tasks]:
            now = {tp: final[tp] for tp in rt.tps if tp in final}
            if now != rt.committed:
                log.info("task %s: offsets committed meanwhile %s; restoring again", rt.id, now)
                rt.committed = now
                self.rebuild(rt)
                rebuilt.append(self.tasks[(rt.subtopology, rt.partition)])
        return rebuilt

    def close_all(self) -> None:
        """Close every task (a rejoin, the thread's end), the ones being restored, and the
        stores kept suspended."""
        restoring = self.restorer.task_ids()
        self.restorer.close()
        if restoring and self.consumer is not None:
            # their partitions are released next: resumed first, as `_stop_restoring` does
            compiled = self.ctx.compiled
            self._set_paused(
                [(t, n) for sid, n in restoring for t in compiled.subtopologies[sid].source_topics],
                paused=False,
            )
        self._close_tasks(list(self.tasks.values()))
        self.tasks.clear()
        self.task_of.clear()
        self._close_suspended()

    # --- rollback and rebuild ---------------------------------------------------------------

    def scope(self, rt: RuntimeTask) -> list[RuntimeTask]:
        """The tasks a failure of `rt` rolls back (those sharing its transaction)."""
        return self.commits.scope(rt, list(self.tasks.values()))

    def rollback(self, rt: RuntimeTask, fenced: bool = False) -> list[RuntimeTask]:
        """Roll back `rt` (and the tasks sharing its transaction); the tasks rolled back."""
        return self.commits.rollback(rt, list(self.tasks.values()), fenced=fenced)

    def rollback_quietly(self, rt: RuntimeTask) -> list[RuntimeTask]:
        """Roll back `rt` whose store lost its data (re-reading its marks may fail: the task
        is rebuilt next anyway)."""
        try:
            return self.rollback(rt)
        except StoreError as e:
            log.warning("task %s: rollback: %s", rt.id, e)
            return self.scope(rt)

    def rebuild(self, rt: RuntimeTask) -> None:
        """Replace `rt` by a new task whose stores are restored from their changelogs.

        The new task starts from `rt.committed`, the input offsets of its last commit, which
        are also what the restore admits changelog records by.
        """
        key = (rt.subtopology, rt.partition)
        self.tasks.pop(key, None)
        self.tasks_closed += 1
        try:
            self._close(rt)
        except Exception as e:
            log.warning("closing task %s: %s", rt.id, e)
        committed = dict(rt.committed)
        restored = restore_tasks(
            self.ctx, [key], committed, transactional=self.commits.transactional
        )[0]
        fresh = self._new_task(key, committed, restored)
        self._add(key, fresh)
        log.info("task %s: stores rebuilt from their changelogs", rt.id)

    def revive(self, rt: RuntimeTask) -> None:
        """Create `rt` and the tasks sharing its transaction again from the committed state,
        after a commit whose outcome is unknown (`CommitOutcomeUnknownError`: its answer timed
        out, or the call was abandoned at its deadline), as Kafka Streams closes such tasks
        dirty and revives them.

        Replaying the batch from the offsets the tasks knew would write its outputs twice if
        the broker did commit it. So the tasks are closed without their uncommitted work, the
        transaction is settled by a new producer with its transactional id (completed if the
        broker took the commit, aborted otherwise, its markers written either way), and only
        then are the committed offsets read and the stores restored to them: whichever the
        outcome, stores and positions agree with what readers see. A failure here raises; the
        thread then rejoins the group, which creates the tasks from the committed state too.
        """
        scope = self.commits.rollback(rt, list(self.tasks.values()), fenced=True)
        keys = [(one.subtopology, one.partition) for one in scope]
        self._close_tasks(scope)
        self.commits.settle(keys, list(self.tasks.values()))
        compiled = self.ctx.compiled
        tps = [(t, n) for sid, n in keys for t in compiled.subtopologies[sid].source_topics]
        committed = self._read_committed(keys, tps, fence=False)
        restored = restore_tasks(
            self.ctx, keys, committed, {}, transactional=self.commits.transactional
        )
        self._create(keys, committed, restored)
        revived = [self.tasks[k] for k in keys]
        self.seek_back(revived)
        log.info(
            "revived tasks %s from the committed state: %s",
            sorted(one.id for one in revived),
            {f"{t}[{p}]": o for one in revived for (t, p), o in sorted(one.committed.items())},
        )

    def seek_back(self, tasks: list[RuntimeTask]) -> None:
        """Seek the tasks' partitions back to their committed offsets. Only tasks that were
        rolled back: the others still have this batch's records to process.

        While the group moves to a new generation (`rebalancing`: a commit that raced the
        join failed and was rolled back) the seeks wait for its assignment: librdkafka holds
        the partitions paused then, and a partition sought meanwhile was seen to fetch
        nothing for most of a second after the rebalance. Until sought, its records are not
        processed (`awaiting_seek`).
        """
        assert self.consumer is not None
        for rt in tasks:
            for tp in rt.tps:
                self._seeks[tp] = rt.committed.get(tp, OFFSET_BEGINNING)
        if tasks and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "seeking back %s (%s)",
                {f"{t}[{p}]": o for (t, p), o in self._seeks.items()},
                "after the rebalance" if self.rebalancing else "now",
            )
        if not self.rebalancing:
            self.apply_seeks()

    @property
    def awaiting_seek(self) -> dict[TP, int]:
        """Partitions rolled back whose seek waits for the rebalance to end (their records
        are skipped until then), with the offset they go back to."""
        return self._seeks

    def apply_seeks(self) -> None:
        """Carry out the seeks `seek_back` deferred."""
        assert self.consumer is not None
        seeks, self._seeks = self._seeks, {}
        for (t, p), off in seeks.items():
            if (t, p) not in self.task_of:
                continue  # revoked meanwhile: its next owner starts from the committed offset
            try:
                self.consumer.seek(t, p, off)
                log.debug("sought %s[%d] back to %d", t, p, off)
            except KafkaClientError as e:
                # librdkafka refuses a seek while the partition is not fetching (between the
                # rounds of a cooperative rebalance, or just assigned). Dropping it would go on
                # after the rolled-back records and lose their outputs: it stays pending (its
                # records skipped) and is tried again on the next turn of the loop.
                self._seeks[(t, p)] = off
                log.debug("seek %s[%d] to %d: %s (tried again)", t, p, off, e)


def _checked(found: list[TopicPartition]) -> list[TopicPartition]:
    """`found` (committed offsets as read), unless a partition came back with an error.

    The client reports such a partition with no offset, the same as a partition nothing was
    committed for. Taken so, the task would hold no committed offset for it: a rollback (or a
    rebuild) before its first commit would seek the partition back to its beginning while its
    stores stay restored up to the real committed offset, and count every record again. Raised
    instead, the read fails as a whole and is read again."""
    for c in found:
        err = getattr(c, "error", None)
        if err is not None:
            raise KafkaClientError(
                f"reading the committed offset of topic={c.topic!r} partition={c.partition}: {err}"
            )
    return found


def _reset_offset(kafka: Mapping[str, Any]) -> int:
    """Where a partition with no committed offset starts: the consumer's `auto.offset.reset`
    (kstream's default: earliest) as a logical offset to seek to."""
    policy = str(kafka.get("auto.offset.reset", "earliest")).lower()
    return OFFSET_END if policy in ("latest", "largest", "end") else OFFSET_BEGINNING


def _unique(tasks: list[RuntimeTask]) -> list[RuntimeTask]:
    """`tasks` without repeats, in order."""
    return list(dict.fromkeys(tasks))
