"""Restoring the runtime's tasks' stores from their changelogs: which store partitions a task
has (`task_store_parts`), the plan of a restore (`RestorePlan`, `restore_plan`), the blocking
restore of a rebuild or a revival (`restore_tasks`), and, under exactly-once, the wait for the
changelogs' last transactions to be decided first (`await_stable_changelogs`).

The restore beside processing (kstream.runtime.restorer) and the standbys
(kstream.runtime.standby) use the same plan; the restore itself is kstream.state.restore's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from kstream.broker_compat import marks_spec
from kstream.errors import KafkaClientError
from kstream.kafka.supplier import ClientConfig
from kstream.runtime.tasks import TP, RuntimeContext
from kstream.state import Store
from kstream.state.restore import RestoreResult, open_and_restore_all
from kstream.state.spec import StoreSpec

log = logging.getLogger("kstream.runtime")


def task_store_parts(
    ctx: RuntimeContext, subtopology: int, partition: int
) -> list[tuple[StoreSpec, int]]:
    """A task's store partitions, `(spec, partition)`: its sub-topology's stores, then its
    dedup marks when the broker-compatibility component keeps them."""
    sub = ctx.compiled.subtopologies[subtopology]
    specs = [ctx.compiled.topology.stores[name] for name in sub.stores]
    if ctx.compat.drop_repeats:
        specs.append(marks_spec(subtopology))
    return [(spec, partition) for spec in specs]


@dataclass
class RestorePlan:
    """What restoring tasks' stores takes, worked out once for the blocking restore
    (`restore_tasks`) and the restore beside processing (kstream.runtime.restorer): every
    store partition of the tasks in order (`parts`, with `per_task` counts), the open store
    each may start from (`given`), the input partitions its records must name (`sources`),
    and the committed offsets the restore filters by (`committed`, or None)."""

    tasks: list[tuple[int, int]]
    per_task: list[int]
    parts: list[tuple[StoreSpec, int]]
    given: list[Store | None]
    sources: list[frozenset[TP] | None]
    committed: Mapping[TP, int] | None

    def split(self, flat: Sequence[RestoreResult]) -> list[list[RestoreResult]]:
        """`flat` (one result per part) as each task's results."""
        out: list[list[RestoreResult]] = []
        at = 0
        for n in self.per_task:
            out.append(list(flat[at : at + n]))
            at += n
        return out


def restore_plan(
    ctx: RuntimeContext,
    tasks: Sequence[tuple[int, int]],
    committed: Mapping[TP, int],
    handed: Mapping[tuple[int, int], Mapping[str, Store]] | None,
    *,
    transactional: bool,
) -> RestorePlan:
    """The `RestorePlan` of `tasks` (`restore_tasks` says what the arguments mean). Under a
    transactional guarantee it first waits until the changelogs are stable
    (`await_stable_changelogs`), unless the broker-compatibility component filters them."""
    per = [task_store_parts(ctx, sub, part) for sub, part in tasks]
    given: list[Store | None] = [
        (handed or {}).get(key, {}).get(spec.name)
        for key, task_parts in zip(tasks, per, strict=True)
        for spec, _ in task_parts
    ]
    # with provenance stamped on every changelog record, each must name an input partition of
    # its task (kstream.state.restore_check)
    sources: list[frozenset[TP] | None] = [
        frozenset((t, part) for t in ctx.compiled.subtopologies[sub].source_topics)
        if ctx.compat.provenance
        else None
        for (sub, part), task_parts in zip(tasks, per, strict=True)
        for _ in task_parts
    ]
    if transactional and not ctx.compat.restore_filter:
        await_stable_changelogs(
            ctx,
            [
                (spec.changelog_topic(ctx.app_id), part)
                for task_parts in per
                for spec, part in task_parts
                if spec.changelog
            ],
        )
    return RestorePlan(
        tasks=list(tasks),
        per_task=[len(p) for p in per],
        parts=[p for task_parts in per for p in task_parts],
        given=given,
        sources=sources,
        committed=committed if transactional and ctx.compat.restore_filter else None,
    )


def restore_tasks(
    ctx: RuntimeContext,
    tasks: Sequence[tuple[int, int]],
    committed: Mapping[TP, int],
    handed: Mapping[tuple[int, int], Mapping[str, Store]] | None = None,
    *,
    transactional: bool,
) -> list[list[RestoreResult]]:
    """Open and restore the stores of `tasks` (`(subtopology, partition)`) with one consumer,
    as Kafka Streams' restore consumer does for a thread's tasks: one client and one wait for
    the end per rebalance, not per store; the call returns when they are restored (a task's
    rebuild and revival; new tasks restore beside processing, kstream.runtime.restorer).
    `committed`: the tasks' committed input offsets (with the broker-compatibility component
    on, under exactly-once a changelog record counts only if its input offset was committed).
    `handed`: stores already open per task and store name (a standby's,
    kstream.runtime.standby), restored from their checkpoints on. `transactional`: the tasks
    write in transactions (the commit protocol's answer): the changelogs are read to their
    stable ends, filtered by `committed` where the broker-compatibility component asks for it.
    Returns each task's `RestoreResult`s, in `task_store_parts` order."""
    cfg = ctx.config
    plan = restore_plan(ctx, tasks, committed, handed, transactional=transactional)
    ctx.restoring_changed(+len(tasks))
    try:
        results = open_and_restore_all(
            plan.parts,
            app_id=ctx.app_id,
            state_dir=cfg.state_dir,
            bootstrap_servers=ctx.bootstrap_servers,
            committed=plan.committed,
            default_backend=cfg.default_backend,
            kafka=cfg.kafka,
            progress=ctx.store_metrics.record_restore if ctx.store_metrics is not None else None,
            client_supplier=ctx.client_supplier,
            on_error=cfg.on_restore_error,
            sources=plan.sources,
            given=plan.given,
        )
    finally:
        ctx.restoring_changed(-len(tasks))
    return plan.split(results)


STABLE_WAIT_S = 3.0
"""exactly-once: the longest a restore waits for its changelog partitions' last stable offsets
to reach their high watermarks (`await_stable_changelogs`)."""
_STABLE_POLL_S = 0.01


def await_stable_changelogs(
    ctx: RuntimeContext, tps: Sequence[TP], wait_s: float = STABLE_WAIT_S
) -> dict[TP, int]:
    """Before a restore under exactly-once: wait until every changelog partition of `tps` is
    stable up to the high watermark it has now (its last stable offset at or past it), at most
    `wait_s`. Returns the partitions still behind then, with that high watermark.

    Why: a transaction's commit is decided when the producer's commit returns, but its markers
    are written afterwards, partition by partition, and the group's committed offsets (written
    by the group coordinator) can become readable, even to a read that waits for stable offsets
    (KIP-447), before the markers reach the changelog partitions. Seen on one Apache Kafka 4.1.1
    broker: 2 transactions of 600 whose offsets read as committed while data partitions of the
    same transaction still had their last stable offset before its records. A new owner reading
    the offsets in that moment (under the consumer group protocol it is assigned within
    milliseconds of the previous owner's last commit) would restore its stores to the last
    stable offset, one commit short, and go on from after that commit: its running counts were
    emitted again and never reached the end (51 duplicated, 51 missing in one test run).

    The offsets are read before this (`TaskPartitions.read_committed`, partitions.py), so
    every record of a transaction whose offsets were read lies below the high watermark read
    here; once the last stable offset passes it, the restore, which reads to the last stable
    offset, holds every such transaction. A transaction still open past `wait_s` is undecided:
    one of a previous owner that died or was fenced, whose offsets for partitions that moved
    the coordinator refuses (its generation or member epoch is gone) and which the broker
    aborts; the restore goes on without it. (A broker that accepts a departed member's offsets
    lets such a commit land: there, `broker_compat`, the new task's offsets are read again
    once its producer is up, `TaskRecovery.restore_again_if_committed_moved`.)"""
    if not tps:
        return {}
    cfg = ctx.config
    clients = [
        ctx.client_supplier.restore_consumer(
            ClientConfig(
                ctx.bootstrap_servers,
                {**cfg.kafka, "isolation.level": isolation},
                cfg.connect_timeout,
            )
        )
        for isolation in ("read_uncommitted", "read_committed")
    ]
    high: dict[TP, int] = {}
    t0 = time.monotonic()
    try:
        ends, stable = clients
        behind: dict[TP, int] = {}
        while True:
            try:
                for tp in tps:
                    if tp not in high:
                        high[tp] = _end(ends, tp)
                behind = {tp: h for tp, h in high.items() if _end(stable, tp) < h}
            except KafkaClientError as e:
                log.warning("changelog partitions %s: reading their ends: %s", _names(tps), e)
                behind = {tp: high.get(tp, -1) for tp in tps}
            if not behind:
                break
            if time.monotonic() - t0 >= wait_s:
                log.warning(
                    "changelog partitions %s still hold an open transaction below their high "
                    "watermarks after %gs (a previous owner's that never ended?); restoring "
                    "without it",
                    _names(behind),
                    wait_s,
                )
                break
            time.sleep(_STABLE_POLL_S)
    finally:
        for client in clients:
            try:
                client.close()
            except Exception as e:
                log.debug("closing a watermark client: %s", e)
    waited = time.monotonic() - t0
    if waited >= 0.05:
        log.info(
            "changelog partitions %s: waited %.2fs for their last stable offsets to reach %s",
            _names(tps),
            waited,
            {f"{t}[{p}]": h for (t, p), h in sorted(high.items())},
        )
    return behind


def _end(client: Any, tp: TP) -> int:
    """`tp`'s end as `client`'s isolation level sees it, asked of the broker (ListOffsets)."""
    wm = client.get_watermark_offsets(TopicPartition(*tp), cached=False)
    return int(wm[1]) if wm else 0


def _names(tps: Mapping[TP, int] | Sequence[TP]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(tps))
