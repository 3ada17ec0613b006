"""Task idling (Kafka's `max.task.idle.ms`, KIP-353 and KIP-695): when a task may process.

A task that reads several partitions (a stream-table or stream-stream join, a merge) takes its
records in timestamp order across them, but only across what it has. If one input lags (its
records reach the broker late, or the consumer has not fetched them yet), processing the other
side at once puts records out of order: a stream record looks up a table value that is about to
arrive with an earlier timestamp. Kafka Streams therefore buffers each partition's records in
the task and processes only when `readyToProcess` says so (PartitionGroup):

- every input partition has buffered records, or
- each empty one is known to have nothing more at the broker (fetched lag 0) and has been empty
  for `max_task_idle_ms` of wall-clock time; an empty partition with records at the broker
  (lag > 0) or with an unknown lag always waits.

`max_task_idle_ms=-1` turns idling off: the task processes whatever it has (the runtime then
skips this module entirely); 0, the default, waits only while an empty partition is known to
have data at the broker. A single-input task never waits and never comes here.

`PartitionBuffers` keeps the buffered, already-stamped records per partition. `take` hands out
the records the task may process now, merged by head timestamp, stopping where a partition runs
dry (Kafka re-checks readiness before each record; readiness changes only when a queue empties,
so checking once per drained queue is the same rule at O(partitions) per check). `committable`
is the offset up to which a partition's records were processed: records still buffered are not
committed, so a crash or rollback reads them again.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kstream.records import Record

TP = tuple[str, int]

IDLING_DISABLED = -1
"""`max_task_idle_ms` that turns idling off (Kafka's MAX_TASK_IDLE_MS_DISABLED)."""

LagOf = Callable[[TP, int | None], int | None]
"""How many records the broker is known to hold for a partition past `position` (the next
offset the task expects; None when it has received nothing yet): None when that is not known
yet (no fetch response so far)."""


class PartitionBuffers:
    """A multi-input task's records not yet processed, per input partition, and when each
    empty partition stops being waited for."""

    def __init__(self, tps: Sequence[TP], max_idle_ms: int) -> None:
        self.tps = list(tps)
        self.max_idle_ms = max_idle_ms
        self.queues: dict[TP, deque[Record]] = {tp: deque() for tp in self.tps}
        # the consumer's messages behind the buffered records (error handlers ask for them)
        self.raw: dict[TP, list[Any]] = {tp: [] for tp in self.tps}
        # the offset after the last message received of each partition (since the last reset)
        self.received: dict[TP, int] = {}
        # the partitions' starting points (the task's committed offsets)
        self.start: dict[TP, int] = {}
        # empty partitions known to be caught up: wall-clock ms after which they are not
        # waited for (Kafka's idlePartitionDeadlines)
        self.deadlines: dict[TP, int] = {}
        self.enforced = 0  # times a task went ahead without an empty partition (a metric)

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    @property
    def pending(self) -> bool:
        """Some records wait to be processed."""
        return any(self.queues.values())

    def receive(self, tp: TP, messages: Sequence[Any]) -> None:
        """Note `messages` of `tp` as received (before their records are made: an error
        handler may ask for them meanwhile)."""
        if messages:
            self.raw[tp].extend(messages)
            self.received[tp] = messages[-1].offset() + 1

    def add(self, tp: TP, records: Iterable[Record]) -> None:
        """Buffer `records` of `tp` (stamped, in offset order; those of messages received)."""
        self.queues[tp].extend(records)

    def ready(self, now_ms: int, lag_of: LagOf) -> bool:
        """Kafka's `PartitionGroup.readyToProcess` at wall-clock `now_ms`, O(partitions)."""
        queued = False
        enforced = False
        deadlines = self.deadlines
        for tp, queue in self.queues.items():
            if queue:
                deadlines.pop(tp, None)
                queued = True
                continue
            lag = lag_of(tp, self.position(tp))
            if lag is None or lag > 0:
                # unknown: wait for a fetch response; > 0: wait to receive what is there
                deadlines.pop(tp, None)
                return False
            deadline = deadlines.setdefault(tp, now_ms + self.max_idle_ms)
            if now_ms < deadline:
                return False
            enforced = True
        if enforced and queued:
            self.enforced += 1
        return queued

    def position(self, tp: TP) -> int | None:
        """The next offset of `tp` the task expects (None: not known here)."""
        got = self.received.get(tp)
        return got if got is not None else self.start.get(tp)

    def take(self) -> list[Record]:
        """The buffered records in processing order (merged by head timestamp, ties to the
        earlier partition), up to and including the one that empties the first queue."""
        live = [q for q in self.queues.values() if q]
        if not live:
            return []
        if len(live) == 1:
            out = list(live[0])
            live[0].clear()
            return out
        out = []
        keep = out.append
        heap = [(q[0].timestamp, i) for i, q in enumerate(live)]
        heapq.heapify(heap)
        while True:
            _, i = heap[0]
            q = live[i]
            keep(q.popleft())
            if not q:
                return out
            heapq.heapreplace(heap, (q[0].timestamp, i))

    def committable(self, tp: TP) -> int | None:
        """The next offset of `tp` to commit: its first buffered record's, or past the last
        message received when none is buffered (None: nothing received). Frees the raw
        messages of the records processed."""
        got = self.received.get(tp)
        if got is None:
            return None
        queue, raw = self.queues[tp], self.raw[tp]
        if not queue:
            raw.clear()
            return got
        upto: int = queue[0].offset  # type: ignore[assignment]
        if raw and raw[0].offset() < upto:
            del raw[: bisect_left(raw, upto, key=_offset)]
        return upto

    def find_raw(self, tp: TP, offset: int | None) -> Any:
        """The consumer's message at `offset` of `tp`, if still buffered."""
        for m in self.raw.get(tp, ()):
            if m.offset() == offset:
                return m
        return None

    def reset(self, start: dict[TP, int]) -> None:
        """Drop everything buffered (a rollback: the partitions are sought back to `start`,
        the committed offsets, and read again)."""
        for q in self.queues.values():
            q.clear()
        for r in self.raw.values():
            r.clear()
        self.received.clear()
        self.deadlines.clear()
        self.start = dict(start)


def _offset(message: Any) -> int:
    return int(message.offset())
