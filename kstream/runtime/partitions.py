"""The tasks' partitions at the stream thread's consumer: the committed offsets new tasks start
from, the assignment applied from the rebalance callbacks, pauses, and the seeks back to the
committed offsets after a rollback.

The task manager (task_manager.py) and the parts it composes call this object; it calls none
of them. It reads the running tasks (active_tasks.py) to skip the seek of a partition revoked
meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

from kstream.errors import KafkaClientError
from kstream.kafka.consumer import Consumer
from kstream.runtime.active_tasks import ActiveTasks, TaskId
from kstream.runtime.commit import CommitProtocol
from kstream.runtime.rebalance import generation, split_tasks
from kstream.runtime.retries import Halt, RetryBudget
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask

log = logging.getLogger("kstream.runtime")

__all__ = ["FIRST_READ_S", "TaskPartitions", "reset_offset"]

FIRST_READ_S = 0.5
"""exactly_once: how long the first read of a new task's committed offsets may wait before its
previous owners are fenced (`TaskPartitions.read_committed`)."""


class TaskPartitions:
    """The consumer's side of the tasks: committed offsets, assignment, pauses and seeks."""

    def __init__(
        self,
        ctx: RuntimeContext,
        commits: CommitProtocol,
        retries: RetryBudget,
        halt: Halt,
        active: ActiveTasks,
        cooperative: bool = False,
        broker_assigned: bool = False,
    ) -> None:
        """`cooperative`: the consumer's group rebalances incrementally (assignments are
        applied incrementally). `broker_assigned`: the broker assigns the partitions (the
        consumer protocol, KIP-848): no generation barrier to wait out, and every assignment
        is checked for split tasks (`check_split`)."""
        self.ctx = ctx
        self.commits = commits
        self.retries = retries
        self.halt = halt
        self.active = active
        self.cooperative = cooperative
        self.broker_assigned = broker_assigned
        self.consumer: Consumer | None = None
        # assignments seen holding only some of a task's partitions (consumer protocol)
        self.split_assignments = 0
        # the group generation of the last assignment (None: unknown)
        self._generation: int | None = None
        # partition -> offset: seeks deferred while the group rebalances (seek_back)
        self._seeks: dict[TP, int] = {}

    # --- committed offsets -----------------------------------------------------------------

    def read_committed(
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
        When the retries are used up the thread stops on the error (`halt`).
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
                if self.halt.stop.is_set():
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
                    self.halt.fail(e)
                    raise
                timeout = full
        committed: dict[TP, int] = {}
        for c in found:
            if c.offset is not None and c.offset >= 0:
                committed[(c.topic, c.partition)] = c.offset
        return committed

    # --- seeks -----------------------------------------------------------------------------

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

    def seek_to_start(self, tasks: list[RuntimeTask]) -> None:
        """Seek the partitions of `tasks`, just created, to where each starts: its committed
        offset, or, with none committed, where the offset reset would have put it had it been
        assigned now (after the rebalance when one is under way, as `seek_back`)."""
        reset = reset_offset(self.ctx.config.kafka)
        for rt in tasks:
            for tp in rt.tps:
                self._seeks[tp] = rt.committed.get(tp, reset)
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
            if (t, p) not in self.active.task_of:
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

    def forget(self, tasks: Iterable[RuntimeTask]) -> None:
        """Drop the pending seeks of the partitions of `tasks`, being closed: whoever runs a
        partition next (another instance, or a new task here if it comes back before the
        rebalance ends) starts from the committed offset, which may have moved on since."""
        for rt in tasks:
            for tp in rt.tps:
                self._seeks.pop(tp, None)

    # --- assignment ------------------------------------------------------------------------

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

    def assigned(self) -> None:
        """Note the generation of the assignment just received (`rebalancing`)."""
        assert self.consumer is not None
        self._generation = generation(self.consumer)

    def take(self, parts: list[TopicPartition], start: Callable[[TP], int | None]) -> None:
        """Apply the assignment of `parts` from the callback (confluent-kafka would apply it
        after the callback returns otherwise): incrementally under the cooperative protocol.

        Each partition starts at `start(partition)`, the committed offset its task was
        restored for (`RuntimeTask.committed`), not at one the client would read again by
        itself: should the group's committed offset move between the two reads (a previous
        owner's late commit), the task would go on after records whose updates its stores
        never saw. With none (nothing committed) the consumer's offset reset applies.
        """
        raw = getattr(self.consumer, "raw", None)
        if raw is None:  # an in-memory consumer applies it itself
            return
        parts = [_at(p, start((p.topic, p.partition))) for p in parts]
        if self.cooperative:
            raw.incremental_assign(parts)
        else:
            raw.assign(parts)

    def release(self, parts: list[TopicPartition]) -> None:
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

    def set_paused(self, tps: list[TP], paused: bool) -> None:
        """Pause (or resume) `tps`; a consumer closing meanwhile is no error."""
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

    def check_split(self) -> None:
        """Log (and count) every task of which the consumer now holds only some partitions
        (under `broker_assigned` only).

        The broker's range assignor keeps a task's co-partitioned partitions on one member
        (kstream.runtime.rebalance); a split would mean another member's task of the same id
        reads the rest, and a join there or here would miss matches."""
        if not self.broker_assigned:
            return
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


def _at(part: TopicPartition, offset: int | None) -> TopicPartition:
    """`part` to start at `offset` (as the callback gave it with none)."""
    if offset is None:
        return part
    return TopicPartition(part.topic, part.partition, offset)


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


def reset_offset(kafka: Mapping[str, Any]) -> int:
    """Where a partition with no committed offset starts: the consumer's `auto.offset.reset`
    (kstream's default: earliest) as a logical offset to seek to."""
    policy = str(kafka.get("auto.offset.reset", "earliest")).lower()
    return OFFSET_END if policy in ("latest", "largest", "end") else OFFSET_BEGINNING
