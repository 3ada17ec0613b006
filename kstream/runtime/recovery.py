"""Recovering a task whose step or commit failed: the table of failures.py says how, and this
object carries it out (rollback, rebuild, revive, or a rejoin the thread performs).

As Kafka Streams' TaskManager hands a corrupted task to be closed dirty and revived, the task
manager (task_manager.py) runs each step of a task under `guard` and passes a commit's failures
here (`recover_from`, `retry_from_committed`, `rebuild`). The calls run one way: this object
calls the commit protocol (commit.py), the running tasks (active_tasks.py) and their partitions
(partitions.py), never the task manager; what the thread must do (leave and rejoin the group)
it reads from `rejoin_pending`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kstream.errors import KafkaClientError, StoreError
from kstream.runtime.active_tasks import ActiveTasks, TaskId
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.failures import Recovery, route
from kstream.runtime.partitions import TaskPartitions
from kstream.runtime.retries import RetryBudget
from kstream.runtime.task_restore import restore_tasks
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask

log = logging.getLogger("kstream.runtime")

__all__ = ["TaskRecovery"]


class TaskRecovery:
    """Rolls back, rebuilds and revives the tasks whose steps or commits failed."""

    def __init__(
        self,
        ctx: RuntimeContext,
        commits: CommitProtocol,
        retries: RetryBudget,
        active: ActiveTasks,
        partitions: TaskPartitions,
    ) -> None:
        self.ctx = ctx
        self.commits = commits
        self.retries = retries
        self.active = active
        self.partitions = partitions
        # a producer was fenced: the thread leaves the group and rejoins at its next turn
        self.rejoin_pending = False

    def guard(self, rt: RuntimeTask, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn(*args)`, a step of `rt`; on a failure recover `rt` (`recover_from`) and
        return False. An error the table of failures.py says stops the thread is raised."""
        try:
            fn(*args)
            return True
        except Exception as e:
            self.recover_from(rt, e)
            return False

    def recover_from(self, rt: RuntimeTask, error: Exception) -> None:
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
            self.partitions.seek_back(self.rollback_quietly(rt))
            self.rebuild(rt)
        else:
            failed = rt.producer
            self.partitions.seek_back(self.rollback(rt))
            # a stuck producer's abort failed at once and the rollback replaced it already
            if recovery is Recovery.RECREATE_PRODUCER or (
                recovery is Recovery.ABANDON_PRODUCER and rt.producer is failed
            ):
                self.commits.recreate_producer(rt, self.active.running())
        if not waited:
            self.retries.failed_once(e)

    def retry_from_committed(self, tasks: Sequence[RuntimeTask], error: BaseException) -> None:
        """After a failed commit: roll `tasks` back, seek to their committed offsets, back off
        (an outage is waited out first, and counts no retry)."""
        waited = self.retries.wait_out(error)
        for rt in tasks:
            self.partitions.seek_back(self.rollback(rt))
        if tasks and route(error) is Recovery.ABANDON_PRODUCER:  # a flush stuck for good
            self.commits.recreate_producer(tasks[0], self.active.running())
        if not waited:
            self.retries.failed_once(error)

    # --- rollback, rebuild, revive ----------------------------------------------------------

    def scope(self, rt: RuntimeTask) -> list[RuntimeTask]:
        """The tasks a failure of `rt` rolls back (those sharing its transaction)."""
        return self.commits.scope(rt, self.active.running())

    def rollback(self, rt: RuntimeTask, fenced: bool = False) -> list[RuntimeTask]:
        """Roll back `rt` (and the tasks sharing its transaction); the tasks rolled back."""
        return self.commits.rollback(rt, self.active.running(), fenced=fenced)

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
        self.active.remove(rt)
        committed = dict(rt.committed)
        restored = restore_tasks(
            self.ctx, [key], committed, transactional=self.commits.transactional
        )[0]
        fresh = self.active.new_task(key, committed, restored)
        self.active.add(key, fresh)
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
        scope = self.commits.rollback(rt, self.active.running(), fenced=True)
        keys = [(one.subtopology, one.partition) for one in scope]
        self.partitions.forget(scope)
        self.active.close_tasks(scope)
        self.commits.settle(keys, self.active.running())
        compiled = self.ctx.compiled
        tps = [(t, n) for sid, n in keys for t in compiled.subtopologies[sid].source_topics]
        committed = self.partitions.read_committed(keys, tps, fence=False)
        restored = restore_tasks(
            self.ctx, keys, committed, {}, transactional=self.commits.transactional
        )
        self.active.create(keys, committed, restored)
        revived = [self.active.tasks[k] for k in keys]
        self.partitions.seek_back(revived)
        log.info(
            "revived tasks %s from the committed state: %s",
            sorted(one.id for one in revived),
            {f"{t}[{p}]": o for one in revived for (t, p), o in sorted(one.committed.items())},
        )

    def restore_again_if_committed_moved(self, keys: list[TaskId], tps: list[TP]) -> None:
        """Restore again the tasks whose committed offsets moved while they were created
        (`BrokerCompat.committed_moves`: only on a broker that needs it).

        The offsets were read before the tasks' producers fenced the previous owner, which may
        still have been committing: a broker that completes a rebalance before every member
        rejoined, and accepts offsets from a departed member (Tansu), lets it go on until it
        is fenced. A task restored with the older offsets would then skip that owner's last
        committed changelog records while the consumer resumes after them, losing their
        updates. Now that every task's producer is initialised the offsets are final, so a
        task whose offsets moved is rebuilt from them (its partitions then start at the new
        offsets: the caller seeks them to `RuntimeTask.committed`). Apache Kafka's coordinator
        refuses offsets from a member of an older generation, so there the first read stands
        and this step does not run.
        """
        # read as before, but with the tasks' own producers up: fencing now would fence them
        final = self.partitions.read_committed(keys, tps, fence=False)
        running = self.active.tasks
        for rt in [running[k] for k in keys if k in running]:
            now = {tp: final[tp] for tp in rt.tps if tp in final}
            if now != rt.committed:
                log.info("task %s: offsets committed meanwhile %s; restoring again", rt.id, now)
                rt.committed = now
                self.rebuild(rt)
