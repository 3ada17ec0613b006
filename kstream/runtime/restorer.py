"""The restorer: new tasks' stores are restored beside processing, not in the rebalance callback.

Kafka Streams restores in a state updater (`DefaultStateUpdater`): the stream thread hands it
the tasks an assignment creates, keeps processing the tasks it already runs, and takes back
each task once its changelogs are read to their ends (`drainRestoredActiveTasks`), resuming
its input partitions then. Here the same happens in bounded slices of the stream thread's own
loop (`TaskManager.restore`): each turn applies at most a few changelog batches
(`step`) before the thread polls, processes and commits its running tasks again, so a task
that was kept keeps its records flowing while a new one restores, and no store is touched by
two threads.

The new tasks of one assignment restore together with one consumer (`_Group`, as
`task_restore.restore_tasks` does); a task is created only when its group is restored. Until
then its input partitions are paused (the task manager's), no commit covers it (it is no task
yet), and no standby is placed by the thread. A task revoked while it restores is dropped: its
stores close where their last batch left them (records and checkpoint are applied together), and
the other tasks of its group go on in a new group from the stores they have open.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kstream.errors import StoreLostError
from kstream.runtime.task_restore import RestorePlan, restore_plan, restore_tasks
from kstream.runtime.tasks import TP, RuntimeContext
from kstream.state import Store
from kstream.state.restore import ChangelogRestore, RestoreResult, open_for_restore

log = logging.getLogger("kstream.runtime")

__all__ = ["Restored", "Restorer"]

TaskId = tuple[int, int]

RESTORE_BATCH = 2000
"""Changelog records per restore batch, the unit of a slice. Slices of two batches of 5,000
(`restore_all`'s batch) left a running task at 0 records/s in 7 of the 62 quarter-seconds of a
1,000,000-key restore on a loaded machine (bench/restore_beside.py)."""
RESTORE_ALL = 1_000_000
"""`Restorer.finish`'s slice: batches enough for any changelog between two checks."""


@dataclass
class Restored:
    """Tasks whose stores reached the ends of their changelogs, ready to be created."""

    keys: list[TaskId]
    committed: dict[TP, int]
    results: list[list[RestoreResult]]


class _Group:
    """The new tasks of one assignment, restored together by one consumer."""

    def __init__(
        self,
        ctx: RuntimeContext,
        keys: list[TaskId],
        committed: dict[TP, int],
        handed: Mapping[TaskId, Mapping[str, Store]],
        transactional: bool,
    ) -> None:
        self.ctx = ctx
        self.keys = keys
        self.committed = committed
        self.transactional = transactional
        self.plan: RestorePlan = restore_plan(
            ctx, keys, committed, handed, transactional=transactional
        )
        cfg = ctx.config
        self.opened: list[tuple[Store, bool]] = []
        try:
            for (spec, partition), store in zip(self.plan.parts, self.plan.given, strict=True):
                self.opened.append(
                    (store, False)
                    if store is not None
                    else open_for_restore(
                        spec,
                        app_id=ctx.app_id,
                        partition=partition,
                        state_dir=cfg.state_dir,
                        default_backend=cfg.default_backend,
                    )
                )
            self.session: ChangelogRestore | _Finished = ChangelogRestore(
                [store for store, _ in self.opened],
                bootstrap_servers=ctx.bootstrap_servers,
                app_id=ctx.app_id,
                committed=self.plan.committed,
                kafka=cfg.kafka,
                batch=RESTORE_BATCH,
                progress=(
                    ctx.store_metrics.record_restore if ctx.store_metrics is not None else None
                ),
                wiped=[w for _, w in self.opened],
                client_supplier=ctx.client_supplier,
                on_error=cfg.on_restore_error,
                sources=self.plan.sources,
            )
        except BaseException:
            for store, _ in self.opened:
                store.close()
            for store in self.plan.given:  # handed over but not reached
                if store is not None and all(store is not o for o, _ in self.opened):
                    store.close()
            raise
        ctx.restoring_changed(+len(keys))

    @property
    def done(self) -> bool:
        return self.session.done

    def step(self) -> int:
        """One changelog batch; the records applied. A store that lost its data while being
        restored sends the group to the blocking restore, which wipes and restores it again
        (`task_restore.restore_tasks`, as a rebuild does)."""
        try:
            return self.session.step()
        except StoreLostError as e:
            log.warning("tasks %s: %s while restoring; restoring them again", self._ids(), e)
            self.session.close()
            self.close_stores(self.keys)
            results = restore_tasks(
                self.ctx, self.keys, self.committed, {}, transactional=self.transactional
            )
            self.opened = [(res.store, res.wiped) for task in results for res in task]
            self.session = _Finished(results)
            return 0

    def restored(self) -> Restored:
        self.ctx.restoring_changed(-len(self.keys))
        self.session.close()
        return Restored(self.keys, self.committed, self.plan.split(self.session.results()))

    def stores_of(self, keep: Iterable[TaskId]) -> dict[TaskId, dict[str, Store]]:
        """The open stores of the tasks `keep`, by task and store name."""
        wanted = set(keep)
        out: dict[TaskId, dict[str, Store]] = {}
        for key, stores in self._by_task():
            if key in wanted:
                out[key] = {store.spec.name: store for store in stores}
        return out

    def cancel(self, dropped: Iterable[TaskId]) -> None:
        """Stop restoring: close the consumer and the stores of the tasks `dropped` (the
        others' stores stay open for whoever goes on with them)."""
        self.ctx.restoring_changed(-len(self.keys))
        self.session.close()
        self.close_stores(dropped)

    def close_stores(self, keys: Iterable[TaskId]) -> None:
        wanted = set(keys)
        for key, stores in self._by_task():
            if key not in wanted:
                continue
            for store in stores:
                try:
                    store.close()
                except Exception as e:
                    log.warning("closing store %r: %s", store.name, e)

    def _by_task(self) -> list[tuple[TaskId, list[Store]]]:
        out: list[tuple[TaskId, list[Store]]] = []
        at = 0
        for key, n in zip(self.keys, self.plan.per_task, strict=True):
            out.append((key, [store for store, _ in self.opened[at : at + n]]))
            at += n
        return out

    def _ids(self) -> list[str]:
        return sorted(f"{sid}_{p}" for sid, p in self.keys)


class _Finished:
    """A group's session once the blocking restore did its work (`_Group.step`)."""

    done = True

    def __init__(self, results: list[list[RestoreResult]]) -> None:
        self._results = [res for task in results for res in task]

    def step(self) -> int:
        return 0

    def results(self) -> list[RestoreResult]:
        return self._results

    def close(self) -> None:
        pass


class Restorer:
    """The stream thread's tasks being restored, group by group (module docstring)."""

    def __init__(self, ctx: RuntimeContext, transactional: bool) -> None:
        """`transactional`: the guarantee's tasks write in transactions (the commit
        protocol's answer), which the restore reads changelogs by."""
        self.ctx = ctx
        self.transactional = transactional
        self._groups: list[_Group] = []

    @property
    def active(self) -> bool:
        """Some task is being restored."""
        return bool(self._groups)

    def __contains__(self, key: object) -> bool:
        return any(key in group.keys for group in self._groups)

    def task_ids(self) -> list[TaskId]:
        """The tasks being restored."""
        return [key for group in self._groups for key in group.keys]

    def committed(self, tp: TP) -> int | None:
        """The committed offset the task of `tp` restores for (where its input starts)."""
        for group in self._groups:
            if tp in group.committed:
                return group.committed[tp]
        return None

    def add(
        self,
        keys: list[TaskId],
        committed: dict[TP, int],
        handed: Mapping[TaskId, Mapping[str, Store]],
    ) -> list[Restored]:
        """Start restoring tasks `keys` from their committed offsets `committed` (`handed`:
        stores they start from, a standby's or their own suspended ones). Tasks with nothing
        to read (no changelogged store) are returned at once, ready."""
        group = _Group(self.ctx, keys, committed, handed, self.transactional)
        if group.done:
            return [group.restored()]
        log.info("restoring tasks %s beside the running ones", group._ids())
        self._groups.append(group)
        return []

    def step(self, batches: int) -> list[Restored]:
        """Apply at most `batches` changelog batches (one group after another); the tasks
        restored by them."""
        done: list[Restored] = []
        for group in list(self._groups):
            while batches > 0 and not group.done:
                group.step()
                batches -= 1
            if group.done:
                self._groups.remove(group)
                done.append(group.restored())
            if batches <= 0:
                break
        return done

    def finish(self) -> list[Restored]:
        """Restore every task to its end now (nothing else to do meanwhile); those restored."""
        done: list[Restored] = []
        while self._groups:
            done += self.step(RESTORE_ALL)
        return done

    def remove(self, keys: Iterable[TaskId]) -> None:
        """Drop the tasks `keys` (revoked or lost while restoring): their stores close; the
        other tasks of their groups go on in new groups, from the stores they have open."""
        dropped = set(keys)
        for group in [g for g in self._groups if dropped & set(g.keys)]:
            self._groups.remove(group)
            rest = [key for key in group.keys if key not in dropped]
            kept = group.stores_of(rest)
            group.cancel([key for key in group.keys if key in dropped])
            if rest:
                try:
                    self._groups.append(
                        _Group(self.ctx, rest, group.committed, kept, self.transactional)
                    )
                except BaseException:
                    for stores in kept.values():
                        for store in stores.values():
                            store.close()
                    raise

    def close(self) -> None:
        """Stop restoring every task and close their stores (the thread's end, a rejoin)."""
        groups, self._groups = self._groups, []
        for group in groups:
            group.cancel(group.keys)
