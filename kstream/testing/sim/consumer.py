"""`SimConsumer`: kstream's `Consumer` interface over the simulated cluster.

A group member's rebalance callbacks run inside `consume_batch`, as librdkafka serves them from
the poll: an eager member revokes everything when a round starts and takes its new assignment
when the round ends; a cooperative member revokes only what moves, then starts another round.
The callbacks apply the assignment through `raw` (`assign`, `incremental_assign`, ...), as the
runtime does with confluent-kafka's consumer; when a callback applies nothing, the consumer
applies it itself, starting from the group's committed offsets.

A read_committed consumer reads up to the last stable offset and never gets an aborted record
or a marker; its committed-offset read of a partition an open transaction holds offsets for
waits (virtual time) and fails after its timeout (KIP-447). A poll that finds less than a full
batch waits out its timeout, as librdkafka's batch consume does: that is how virtual time moves
while instances run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, TopicPartition

from kstream.errors import ConfigError, KafkaClientError, TopicError
from kstream.kafka.consumer import split_events
from kstream.testing.mock_cluster import MockMessage, _tp
from kstream.testing.sim.broker import SimKafka
from kstream.testing.sim.groups import COOPERATIVE, EAGER, Member
from kstream.testing.sim.hooks import CallHooks
from kstream.testing.sim.metadata import group_metadata

__all__ = ["SimConsumer"]

TP = tuple[str, int]
Callback = Callable[[list[TopicPartition]], None]

#: what a poll that returned a full batch costs in virtual time
BUSY_POLL_S = 0.001
#: the steps in which a committed-offset read held by pending offsets waits
PENDING_STEP_S = 0.1


class ErrorEvent:
    """An error event among a poll's records, shaped like confluent-kafka's `Message` with its
    error set (as librdkafka hands over a partition's error)."""

    def __init__(self, topic: str, partition: int, code: int) -> None:
        self._topic, self._partition, self._error = topic, partition, KafkaError(code)

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return -1

    def error(self) -> KafkaError:
        return self._error


class _Raw:
    """The calls the runtime makes on confluent-kafka's consumer (`Consumer.raw`) to apply
    an assignment from the rebalance callbacks."""

    def __init__(self, consumer: SimConsumer) -> None:
        self._c = consumer

    def assign(self, parts: list[TopicPartition]) -> None:
        self._c._positions.clear()
        self._c._add(parts)

    def incremental_assign(self, parts: list[TopicPartition]) -> None:
        self._c._add(parts)

    def unassign(self) -> None:
        self._c._applied = True
        self._c._positions.clear()

    def incremental_unassign(self, parts: list[TopicPartition]) -> None:
        self._c._applied = True
        for p in parts:
            self._c._positions.pop((p.topic, p.partition), None)


class SimConsumer:
    """A consumer of one simulated instance: a group member (`group_id`) or assign-only."""

    def __init__(
        self,
        cluster: SimKafka,
        hooks: CallHooks,
        *,
        group_id: str | None = None,
        kafka: dict[str, Any] | None = None,
        poll_call: str | None = None,
    ) -> None:
        kafka = kafka or {}
        #: the hook name of its polls: faults are planted in one kind of consumer or another
        #: (the stream thread's group consumer, a restore consumer, the global consumer)
        self.poll_call = poll_call or ("consumer.poll" if group_id else "consumer.poll_assigned")
        self.cluster = cluster
        self.hooks = hooks
        self.group_id = group_id
        self.read_committed = kafka.get("isolation.level", "read_committed") == "read_committed"
        strategy = str(kafka.get("partition.assignment.strategy", "range"))
        self.protocol = COOPERATIVE if "cooperative" in strategy else EAGER
        self.session_s = int(kafka.get("session.timeout.ms", 6000)) / 1000
        self.raw = _Raw(self)
        self.member: Member | None = None
        self._topics: list[str] | None = None
        self._callbacks: tuple[Callback | None, Callback | None, Callback | None] = (
            None,
            None,
            None,
        )
        self._positions: dict[TP, int] = {}
        self._paused: set[TP] = set()
        self._eof: dict[TP, int] = {}
        self._eof_reported: dict[TP, int] = {}
        self._applied = False
        self._turn = 0
        self._closed = False
        #: the next poll that takes records gets an error event among them (`poll_taken`)
        self.fail_after_batch = False
        # an error event that came with records: raised by the next poll, as the real
        # consumer does (kstream.kafka.consumer.Consumer.consume_batch)
        self._deferred: KafkaClientError | None = None

    # --- group membership ------------------------------------------------------------------

    def _beating(self) -> bool:
        return self.hooks.beating and not self.hooks.dead and not self._closed

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        on_lost: Callback | None = None,
    ) -> None:
        if self.group_id is None:
            raise ConfigError("Consumer.subscribe needs a group_id; use assign() without one")
        self.hooks.before("consumer.subscribe", self)
        self._topics = list(topics)
        self._callbacks = (on_assign, on_revoke, on_lost)
        self._join()

    def _join(self) -> None:
        assert self.group_id is not None and self._topics is not None
        self.member = self.cluster.groups.join(
            self.group_id,
            self._topics,
            self.protocol,
            self.session_s,
            self._beating,
            self.cluster.clock.now,
        )
        self.cluster.event(f"{self.hooks.name} joins as {self.member.member_id}")

    def unsubscribe(self) -> None:
        """Leave the group: the partitions are revoked (on_revoke runs now)."""
        self.hooks.before("consumer.unsubscribe", self)
        self._leave("left (unsubscribe)")

    def _leave(self, why: str) -> None:
        m = self.member
        if m is None:
            return
        owned = sorted(m.owned)
        m.owned.clear()
        self.member = None
        self._topics = None
        try:
            if owned:
                self._call(self._callbacks[1], owned, clear=True)
        finally:
            self.cluster.groups.leave(m, why)

    def _call(self, cb: Callback | None, parts: Iterable[TP], clear: bool) -> None:
        """Run a revoke or lost callback; the partitions are released whatever it does."""
        tps = [TopicPartition(t, p) for t, p in parts]
        try:
            if cb is not None:
                cb(tps)
        finally:
            for tp in tps:
                key = (tp.topic, tp.partition)
                self._positions.pop(key, None)
                self._eof.pop(key, None)
                self._eof_reported.pop(key, None)

    def _assign_cb(self, parts: list[TP], incremental: bool) -> None:
        """Run the assign callback; apply the assignment if the callback did not."""
        on_assign = self._callbacks[0]
        tps = [TopicPartition(t, p) for t, p in parts]
        self._applied = False
        try:
            if on_assign is not None:
                on_assign(tps)
        finally:
            if not self._applied:
                if not incremental:
                    self._positions.clear()
                self._add(tps)

    def _group_step(self) -> None:
        """What the poll serves of the group: a lost membership, a round to rejoin, a new
        generation's assignment (module docstring)."""
        m = self.member
        if m is None:
            return
        _on_assign, on_revoke, on_lost = self._callbacks
        if m.removed:
            lost = sorted(m.owned)
            m.owned.clear()
            self._join()
            if lost:
                self._call(on_lost or on_revoke, lost, clear=True)
            m = self.member
            assert m is not None
        g = self.cluster.groups.group(m.group_id)
        if g.preparing and not m.rejoined:
            if m.protocol == EAGER and m.owned:
                revoked = sorted(m.owned)
                m.owned.clear()
                self._call(on_revoke, revoked, clear=True)
            self.cluster.groups.rejoin(m)
        if g.preparing or m.synced >= m.generation or m.removed:
            return
        m.synced = m.generation
        if m.protocol == EAGER:
            new = sorted(m.assignment)
            m.owned = set(new)
            self._assign_cb(new, incremental=False)
            return
        revoked = sorted(m.owned - m.assignment)
        added = sorted(m.assignment - m.owned)
        if revoked:
            m.owned -= set(revoked)
            self._call(on_revoke, revoked, clear=True)
        m.owned |= set(added)
        self._assign_cb(added, incremental=True)
        if revoked:
            self.cluster.groups.request_rejoin(m, f"revoked {revoked}")

    # --- assignment ------------------------------------------------------------------------

    def _add(self, parts: Iterable[TopicPartition | tuple[Any, ...]]) -> None:
        self._applied = True
        for p in parts:
            tp = _tp(p)
            key = (tp.topic, tp.partition)
            self._positions[key] = self._start(tp)
            self._eof.pop(key, None)
            self._eof_reported.pop(key, None)

    def _start(self, tp: TopicPartition) -> int:
        log = self.cluster.log(tp.topic, tp.partition)
        off = tp.offset
        if off is not None and off >= 0:
            return int(off)
        if off == OFFSET_END:
            return log.end(self.read_committed)
        if off != OFFSET_BEGINNING and self.group_id is not None:
            committed = self.cluster.committed(self.group_id, tp.topic, tp.partition)
            if committed is not None:
                return committed
        return log.start  # auto.offset.reset=earliest

    def assign(self, partitions: Iterable[TopicPartition | tuple[Any, ...]]) -> None:
        self.hooks.before("consumer.assign", self)
        self._positions.clear()
        self._add(partitions)

    def unassign(self) -> None:
        self._positions.clear()
        self._eof.clear()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self._positions)]

    # --- consuming -------------------------------------------------------------------------

    def consume_batch(self, max_records: int, timeout_s: float) -> list[MockMessage]:
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        self.hooks.before(self.poll_call, self)
        self._group_step()
        out: list[MockMessage] = []
        keys = sorted(self._positions)
        if keys:
            self._turn = (self._turn + 1) % len(keys)
            keys = keys[self._turn :] + keys[: self._turn]
        for key in keys:
            if key in self._paused:
                continue
            log = self.cluster.log(*key)
            end = log.end(self.read_committed)
            pos = max(self._positions[key], log.start)
            while pos < end and len(out) < max_records:
                e = log.entries[pos]
                pos += 1
                if e.visible(self.read_committed):
                    out.append(
                        MockMessage(
                            key[0], key[1], e.offset, e.key, e.value, e.timestamp, e.headers
                        )
                    )
            self._positions[key] = pos
            if pos >= end and self._eof_reported.get(key) != pos:
                self._eof[key] = self._eof_reported[key] = pos
            if len(out) >= max_records:
                break
        self.cluster.clock.advance(BUSY_POLL_S if len(out) >= max_records else timeout_s)
        if out and self.fail_after_batch:
            # librdkafka hands a partition's error over among the batch's records, its
            # positions already past them: the real consumer's handling of such a batch
            self.fail_after_batch = False
            last = out[-1]
            event = ErrorEvent(last.topic(), last.partition(), KafkaError.UNKNOWN_TOPIC_OR_PART)
            records, event_error = split_events([*out, event], self._eof)
            if event_error is not None:
                if not records:
                    raise event_error
                self._deferred = event_error
            return records
        return out

    def eof_offset(self, topic: str, partition: int) -> int | None:
        return self._eof.get((topic, partition))

    def high_watermark(self, topic: str, partition: int) -> int | None:
        if (topic, partition) not in self._positions:
            return self._eof.get((topic, partition))
        return self.cluster.log(topic, partition).end(self.read_committed)

    def get_watermark_offsets(
        self, tp: TopicPartition, cached: bool = True, timeout: float | None = None
    ) -> tuple[int, int] | None:
        log = self.cluster.log(tp.topic, tp.partition)
        return (log.start, log.end(self.read_committed))

    # --- positions -------------------------------------------------------------------------

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.hooks.before("consumer.seek", self)
        key = (topic, partition)
        if key not in self._positions:
            raise TopicError(
                f"seeking topic={topic!r} partition={partition}: partition is not assigned",
                code="_STATE",
            )
        self._eof.pop(key, None)
        self._eof_reported.pop(key, None)
        self._positions[key] = self._start(TopicPartition(topic, partition, offset))

    def position(
        self, partitions: Iterable[TopicPartition | tuple[Any, ...]]
    ) -> list[TopicPartition]:
        out = []
        for p in partitions:
            tp = _tp(p)
            pos = self._positions.get((tp.topic, tp.partition), OFFSET_INVALID)
            out.append(TopicPartition(tp.topic, tp.partition, pos))
        return out

    def committed(
        self, partitions: Iterable[TopicPartition | tuple[Any, ...]], timeout: float | None = None
    ) -> list[TopicPartition]:
        self.hooks.before("consumer.committed", self)
        if self.group_id is None:
            raise ConfigError("Consumer.committed needs a group_id")
        tps = [_tp(p) for p in partitions]
        keys = [(tp.topic, tp.partition) for tp in tps]
        if self.read_committed:
            waited, limit = 0.0, 10.0 if timeout is None else timeout
            while True:
                held = self.cluster.pending(self.group_id, keys)
                if not held:
                    break
                if waited >= limit:
                    raise KafkaClientError(
                        f"reading committed offsets of {held}: _TIMED_OUT: an open "
                        f"transaction holds offsets pending (UNSTABLE_OFFSET_COMMIT) after "
                        f"{waited:g}s",
                        code="_TIMED_OUT",
                        retriable=True,
                    )
                step = min(PENDING_STEP_S, limit - waited)
                self.cluster.clock.advance(step)
                waited += step
        out = []
        for t, p in keys:
            off = self.cluster.committed(self.group_id, t, p)
            out.append(TopicPartition(t, p, OFFSET_INVALID if off is None else off))
        return out

    def commit(self, offsets: Iterable[TopicPartition | tuple[Any, ...]] | None = None) -> None:
        if self.group_id is None:
            raise ConfigError("Consumer.commit needs a group_id")
        self.hooks.before("consumer.commit", self)
        if offsets is None:
            tps = [(t, p, o) for (t, p), o in sorted(self._positions.items())]
        else:
            tps = [(tp.topic, tp.partition, tp.offset) for tp in map(_tp, offsets)]
        m = self.member
        self.cluster.groups.check_member(
            self.group_id, "" if m is None else m.member_id, -1 if m is None else m.generation
        )
        self.cluster.commit(self.group_id, tps)

    def pause(self, partitions: Iterable[TopicPartition | tuple[Any, ...]]) -> None:
        for p in partitions:
            tp = _tp(p)
            self._paused.add((tp.topic, tp.partition))

    def resume(self, partitions: Iterable[TopicPartition | tuple[Any, ...]]) -> None:
        for p in partitions:
            tp = _tp(p)
            self._paused.discard((tp.topic, tp.partition))

    def consumer_group_metadata(self) -> bytes:
        m = self.member
        return group_metadata(
            self.group_id or "", "" if m is None else m.member_id, -1 if m is None else m.generation
        )

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        return list(range(self.cluster.partitions(topic)))

    def close(self) -> None:
        """Revoke and leave the group (a graceful close); a dead instance's consumer only
        stops (its member stays until its session times out)."""
        if self._closed:
            return
        if not self.hooks.dead:
            try:
                self._leave("left (close)")
            finally:
                self._closed = True
        self._closed = True
