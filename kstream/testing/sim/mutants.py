"""Planted defects: deliberate mutations of the runtime, applied by monkeypatching for the
length of a run, that the simulator must catch (`make simulate-mutants`).

A simulator that passes every seed proves little unless it fails when the runtime is wrong.
Each mutant here breaks one thing exactly-once or liveness rests on; the table gives the seeds
it took to catch each (the first failing seed), so a change that blinds the simulator to a
class of defect shows as a mutant no longer caught.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kstream.runtime import standby
from kstream.runtime.commit import CommitOutcome, ExactlyOnceV2
from kstream.runtime.partitions import TaskPartitions
from kstream.runtime.tasks import RuntimeTask
from kstream.testing.sim.simulation import Options, simulate
from kstream.topology.task import Task

__all__ = ["MUTANTS", "Mutant", "hunt", "print_table"]


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    #: (owner, attribute, replacement built from the original)
    patch: tuple[Any, str, Callable[[Any], Any]]
    topologies: tuple[str, ...]
    guarantees: tuple[str, ...] = ("exactly_once_v2", "exactly_once")
    #: a fault plan instead of random faults (`Options.plan`), for a defect only it reaches
    plan: str | None = None


@contextmanager
def applied(m: Mutant) -> Iterator[None]:
    owner, attr, make = m.patch
    original = getattr(owner, attr)
    setattr(owner, attr, make(original))
    try:
        yield
    finally:
        setattr(owner, attr, original)


def _no_changelog(original: Any) -> Any:
    def produce_changelogs(self: RuntimeTask) -> None:
        if self.ctx.record_cache.enabled:
            self.task.flush_caches()  # outputs still go out; the store's changes do not

    return produce_changelogs


def _keep_write_cache(original: Any) -> Any:
    def discard(self: Task) -> None:
        stores, self.stores = self.stores, {}  # the rolled-back writes stay in the caches
        try:
            original(self)
        finally:
            self.stores = stores

    return discard


def _no_seek_back(original: Any) -> Any:
    def seek_back(self: TaskPartitions, tasks: list[RuntimeTask]) -> None:
        return None  # a rolled-back task goes on after the records it rolled back

    return seek_back


def _keep_fenced_producer(original: Any) -> Any:
    def after_fenced(self: ExactlyOnceV2) -> None:
        return None  # the fenced shared producer is kept across the rejoin

    return after_fenced


def _stream_time_kept(original: Any) -> Any:
    def discard(self: Task) -> None:
        # the stores' pending writes go, but the processors keep the stream time the
        # rolled-back batch moved them to (no after_discard), nor the task its own
        kept = self.stream_time
        for store in self.stores.values():
            store.discard()
        self.stream_time = kept

    return discard


def _standby_past_checkpoint(original: Any) -> Any:
    def apply_batch(states: Any, messages: Any, ended: Any, *args: Any, **kwargs: Any) -> int:
        # half of the batch is applied, but the checkpoint moves past all of it: a task taking
        # the standby's stores over restores from there and never sees the other half
        past = dict(ended)
        for m in messages:
            tp = (m.topic(), m.partition())
            past[tp] = max(past.get(tp, 0), m.offset() + 1)
        return int(original(states, messages[: len(messages) // 2], past, *args, **kwargs))

    return apply_batch


def _offsets_outside_transaction(original: Any) -> Any:
    def commit(self: ExactlyOnceV2, tasks: Any, consumer: Any) -> CommitOutcome:
        # the input offsets committed by the consumer before the transaction's commit
        offsets = [tp for rt in tasks if rt.open for tp in rt.offsets()]
        if offsets:
            try:
                consumer.commit(offsets)
            except Exception:
                pass
        return original(self, tasks, consumer)

    return commit


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "changelog_not_written",
            "a commit writes no changelog records (a restore misses the stores' updates)",
            (RuntimeTask, "produce_changelogs", _no_changelog),
            ("count", "word_count", "windowed"),
        ),
        Mutant(
            "write_cache_kept_on_rollback",
            "a rollback keeps the aborted batch's store writes",
            (Task, "discard", _keep_write_cache),
            ("count", "dedup", "windowed"),
        ),
        Mutant(
            "no_seek_back",
            "a rolled-back task is not sought back to its committed offsets",
            (TaskPartitions, "seek_back", _no_seek_back),
            ("count", "stream_table", "dedup"),
        ),
        Mutant(
            "fenced_producer_kept",
            "a fenced exactly_once_v2 thread keeps its shared producer (the fence loop)",
            (ExactlyOnceV2, "after_fenced", _keep_fenced_producer),
            ("count", "word_count", "dedup"),
            ("exactly_once_v2",),
        ),
        Mutant(
            "stream_time_not_rewound",
            "a rollback leaves stream time where the aborted batch moved it",
            (Task, "discard", _stream_time_kept),
            ("windowed", "grace_join", "payments_dedup"),
        ),
        Mutant(
            "offsets_outside_transaction",
            "exactly_once_v2 commits the input offsets through the consumer before the transaction",
            (ExactlyOnceV2, "commit", _offsets_outside_transaction),
            ("count", "stream_table", "word_count"),
            ("exactly_once_v2",),
        ),
        Mutant(
            "standby_past_checkpoint",
            "a standby's checkpoint moves past changelog records it did not apply",
            (standby, "apply_batch", _standby_past_checkpoint),
            ("count", "word_count", "windowed"),
            plan="standby_failover",
        ),
    )
}


def _run(args: tuple[str, int]) -> tuple[str, int, bool, str]:
    name, seed = args
    m = MUTANTS[name]
    topology = m.topologies[seed % len(m.topologies)]
    guarantee = m.guarantees[(seed // len(m.topologies)) % len(m.guarantees)]
    with applied(m):
        out = simulate(Options(seed=seed, topology=topology, guarantee=guarantee, plan=m.plan))
    return name, seed, out.ok, out.failures[0][:160] if out.failures else ""


def hunt(name: str, max_seeds: int = 200, jobs: int = 1) -> tuple[int | None, str]:
    """The first seed (of 0..max_seeds-1, in order) at which `name` is caught, and why."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs) as pool:
        for _name, seed, ok, why in pool.imap(_run, [(name, s) for s in range(max_seeds)]):
            if not ok:
                pool.terminate()
                return seed, why
    return None, ""


def print_table(jobs: int, budget_s: float, max_seeds: int = 200) -> int:
    """Hunt every mutant; print how many seeds each took. 1 if one was never caught."""
    missed = 0
    started = time.monotonic()
    print(f"{'mutant':32} {'caught at seed':>14}  first failure")
    for name, m in MUTANTS.items():
        seed, why = hunt(name, max_seeds, jobs)
        missed += seed is None
        shown = "never" if seed is None else str(seed)
        print(f"{name:32} {shown:>14}  {why or m.what}", flush=True)
        if time.monotonic() - started > budget_s:
            print("(time budget spent)")
            break
    print(f"seeds are tried in order from 0, at most {max_seeds} per mutant")
    return 1 if missed else 0
