"""`kstreamd reset`: make an app start over from the beginning of its inputs.

It moves the group's committed offsets of the input topics to the earliest offsets, deletes the
app's internal topics and removes `<state_dir>/<app_id>`. Input and output topics are left
alone: deleting data users wrote is not a reset's business.

What it deletes is exact, never a guess that could hit another app: with the topology
(`kstreamd reset MODULE:ATTR --app-id ID`) the internal topics are the names the app derives
from it. Without one, topics named like an app's internal topics (`<app_id>-...-changelog`,
`-repartition`, `-instances`) are only candidates: app `wc` cannot tell its own from those of
app `wc-x`, so they are listed and deleted only with `--yes`.

It refuses to reset a running app (`--force` overrides): a group whose state is not empty, or
that rejects an offset commit from outside the group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
REBALANCE_IN_PROGRESS: how Kafka answers a commit to a group with members), is running. It
also refuses, `--force` or not, while an instance on this machine holds the lock on
`<state_dir>/<app_id>` (or a worker process its own, below it): that instance is certainly
running, and would go on with its directory deleted underneath it. The reset holds those locks
itself while it works, so no instance starts on the directory meanwhile.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)

from kstream.config import app_state_dir, validate_app_id
from kstream.errors import ConfigError, KafkaClientError, KStreamError
from kstream.kafka.admin import Admin
from kstream.kafka.consumer import Consumer
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.runtime.state_lock import LOCK_FILE, StateDirLock, StateDirLockedError

__all__ = [
    "INTERNAL_SUFFIXES",
    "AppRunningError",
    "ResetPlan",
    "candidate_topics",
    "plan_reset",
    "reset_app",
]

INTERNAL_SUFFIXES = ("-changelog", "-repartition", "-instances")
_RUNNING_CODES = ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
_IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)


class AppRunningError(KStreamError):
    """The app's consumer group has members: resetting it now would corrupt it."""


@dataclass
class ResetPlan:
    """What a reset of `app_id` would do."""

    app_id: str
    topics: list[str]
    """Internal topics to delete (exact names, or confirmed candidates)."""
    candidates: list[str] = field(default_factory=list)
    """Topics that look internal but were not derived from a topology (need --yes)."""
    offsets: list[TopicPartition] = field(default_factory=list)
    """Committed input offsets to move back to the earliest."""
    local: str | None = None
    """`<state_dir>/<app_id>`, if it exists."""


def candidate_topics(app_id: str, topics: list[str]) -> list[str]:
    """Topics named like internal topics of `app_id` (possibly another app's: see above)."""
    prefix = f"{app_id}-"
    return sorted(t for t in topics if t.startswith(prefix) and t.endswith(INTERNAL_SUFFIXES))


def _committed_partitions(admin: Admin, app_id: str, timeout: float) -> list[TopicPartition]:
    req = [ConsumerGroupTopicPartitions(app_id)]
    try:
        futures = admin.raw.list_consumer_group_offsets(req, request_timeout=timeout)
        result = futures[app_id].result(timeout=timeout + 5)
    except KafkaException as e:
        raise KafkaClientError(f"reading the committed offsets of group {app_id!r}: {e}") from None
    return [tp for tp in result.topic_partitions if tp.offset is not None and tp.offset >= 0]


def plan_reset(
    app_id: str,
    admin: Admin,
    *,
    internal: list[str] | None,
    state_dir: str | None,
) -> ResetPlan:
    """The reset of `app_id`. `internal`: the app's exact internal topic names (None: unknown,
    existing look-alikes become candidates)."""
    existing = set(admin.list_topics())
    if internal is not None:
        topics, candidates = sorted(existing & set(internal)), []
    else:
        topics, candidates = [], candidate_topics(app_id, sorted(existing))
    doomed = set(topics) | set(candidates)
    offsets = [tp for tp in _committed_partitions(admin, app_id, 30.0) if tp.topic not in doomed]
    local = None
    if state_dir:
        path = app_state_dir(state_dir, app_id)
        local = path if os.path.lexists(path) else None
    return ResetPlan(app_id, topics, candidates, offsets, local)


def _group_state(admin: Admin, app_id: str) -> tuple[Any, int]:
    """(state, number of members) as the broker describes the group."""
    try:
        futures = admin.raw.describe_consumer_groups([app_id], request_timeout=15)
        desc = futures[app_id].result(timeout=20)
    except KafkaException as e:
        raise KafkaClientError(f"describing group {app_id!r}: {e}") from None
    return desc.state, len(desc.members or [])


def _running_message(app_id: str, why: str) -> str:
    return (
        f"app {app_id!r} is running ({why}); stop every instance first (a stopped instance "
        "leaves the group at once; a killed one after session.timeout.ms), or pass --force"
    )


def check_not_running(admin: Admin, consumer: Consumer | None, plan: ResetPlan) -> None:
    """Raise AppRunningError if the app's group has members.

    Two signals, because brokers differ in what they show: the group's described state and
    members (Kafka), and an offset commit from outside the group, which a group with members
    rejects (any broker). The probe commits the offsets already committed, so it changes
    nothing.
    """
    state, members = _group_state(admin, plan.app_id)
    if members or state not in _IDLE_STATES:
        name = getattr(state, "name", str(state))
        raise AppRunningError(
            _running_message(plan.app_id, f"group state {name}, {members} member(s)")
        )
    if consumer is not None and plan.offsets:
        try:
            consumer.commit(plan.offsets)
        except KafkaClientError as e:
            code = next((c for c in _RUNNING_CODES if c in str(e)), None)
            if code is None:
                raise
            raise AppRunningError(
                _running_message(plan.app_id, f"the group rejects a commit with {code}")
            ) from None


def reset_app(
    app_id: str,
    bootstrap_servers: str,
    *,
    kafka: Mapping[str, Any] | None = None,
    state_dir: str | None = None,
    connect_timeout: int = 10_000,
    internal: list[str] | None = None,
    delete_candidates: bool = False,
    dry_run: bool = False,
    force: bool = False,
    client_supplier: ClientSupplier | None = None,
) -> list[str]:
    """Reset `app_id`; returns one line per action taken (or planned, with `dry_run`).

    `internal`: the exact internal topic names (from the topology). Without them, candidate
    topics are deleted only with `delete_candidates`. `client_supplier`: where the admin
    client and the group's consumer come from (None: Kafka's).
    """
    validate_app_id(app_id, "--app-id")
    supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
    config = ClientConfig(bootstrap_servers, dict(kafka or {}), connect_timeout)
    admin = supplier.admin(config)
    plan = plan_reset(app_id, admin, internal=internal, state_dir=state_dir)
    consumer = supplier.consumer(replace(config, group_id=app_id))
    try:
        if not force:
            check_not_running(admin, consumer, plan)
        with _locked(plan):
            return _carry_out(plan, admin, consumer, delete_candidates, dry_run)
    finally:
        consumer.close()


@contextlib.contextmanager
def _locked(plan: ResetPlan) -> Iterator[None]:
    """Hold the locks of the app's state directory and of its worker processes' directories
    (kstream.runtime.state_lock) while the block runs; AppRunningError if one is held."""
    local = plan.local
    if local is None or os.path.islink(local) or not os.path.isdir(local):
        yield
        return
    app_id = plan.app_id
    workers = glob.glob(os.path.join(glob.escape(local), "processes", "*", app_id))
    locks: list[StateDirLock] = []
    try:
        for directory in [local, *sorted(workers)]:
            if not os.path.exists(os.path.join(directory, LOCK_FILE)):
                continue  # every holder creates the file: no file, no holder
            try:
                locks.append(StateDirLock.at(directory, app_id))
            except StateDirLockedError as e:
                who = f"pid {e.pid}" if e.pid is not None else "a process"
                raise AppRunningError(
                    f"app {app_id!r} is running on this machine: {who} holds its state "
                    f"directory {directory}; stop it first (--force does not override this: "
                    "its state would be deleted underneath it)"
                ) from None
        yield
    finally:
        for lock in locks:
            lock.release()


def _carry_out(
    plan: ResetPlan, admin: Admin, consumer: Consumer, delete_candidates: bool, dry_run: bool
) -> list[str]:
    report: list[str] = []
    would = "would be " if dry_run else ""
    app_id = plan.app_id
    if plan.candidates and not delete_candidates and not dry_run:
        # a partial reset (offsets back, old changelogs kept) would restore stale state
        raise ConfigError(
            "topics named like internal topics of this app (they may belong to another app "
            f"whose id starts with {app_id + '-'!r}): {', '.join(plan.candidates)}; nothing "
            "was changed: pass MODULE:ATTR for the exact names, or --yes to delete these"
        )
    if plan.offsets:
        earliest = []
        for tp in plan.offsets:
            wm = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), cached=False
            )
            low = wm[0] if wm else 0
            earliest.append(TopicPartition(tp.topic, tp.partition, max(0, low)))
        if not dry_run:
            consumer.commit(earliest)
        topics = sorted({tp.topic for tp in plan.offsets})
        report.append(
            f"offsets of group {app_id!r} {would}set to earliest on {len(plan.offsets)} "
            f"partition(s) of {', '.join(topics)}"
        )
    else:
        report.append(f"group {app_id!r} has no committed offsets")
    doomed = list(plan.topics)
    if plan.candidates:
        if delete_candidates:
            doomed += plan.candidates
        else:
            report.append(
                "topics named like internal topics of this app (they may belong to another "
                f"app whose id starts with {app_id + '-'!r}): {', '.join(plan.candidates)}; "
                "not deleted: pass MODULE:ATTR for the exact names, or --yes to delete these"
            )
    if doomed:
        if not dry_run:
            admin.delete_topics(doomed)
        report.append(f"{'would delete' if dry_run else 'deleted'} topics: {', '.join(doomed)}")
    elif not plan.candidates:
        report.append("no internal topics to delete")
    if plan.local is not None:
        if not dry_run:
            _remove_local(plan.local)
        report.append(f"{'would remove' if dry_run else 'removed'} local state {plan.local}")
    return report


def _remove_local(path: str) -> None:
    """Remove `<state_dir>/<app_id>`; a symlink there is removed, never followed."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.remove(path)
    else:
        shutil.rmtree(path)
