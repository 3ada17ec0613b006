"""The tasks an assignment creates, from the rebalance callback to their first record: their
committed offsets read, their stores restored beside the running tasks (restorer.py), then
the tasks created and their partitions resumed where they start.

Kafka Streams' TaskManager hands such tasks to its state updater and takes each back once
restored; here the task manager (task_manager.py) passes the assignment to `add` and asks for
a slice of restoration every turn of the stream thread's loop (`step`). The calls run one way:
this object calls the restorer, the running tasks (active_tasks.py), their partitions
(partitions.py) and, to restore a task again, the recovery (recovery.py), never the task
manager. Until its task is created a partition stays paused.
"""

from __future__ import annotations

import logging

from confluent_kafka import TopicPartition

from kstream.runtime.active_tasks import ActiveTasks, TaskId
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.partitions import TaskPartitions
from kstream.runtime.recovery import TaskRecovery
from kstream.runtime.restorer import Restored, Restorer
from kstream.runtime.retries import Halt
from kstream.runtime.tasks import TP, RuntimeContext

log = logging.getLogger("kstream.runtime")

__all__ = ["RESTORE_SLICE", "RESTORE_SLICE_IDLE", "NewTasks"]

RESTORE_SLICE = 1
"""Changelog batches (`restorer.RESTORE_BATCH` records each) restored per loop turn while tasks
run (`NewTasks.step`): the running tasks' turns go on between the batches."""
RESTORE_SLICE_IDLE = 25
"""Changelog batches restored per loop turn when no task runs yet: restoration has the thread
to itself, and the loop still turns between slices (heartbeats, revokes, standbys)."""


class NewTasks:
    """Creates the tasks of an assignment, restoring their stores beside processing."""

    def __init__(
        self,
        ctx: RuntimeContext,
        commits: CommitProtocol,
        halt: Halt,
        active: ActiveTasks,
        partitions: TaskPartitions,
        recovery: TaskRecovery,
    ) -> None:
        """`halt`: where an error met in a rebalance callback is recorded for the thread."""
        self.ctx = ctx
        self.commits = commits
        self.halt = halt
        self.active = active
        self.partitions = partitions
        self.recovery = recovery
        # new tasks whose stores are being restored beside the running ones (restorer.py)
        self.restorer = Restorer(ctx, commits.transactional)

    @property
    def restoring(self) -> bool:
        """Some new task is being restored (its partitions paused)."""
        return self.restorer.active

    def start(self, tp: TP) -> int | None:
        """Where partition `tp` starts: its task's committed offset (None: nothing was
        committed, the consumer's offset reset applies)."""
        rt = self.active.task_of.get(tp)
        return self.restorer.committed(tp) if rt is None else rt.committed.get(tp)

    def add(self, parts: list[TopicPartition]) -> list[TaskId]:
        """The new tasks of `parts` (those neither running nor restoring): their committed
        offsets read, handed to the restorer with the stores they start from (a suspended
        task's or a standby's: only the tail is restored). With no task running they are
        restored here, as the tasks of a start or of an eager rebalance are, and those with
        no changelog to read are created at once. The ids of the new tasks."""
        compiled = self.ctx.compiled
        wanted: dict[TaskId, None] = {}
        for p in parts:
            sub = compiled.subtopology_for_topic(p.topic)
            key = (sub.id, p.partition)
            if key not in self.active.tasks and key not in self.restorer:
                wanted[key] = None
        if not wanted:
            return []
        tps = [(t, n) for sid, n in wanted for t in compiled.subtopologies[sid].source_topics]
        keys = list(wanted)
        committed = self.partitions.read_committed(keys, tps)
        handed = {k: self.active.handed(k) for k in keys}
        try:
            # every store of every new task, restored by one consumer
            ready = self.restorer.add(keys, committed, handed)
            if not self.active.tasks:
                # no task runs that restoring beside could keep going: restored here
                ready += self.restorer.finish()
        except BaseException as e:
            self.halt.fail(e)
            raise
        for done in ready:
            # the tasks of earlier assignments had their partitions assigned and paused
            self._activate(done, resume=not set(done.keys) <= set(wanted))
        return keys

    def step(self, slice_batches: int) -> list[Restored]:
        """One slice of restoration: at most `slice_batches` changelog batches, then each
        task restored is created and its partitions resumed. The groups restored."""
        try:
            done = self.restorer.step(slice_batches)
            for group in done:
                self._activate(group, resume=True)
        except BaseException as e:
            self.halt.fail(e)
            raise
        return done

    def _activate(self, done: Restored, resume: bool) -> None:
        """Create the tasks `done` restored; `resume`: their partitions were assigned and
        paused meanwhile, and are resumed now, each sought to where its task starts.

        The seek is not optional: librdkafka drops what it had fetched of a partition when it
        is paused, and unless a record of it was consumed since the assignment (none was) it
        goes on fetching after what it dropped. So each partition is sought to its task's
        committed offset (a new one if it moved while the tasks were created,
        `TaskRecovery.restore_again_if_committed_moved`, on a broker that needs it), or, with
        none committed, to where the offset reset would have put it had it been assigned
        now."""
        compiled = self.ctx.compiled
        keys = done.keys
        tps = [(t, n) for sid, n in keys for t in compiled.subtopologies[sid].source_topics]
        self.active.create(keys, done.committed, done.results)
        if self.commits.transactional and self.ctx.compat.committed_moves:
            self.recovery.restore_again_if_committed_moved(keys, tps)
        if resume:
            created = [self.active.tasks[k] for k in keys if k in self.active.tasks]
            self.partitions.set_paused(tps, paused=False)
            self.partitions.seek_to_start(created)
            self.active.changed("restored", created)

    def pause_restoring(self, parts: list[TopicPartition]) -> None:
        """Pause the partitions of `parts` whose tasks are being restored."""
        waiting = set(self.restorer.task_ids())
        compiled = self.ctx.compiled
        self.partitions.set_paused(
            [
                (p.topic, p.partition)
                for p in parts
                if (compiled.subtopology_for_topic(p.topic).id, p.partition) in waiting
            ],
            paused=True,
        )

    def stop_restoring(self, parts: list[TopicPartition]) -> None:
        """Drop the tasks of `parts` that are being restored (revoked or lost meanwhile),
        resuming their partitions before they are released (librdkafka keeps a partition's
        pause across assignments)."""
        compiled = self.ctx.compiled
        keys = {(compiled.subtopology_for_topic(p.topic).id, p.partition) for p in parts}
        dropped = [key for key in self.restorer.task_ids() if key in keys]
        if not dropped:
            return
        self.restorer.remove(dropped)
        self.partitions.set_paused(
            [
                (p.topic, p.partition)
                for p in parts
                if (p.topic, p.partition) not in self.active.task_of
            ],
            paused=False,
        )
        log.info("dropped tasks %s while restoring", sorted(f"{s}_{n}" for s, n in dropped))

    def close(self) -> None:
        """Stop restoring every task (a rejoin, the thread's end), resuming their partitions
        before they are released, as `stop_restoring` does."""
        restoring = self.restorer.task_ids()
        self.restorer.close()
        if restoring and self.partitions.consumer is not None:
            compiled = self.ctx.compiled
            self.partitions.set_paused(
                [(t, n) for sid, n in restoring for t in compiled.subtopologies[sid].source_topics],
                paused=False,
            )
