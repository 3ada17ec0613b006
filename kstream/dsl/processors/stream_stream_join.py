"""The windowed stream-stream join, step for step as Kafka Streams 3.9 runs it.

As in Kafka, the join is a "this" and an "other" processor (`JoinSideProcessor`, one per
side) that share, per task, one join state: Kafka shares a time tracker between its two
`KStreamKStreamJoin` sides; here they share a `StreamStreamJoin` (stream time, pending
minimum, the stores), so one stream time covers both sides exactly as Kafka's tracker does.
Each side's processor only reaches the stores Kafka connects to it (the other side's window
store and the outer store); the shared state takes the two window stores from the two sides.

Per record, in Kafka's order (`KStreamKStreamJoin.process` plus `KStreamJoinWindow`):

1. Stream time (the largest timestamp seen on either side) advances, even for records that
   are dropped next.
2. On a side whose unmatched records are emitted (the left side of a left join, both sides of
   an outer join), a record with a None key and a value is forwarded at once as
   `joiner(value, None)` (`joiner(None, value)` on the right): KIP-962, Kafka 3.7+.
   Any other record with a None key or value is dropped (`null_key` / `null_value`); a
   dropped record with a key still moves its side's window store's newest timestamp (step 6).
3. If the record is at stream time, pending unmatched records whose window has closed are
   emitted first, oldest first (see `_emit_closed`).
4. The record joins every record of the other side's window store with the same key and a
   timestamp in `[ts - before, ts + after]` (seen from the left; clamped at 0). Out-of-order
   records are *not* dropped: they join whatever the other store still retains. A store
   retains a record while `ts > store's newest timestamp - (before + after + grace)`.
   A result carries the larger of the two timestamps; a match removes the partner from the
   pending-unmatched store.
5. An unmatched record on an emitting side is emitted null-padded at once if its join window
   already ended (`ts + after < stream time`, `after` as seen from its side), else it waits in
   the pending store until `ts + after + grace < stream time` (no spurious results,
   KAFKA-10847).
6. The record enters its own window store unless it is already older than that store retains.
   A record that is neither stored nor joined nor emitted is counted as `expired_window`.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor
from kstream.dsl.windows import JoinWindows
from kstream.errors import SerdeError, TopologyError
from kstream.records import Record
from kstream.serde import Serde
from kstream.state.keys import ts8, unts8
from kstream.topology.processor import ProcessorContext

Joiner = Callable[..., Any]  # (v, ov), or (key, v, ov) with a key (ValueJoinerWithKey)

# Kafka's TimeTracker starts with no stream time and an "empty" pending minimum.
_NO_TIME = -1
_NO_PENDING = 2**63 - 1


class OuterKeySerde(Serde):
    """Keys `(timestamp, is_left, key)` of the pending store, in timestamp order on disk.

    Laid out as Kafka's `TimestampedKeyAndJoinSide`: 8-byte timestamp, a side byte (1 = left),
    then the key, so scanning the store visits the oldest pending records first, and at one
    timestamp right-side records before left-side ones, as Kafka does.
    """

    def __init__(self, key_serde: Serde) -> None:
        inner = key_serde

        def ser(k: tuple[int, bool, Any]) -> bytes:
            kb = inner.to_bytes(k[2])
            if kb is None:
                raise SerdeError("outer join store: key must not be None")
            return ts8(k[0]) + (b"\x01" if k[1] else b"\x00") + kb

        def de(data: bytes) -> tuple[int, bool, Any]:
            return unts8(data), data[8] == 1, inner.from_bytes(bytes(data[9:]))

        super().__init__(ser, de, f"outer-join-key({inner.name})")


class SharedJoin:
    """One join's state per task, shared by its two side processors (Kafka's
    `TimeTrackerSupplier`, which hands both sides of a task one tracker)."""

    def __init__(
        self,
        this_store: str,
        other_store: str,
        outer_store: str | None,
        joiner: Joiner,
        window: JoinWindows,
        kind: str,
        with_key: bool = False,
    ) -> None:
        self.args = (this_store, other_store, outer_store, joiner, window, kind, with_key)
        self._by_task: weakref.WeakKeyDictionary[Any, StreamStreamJoin] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()  # tasks of several threads start at once

    def __getstate__(self) -> tuple[Any, ...]:
        # a topology is pickled to reach Spark's workers: the per-task states and the lock
        # stay behind (each process makes its own tasks)
        return self.args

    def __setstate__(self, args: tuple[Any, ...]) -> None:
        self.__init__(*args)  # type: ignore[misc]

    def for_task(self, task: Any) -> StreamStreamJoin:
        if task is None:
            raise TopologyError("a stream-stream join runs inside a task (no task in context)")
        with self._lock:
            join = self._by_task.get(task)
            if join is None:
                join = self._by_task[task] = StreamStreamJoin(*self.args)
            return join


class JoinSideProcessor(BuiltinProcessor):
    """One side of a stream-stream join (Kafka's JOINTHIS/JOINOTHER node): its records join
    the other side's window store through the task's `StreamStreamJoin`."""

    def __init__(self, shared: SharedJoin, is_left: bool) -> None:
        self.shared = shared
        self.is_left = is_left

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.join = self.shared.for_task(self.task)
        self.join.attach(ctx, self.is_left)

    def after_discard(self) -> None:
        """The batch is retried: stream time as the window stores hold it (`Task.discard`)."""
        self.join.resume()

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        task, ctx, is_left = self.task, self.ctx, self.is_left
        step, on_error = self.join.process, ctx.on_error
        for r in records:
            if task is not None:
                task.current = r
            try:
                step(r, is_left, out, ctx)
            except Exception as e:
                on_error(e, r)
        if task is not None:
            task.current = None
        ctx.forward_batch(out)


class StreamStreamJoin:
    """Both sides' state of one windowed stream-stream join in one task."""

    def __init__(
        self,
        this_store: str,
        other_store: str,
        outer_store: str | None,
        joiner: Joiner,
        window: JoinWindows,
        kind: str,
        with_key: bool = False,
    ) -> None:
        self.names = (this_store, other_store, outer_store)
        # `joiner(left, right)`, or with a key `joiner(key, left, right)` (ValueJoinerWithKey):
        # `self.join(key, left, right)` calls it either way
        self.joiner = joiner
        self.join: Callable[[Any, Any, Any], Any] = (
            joiner if with_key else functools.partial(_without_key, joiner)
        )
        self.before = window.before_ms
        self.after = window.after_ms
        self.grace = window.grace_ms
        # How long the window stores keep records (Kafka: size + grace).
        self.retention = window.before_ms + window.after_ms + window.grace_ms
        self.left_outer = kind in ("left", "outer")
        self.right_outer = kind == "outer"
        self.this: Any = None
        self.other: Any = None
        self.outer: Any = None

    def attach(self, ctx: ProcessorContext, is_left: bool) -> None:
        """Take the stores the side processor `ctx` reaches: the left ("this") side reaches
        the other side's window store, the right side this side's (as Kafka connects them)."""
        this_name, other_name, outer_name = self.names
        if is_left:
            self.other = ctx.get_store(other_name)
        else:
            self.this = ctx.get_store(this_name)
        self.outer = None if outer_name is None else ctx.get_store(outer_name)
        if self.this is not None and self.other is not None:
            # both sides are initialised
            self.resume()

    def resume(self) -> None:
        """Kafka keeps stream time and the pending minimum in memory only; after a restart (or
        a discarded batch) we resume from the newest timestamps the window stores remember,
        with no minimum (see `_emit_closed`), so the pending store is scanned once, as Kafka
        does after a restart."""
        observed = max(self.this.observed, self.other.observed)
        self.stream_time = observed if observed > _NO_TIME else _NO_TIME
        self.min_time = _NO_PENDING
        # whether the store may hold records while there is no minimum: only before the first
        # scan (a scan leaves a minimum whenever it leaves records, and a put sets one)
        self._unscanned = True

    def process(self, r: Record, is_left: bool, out: list[Record], ctx: ProcessorContext) -> None:
        """Join `r` of the left side (`is_left`) or the right one; results go to `out`,
        drops are counted by the side processor's `ctx`."""
        v, k, ts = r.value, r.key, r.timestamp
        if ts > self.stream_time:
            self.stream_time = ts
        emits_unmatched = self.left_outer if is_left else self.right_outer
        if v is None or k is None:
            if v is not None and emits_unmatched:
                out.append(self._unmatched(r, k, v, is_left, ts))
                return
            ctx.record_dropped("null_value" if v is None else "null_key", r)
            if k is not None:
                # Kafka's KStreamJoinWindow puts every keyed record, None values too: the
                # put stores nothing but moves the store's newest timestamp, so its retention
                # (what the other side can still join) moves with it
                (self.this if is_left else self.other).put(k, None, ts)
            return
        if self.outer is not None and ts == self.stream_time:
            self._emit_closed(r, out, is_left)
        before, after = (self.before, self.after) if is_left else (self.after, self.before)
        time_from = max(0, ts - before)
        time_to = max(0, ts + after)
        theirs = self.other if is_left else self.this
        # Kafka's window stores hide records once ts <= newest - retention.
        time_from = max(time_from, theirs.observed - self.retention + 1)
        matches: list[tuple[int, Any]] = []
        if time_from <= time_to:
            with theirs.fetch(k, time_from, time_to) as cur:
                matches = list(cur)
        join, outer = self.join, self.outer
        for t2, v2 in matches:
            if outer is not None:
                outer.delete((t2, not is_left, k))
            joined = join(k, v, v2) if is_left else join(k, v2, v)
            out.append(Record(k, joined, max(ts, t2), r.headers, r.topic, r.partition, r.offset))
        handled = bool(matches)
        if emits_unmatched and not matches:
            handled = True
            if outer is None or time_to < self.stream_time:
                out.append(self._unmatched(r, k, v, is_left, ts))
            else:
                if ts < self.min_time:
                    self.min_time = ts
                key = (ts, is_left, k)
                outer.put(key, [*(outer.get(key) or ()), v])
        mine = self.this if is_left else self.other
        mine.put(k, v, ts)
        if ts <= mine.observed - self.retention and not handled:
            ctx.record_dropped("expired_window", r)

    def _unmatched(self, r: Record, k: Any, v: Any, is_left: bool, ts: int) -> Record:
        joined = self.join(k, v, None) if is_left else self.join(k, None, v)
        return Record(k, joined, ts, r.headers, r.topic, r.partition, r.offset)

    def _emit_closed(self, r: Record, out: list[Record], is_left: bool) -> None:
        """Emit pending unmatched records whose windows have closed, oldest first.

        Mirrors Kafka's `emitNonJoinedOuterRecords`, including its shortcut: the scan only
        starts when the oldest pending timestamp it remembers, plus the current record's
        `after` (seen from its side) and grace, is behind stream time; the remembered
        minimum is the last timestamp the previous scan visited. Kafka's wall-clock throttle
        between scans is not applied (as in Kafka's TopologyTestDriver, which sets it to 0).
        """
        st, grace = self.stream_time, self.grace
        look_ahead = self.after if is_left else self.before
        if self.min_time == _NO_PENDING:
            # Kafka's unset minimum is Long.MAX_VALUE: adding a positive look-ahead and grace
            # overflows, so it scans; an empty store (every scan but the first) yields nothing
            if not self._unscanned or look_ahead + grace == 0:
                return
        elif self.min_time + look_ahead + grace >= st:
            return
        outer, join = self.outer, self.join
        assert outer is not None
        self._unscanned = False
        self.min_time = _NO_PENDING
        emitted: list[tuple[int, bool, Any]] = []
        left_open = right_open = False
        with outer.all() as cur:
            for key, values in cur:
                ts, key_is_left, k = key
                self.min_time = ts
                if left_open and right_open:
                    break
                lookback = self.after if key_is_left else self.before
                if ts + lookback + grace >= st:
                    if key_is_left:
                        left_open = True
                    else:
                        right_open = True
                    continue
                for v in values:
                    joined = join(k, v, None) if key_is_left else join(k, None, v)
                    out.append(Record(k, joined, ts, r.headers, r.topic, r.partition, r.offset))
                emitted.append(key)
        for key in emitted:
            outer.delete(key)


def _without_key(joiner: Joiner, _key: Any, a: Any, b: Any) -> Any:
    """A `ValueJoiner` called as a `ValueJoinerWithKey`."""
    return joiner(a, b)


__all__ = ["JoinSideProcessor", "OuterKeySerde", "SharedJoin", "StreamStreamJoin"]
