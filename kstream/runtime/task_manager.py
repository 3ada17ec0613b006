"""The task manager: the stream thread's tasks, from the rebalance that assigns them to their
close.

As in Kafka Streams, the stream thread keeps the poll-process-commit loop and this object owns
the tasks: the rebalance callbacks (assign, revoke, lost), reading the committed offsets of new
tasks, restoring their stores and creating them, rebuilding a task whose stores were lost, and
rolling tasks back to their committed offsets. What it needs back from the thread (its state,
its commit, its retry budget, giving up) is the small `TaskHost` interface.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from kstream.errors import KafkaClientError, StoreError
from kstream.kafka.consumer import Consumer
from kstream.metrics import Metrics
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask, restore_tasks
from kstream.state.restore import RestoreResult

log = logging.getLogger("kstream.runtime")

__all__ = ["TaskHost", "TaskManager"]

TaskId = tuple[int, int]
"""(sub-topology, partition)"""


class TaskHost(Protocol):
    """What the task manager asks of the stream thread."""

    @property
    def error(self) -> BaseException | None:
        """The error the thread stopped on, if any (a revoke then commits nothing)."""
        ...

    def commit_all_or_rollback(self) -> None:
        """Commit the open tasks before they are revoked (roll them back if that fails)."""
        ...

    def failed_once(self, error: BaseException) -> None:
        """Count a failed attempt and back off; raise `error` when retries are used up."""
        ...

    def fail(self, error: BaseException) -> None:
        """Give up: record `error` as the thread's and ask the loop to stop."""
        ...


class TaskManager:
    """Owns the stream thread's tasks: rebalances, creation, restore, rebuild and rollback."""

    def __init__(
        self,
        ctx: RuntimeContext,
        host: TaskHost,
        commits: CommitProtocol,
        metrics: Metrics,
        stop: threading.Event,
        on_state: Callable[[str], None],
    ) -> None:
        self.ctx = ctx
        self.host = host
        self.commits = commits
        self.metrics = metrics
        self.stop = stop
        self.on_state = on_state
        self.tasks: dict[TaskId, RuntimeTask] = {}
        self.task_of: dict[TP, RuntimeTask] = {}
        self.consumer: Consumer | None = None

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

    # --- rebalancing -----------------------------------------------------------------------

    def on_revoke(self, parts: list[TopicPartition]) -> None:
        self.on_state("REBALANCING")
        if self.host.error is None:
            self.host.commit_all_or_rollback()
        self.close_all()
        self.metrics.set_assigned([])

    def on_lost(self, parts: list[TopicPartition]) -> None:
        self.on_state("REBALANCING")
        for rt in self.tasks.values():
            self.rollback(rt)
        self.close_all()
        self.metrics.set_assigned([])

    def on_assign(self, parts: list[TopicPartition]) -> None:
        self.on_state("REBALANCING")
        assert self.consumer is not None
        compiled = self.ctx.compiled
        wanted: dict[TaskId, None] = {}
        for p in parts:
            sub = compiled.subtopology_for_topic(p.topic)
            wanted[(sub.id, p.partition)] = None
        tps = [(t, n) for sid, n in wanted for t in compiled.subtopologies[sid].source_topics]
        keys = list(wanted)
        committed = self._read_committed(keys, tps)
        try:
            # every store of every new task, restored by one consumer
            restored = restore_tasks(self.ctx, keys, committed)
        except BaseException as e:
            self.host.fail(e)
            raise
        self._create(keys, committed, restored)
        log.info("assigned tasks %s", sorted(rt.id for rt in self.tasks.values()))
        m = self.metrics
        m.rebalance()
        m.set_assigned(list(self.task_of))
        if self.ctx.exactly_once:
            self._restore_again_if_committed_moved(tps)
        self.on_state("RUNNING")

    def _create(
        self, keys: list[TaskId], committed: dict[TP, int], restored: list[list[RestoreResult]]
    ) -> None:
        """Create the tasks `keys` from their restored stores; none of them if one fails."""
        # The tasks' producers start side by side (each initialises its transactions with a
        # round trip to the broker): the pause is the slowest one's, not the sum.
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = {
                key: pool.submit(RuntimeTask, self.ctx, key[0], key[1], committed, stores)
                for key, stores in zip(keys, restored, strict=True)
            }
        try:
            for key, fut in futures.items():
                self._add(key, fut.result())
        except BaseException as e:
            for fut in futures.values():
                if fut.exception() is None:
                    fut.result().close()
            self.tasks.clear()
            self.task_of.clear()
            self.host.fail(e)
            raise

    def _add(self, key: TaskId, rt: RuntimeTask) -> None:
        self.tasks[key] = rt
        for tp in rt.tps:
            self.task_of[tp] = rt

    def _read_committed(self, keys: list[TaskId], tps: list[TP]) -> dict[TP, int]:
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
        partitions assigned (confluent-kafka assigns them anyway) with no task to run them.
        """
        assert self.consumer is not None
        per_task = self.ctx.exactly_once and not self.ctx.shared_transactions
        full = self.ctx.config.connect_timeout / 1000
        # a read takes milliseconds; under exactly_once a short first try leaves time to fence
        timeout = min(2.0, full) if per_task else full
        while True:
            try:
                found = self.consumer.committed(tps, timeout=timeout)
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
                    self._fence_previous_owners(keys)
                try:
                    self.host.failed_once(e)
                except BaseException:
                    self.host.fail(e)
                    raise
                timeout = full
        committed: dict[TP, int] = {}
        for c in found:
            if c.offset is not None and c.offset >= 0:
                committed[(c.topic, c.partition)] = c.offset
        return committed

    def _fence_previous_owners(self, keys: list[TaskId]) -> None:
        """exactly_once: start a producer with each task's transactional id (RuntimeTask's,
        `<app_id>-<sub-topology>_<partition>`) and close it, aborting the previous owner's open
        transaction; side by side, one round trip for all."""

        def fence(key: TaskId) -> None:
            producer = self.ctx.new_producer(f"{self.ctx.app_id}-{key[0]}_{key[1]}")
            producer.close(1.0, drop_undelivered=True)

        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = [pool.submit(fence, key) for key in keys]
        for fut in futures:
            if fut.exception() is not None:
                log.warning("fencing a previous owner: %s", fut.exception())

    def _restore_again_if_committed_moved(self, tps: list[TP]) -> None:
        """Restore again the tasks whose committed offsets moved while they were created.

        The offsets were read before the tasks' producers fenced the previous owner, which may
        still have been committing: a broker that completes a rebalance before every member
        rejoined, and accepts offsets from a departed member (the test broker), lets it go on
        until it is fenced. A task restored with the older offsets would then skip that
        owner's last committed changelog records while the consumer resumes after them,
        losing their updates. Now that every task's producer is initialised the offsets are
        final, so a task whose offsets moved is rebuilt from them.
        """
        assert self.consumer is not None
        final: dict[TP, int] = {}
        for c in self.consumer.committed(tps):
            if c.offset is not None and c.offset >= 0:
                final[(c.topic, c.partition)] = c.offset
        for rt in list(self.tasks.values()):
            now = {tp: final[tp] for tp in rt.tps if tp in final}
            if now != rt.committed:
                log.info("task %s: offsets committed meanwhile %s; restoring again", rt.id, now)
                rt.committed = now
                self.rebuild(rt)

    def close_all(self) -> None:
        """Close every task (a revoke, a loss, a rejoin, the thread's end)."""
        for rt in self.tasks.values():
            try:
                rt.close()
            except Exception as e:
                log.warning("closing task %s: %s", rt.id, e)
        self.tasks.clear()
        self.task_of.clear()

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
        try:
            rt.close()
        except Exception as e:
            log.warning("closing task %s: %s", rt.id, e)
        fresh = RuntimeTask(self.ctx, rt.subtopology, rt.partition, dict(rt.committed))
        self._add(key, fresh)
        log.info("task %s: stores rebuilt from their changelogs", rt.id)

    def seek_back(self, tasks: list[RuntimeTask]) -> None:
        """Seek the tasks' partitions back to their committed offsets. Only tasks that were
        rolled back: the others still have this batch's records to process."""
        assert self.consumer is not None
        for rt in tasks:
            for t, p in rt.tps:
                off = rt.committed.get((t, p), OFFSET_BEGINNING)
                try:
                    self.consumer.seek(t, p, off)
                except KafkaClientError as e:
                    # Not fetching yet (just assigned): it starts from the committed offset.
                    log.debug("seek %s[%d] to %d: %s", t, p, off, e)
