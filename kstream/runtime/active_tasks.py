"""The stream thread's running tasks: which task reads which partition, and each task's life
from its creation to its close.

The task manager (task_manager.py) and the parts it composes (recovery.py, new_tasks.py)
create and close tasks here; this object calls none of them. A task is created with the
producer the commit protocol gives it and released to it when closed. A task given up in a
rebalance is parked (`close(park=True)`): a standby keeps its stores when standby replicas are
on, else they stay suspended until the rebalance's assignment, which may give the task back
(`handed`), as Kafka Streams suspends and resumes tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import TopicPartition

from kstream.metrics import Metrics
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.retries import Halt
from kstream.runtime.standby import StandbyTasks, keepable
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask
from kstream.state import Store
from kstream.state.restore import RestoreResult

log = logging.getLogger("kstream.runtime")

__all__ = ["ActiveTasks", "TaskId", "unique"]

TaskId = tuple[int, int]
"""(sub-topology, partition)"""


class ActiveTasks:
    """The running tasks by id and by partition, with their creation and close."""

    def __init__(
        self,
        ctx: RuntimeContext,
        commits: CommitProtocol,
        metrics: Metrics,
        halt: Halt,
        standbys: StandbyTasks | None = None,
    ) -> None:
        """`standbys`: the thread's standby replicas, which hand their stores to a task
        created here and keep those of a task given up. `halt`: where a failed creation is
        recorded (it may run in a rebalance callback)."""
        self.ctx = ctx
        self.commits = commits
        self.metrics = metrics
        self.halt = halt
        self.standbys = standbys
        self.tasks: dict[TaskId, RuntimeTask] = {}
        self.task_of: dict[TP, RuntimeTask] = {}
        # tasks created and closed since the start, rebuilt ones included (a task kept across
        # a cooperative rebalance is neither)
        self.created = 0
        self.closed = 0
        # tasks created from their suspended stores, since the start
        self.resumed = 0
        # the stores of tasks given up in the rebalance under way, kept until its assignment
        # (`suspend`), when standby replicas do not keep them
        self._suspended: dict[TaskId, dict[str, Store]] = {}

    def running(self) -> list[RuntimeTask]:
        """The running tasks, as a list (the commit protocol's argument)."""
        return list(self.tasks.values())

    def of(self, parts: list[TopicPartition]) -> list[RuntimeTask]:
        """The tasks that read any of `parts`."""
        found = [self.task_of.get((p.topic, p.partition)) for p in parts]
        return unique([rt for rt in found if rt is not None])

    def add(self, key: TaskId, rt: RuntimeTask) -> None:
        self.created += 1
        self.tasks[key] = rt
        for tp in rt.tps:
            self.task_of[tp] = rt

    def create(
        self, keys: list[TaskId], committed: dict[TP, int], restored: list[list[RestoreResult]]
    ) -> None:
        """Create the tasks `keys` from their restored stores; none of them if one fails (the
        thread then stops on the error, `halt`)."""
        # The tasks' producers start side by side (each initialises its transactions with a
        # round trip to the broker): the pause is the slowest one's, not the sum.
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = {
                key: pool.submit(self.new_task, key, committed, stores)
                for key, stores in zip(keys, restored, strict=True)
            }
        try:
            for key, fut in futures.items():
                self.add(key, fut.result())
        except BaseException as e:
            for fut in futures.values():
                if fut.exception() is None:
                    self.close(fut.result())
            for key in keys:  # the tasks running already stay, to be closed by the thread
                rt = self.tasks.pop(key, None)
                for tp in rt.tps if rt is not None else ():
                    self.task_of.pop(tp, None)
            self.halt.fail(e)
            raise

    def new_task(
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

    def remove(self, rt: RuntimeTask) -> None:
        """Forget `rt` and close it (a task replaced by its rebuild); a failure to close is
        logged."""
        self.tasks.pop((rt.subtopology, rt.partition), None)
        self.closed += 1
        try:
            self.close(rt)
        except Exception as e:
            log.warning("closing task %s: %s", rt.id, e)

    def close_tasks(self, tasks: Iterable[RuntimeTask], park: bool = False) -> None:
        """Close `tasks` and forget them; `park`: their stores stay open as standbys when
        standby replicas are on (a task given up in a rebalance). A pending seek of their
        partitions is the caller's to drop (`TaskPartitions.forget`)."""
        for rt in tasks:
            self.tasks.pop((rt.subtopology, rt.partition), None)
            for tp in rt.tps:
                if self.task_of.get(tp) is rt:
                    del self.task_of[tp]
            self.closed += 1
            try:
                self.close(rt, park)
            except Exception as e:
                log.warning("closing task %s: %s", rt.id, e)

    def close_all(self) -> None:
        """Close every task (a rejoin, the thread's end) and the stores kept suspended."""
        self.close_tasks(self.running())
        self.tasks.clear()
        self.task_of.clear()
        self.close_suspended()

    def close(self, rt: RuntimeTask, park: bool = False) -> None:
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

    def handed(self, key: TaskId) -> dict[str, Store]:
        """The open stores task `key` starts from: its own, suspended in this rebalance, or
        a standby's; empty when there are none."""
        suspended = self._suspended.pop(key, None)
        if suspended:
            log.info("task %d_%d: resuming with the stores it had before the rebalance", *key)
            self.resumed += 1
            return suspended
        return self.standbys.take(key) if self.standbys is not None else {}

    def close_suspended(self) -> None:
        """Close the stores of the tasks given up and not given back."""
        suspended, self._suspended = self._suspended, {}
        for stores in suspended.values():
            for store in stores.values():
                try:
                    store.close()
                except Exception as e:
                    log.warning("closing store %r: %s", store.name, e)

    def changed(self, what: str, changed: list[RuntimeTask]) -> None:
        """Log a change of the task set and publish the partitions now held."""
        if changed or what == "assigned":
            log.info(
                "%s tasks %s; running %s",
                what,
                sorted(rt.id for rt in changed),
                sorted(rt.id for rt in self.tasks.values()),
            )
        self.metrics.set_assigned(list(self.task_of))


def unique(tasks: list[RuntimeTask]) -> list[RuntimeTask]:
    """`tasks` without repeats, in order."""
    return list(dict.fromkeys(tasks))
