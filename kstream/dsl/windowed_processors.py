"""The processors behind windowed aggregations: time (tumbling/hopping), sliding and session.

They share how time is kept, as in Kafka Streams: each processor tracks its own observed
stream time (the largest timestamp it has seen), so results do not depend on how records were
batched. With `close = stream time - grace`:

- a time window `[start, end)` is closed once `end <= close`; a sliding window `[start, end]`
  (both inclusive) once `end < close`, as in Kafka Streams. A session `[start, end]` is closed once
  `end + gap < close`, because until then a record that is not late could still extend it;
- a record whose windows are all closed is dropped and counted in `dropped_late`;
- `emit="update"` forwards every change as `(Windowed, Change(new, old))`;
  `emit="final"` forwards each window once, when it closes.

Closing on the wall clock (`emit="final"` only): a processor that gets no records would never
see its stream time move, and its last windows would never close. So every `idle_close`
interval of wall-clock time a punctuation does this: if a record advanced the processor's
stream time since the previous punctuation, it notes (stream time, wall clock) and only takes
the task's stream time into account; if none did, stream time moves to
`noted stream time + wall clock elapsed since it was noted` (or the task's stream time if
larger). Windows closed by that are emitted, and later records for them count as late, exactly
as if a record with that timestamp had arrived. So windows close between one and two
`idle_close` intervals after the input goes quiet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors import BuiltinProcessor, Change, _tuple_new, new_change
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.records import Record, Windowed
from kstream.topology.processor import ProcessorContext

# `new_windowed((key, start, end))` == `Windowed(key, start, end)`, cheaper (hot path)
new_windowed: Callable[[tuple[Any, int, int]], Windowed] = _tuple_new(Windowed)

Step = Callable[[Any, Any, Any], Any]


class _WindowedAggregate(BuiltinProcessor):
    """Observed stream time, late drops, final emission and the wall-clock close."""

    def __init__(
        self, store: str, step: Step, grace_ms: int, emit_final: bool, idle_close_ms: int | None
    ) -> None:
        self.store_name = store
        self.step = step
        self.grace = grace_ms
        self.emit_final = emit_final
        self.idle_close_ms = idle_close_ms
        self.dropped_late = 0
        self.observed = -1  # stream time as this processor has seen it
        self.record_time = -1  # the largest record timestamp (observed may run ahead of it)
        self.emitted_close: int | None = None  # the close time up to which finals went out
        self._anchor: tuple[int, int] | None = None

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        # Stream time and the final-emission point are state like the aggregates: they live
        # in a small changelogged store, committed with them, so a restarted task drops the
        # same late records and emits no final result twice.
        self.time_store = ctx.get_store(stream_time_store(self.store_name))
        saved = self.time_store.get(0)
        if saved is not None:
            self.observed, self.record_time, self.emitted_close = saved
        self._saved = saved
        if self.emit_final and self.idle_close_ms:
            ctx.schedule(self.idle_close_ms, "wall_clock", self._on_wall_clock)

    # --- per record ---------------------------------------------------------------------------

    def process_batch(self, records: Sequence[Record]) -> None:
        task, on_error = self.task, self.ctx.on_error
        out: list[Record] = []
        for r in records:
            if r.key is None or r.value is None:
                continue
            if task is not None:
                task.current = r
            ts = r.timestamp
            if ts > self.record_time:
                self.record_time = ts
            if ts > self.observed:
                self.observed = ts
                if self.emit_final:
                    self._emit_until(self.observed - self.grace, out, r)
            try:
                if not self.apply(r, self.observed - self.grace, out):
                    self.dropped_late += 1
            except Exception as e:
                on_error(e, r)
        self._save_time()
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)

    def _save_time(self) -> None:
        state = (self.observed, self.record_time, self.emitted_close)
        if state != self._saved:
            self.time_store.put(0, state)
            self._saved = state

    def apply(self, r: Record, close: int, out: list[Record]) -> bool:
        """Aggregate `r`; False when it was too late for every window it belongs to."""
        raise NotImplementedError

    # --- final results ------------------------------------------------------------------------

    def _emit_until(self, close: int, out: list[Record], cause: Record | None) -> None:
        prev = self.emitted_close
        if prev is not None and close <= prev:
            return
        self.emitted_close = close
        found = self.closed_between(prev, close)
        for w, agg in found:
            ts = self.final_timestamp(w)
            if cause is None:
                out.append(Record(w, Change(agg, None), ts))
            else:
                out.append(
                    Record(w, Change(agg, None), ts, (), cause.topic, cause.partition, cause.offset)
                )

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any]]:
        """Windows that were open at close time `prev` (None: any) and are closed at `close`."""
        raise NotImplementedError

    def final_timestamp(self, w: Windowed) -> int:
        return w.end - 1

    def _on_wall_clock(self, now: int) -> None:
        if self.record_time < 0:
            return
        anchor = self._anchor
        if anchor is None or self.record_time > anchor[0]:
            self._anchor = (self.record_time, now)
            t = self.record_time
        else:
            t = anchor[0] + (now - anchor[1])
        t = max(t, getattr(self.task, "stream_time", -1))
        if t > self.observed:
            self.observed = t
        out: list[Record] = []
        self._emit_until(self.observed - self.grace, out, None)
        self._save_time()
        self.ctx.forward_batch(out)


def stream_time_store(store: str) -> str:
    """The name of the store that keeps a windowed aggregation's stream time."""
    return f"{store}-stream-time"


def _window_value(store: Any, key: Any, start: int) -> Any:
    return store.get(key, start)


class TimeWindowAggregateProcessor(_WindowedAggregate):
    """Tumbling and hopping windows over a window store (one entry per key and start)."""

    def __init__(
        self,
        store: str,
        step: Step,
        windows: TimeWindows,
        emit_final: bool,
        idle_close_ms: int | None,
    ) -> None:
        super().__init__(store, step, windows.grace_ms, emit_final, idle_close_ms)
        self.windows = windows

    def apply(self, r: Record, close: int, out: list[Record]) -> bool:
        store, step, size = self.store, self.step, self.windows.size_ms
        k, v = r.key, r.value
        updated = False
        for start in self.windows.window_starts(r.timestamp):
            end = start + size
            if end <= close:
                continue
            old = _window_value(store, k, start)
            new = step(k, v, old)
            store.put(k, new, start)
            updated = True
            if not self.emit_final:
                out.append(r.with_key_value(new_windowed((k, start, end)), new_change((new, old))))
        return updated

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any]]:
        size = self.windows.size_ms
        lo = -(2**63) if prev is None else prev - size + 1
        hi = close - size
        if hi < lo:
            return []
        with self.store.fetch_all(lo, hi) as cur:
            found = list(cur)
        found.sort(key=lambda e: e[0].start)
        return found


class SlidingWindowAggregateProcessor(_WindowedAggregate):
    """Kafka's sliding windows, computed from the retained records of each key.

    The windows of a key are `[s, s + d]` (both ends inclusive) for: every record time `x`
    (`s = x - d`, or 0 for records before `d`, as Kafka does for early records) and every
    `s = x + 1` whose window holds a record. A new record at `t` changes exactly the windows
    with `t - d <= s <= t` and may create the window just after it; each of those is
    recomputed from the records it holds, so out-of-order records need no special case and
    any aggregator works (Kafka derives new windows from neighbouring aggregates instead).
    """

    def __init__(
        self,
        store: str,
        records_store: str,
        step: Step,
        windows: SlidingWindows,
        emit_final: bool,
        idle_close_ms: int | None,
    ) -> None:
        super().__init__(store, step, windows.grace_ms, emit_final, idle_close_ms)
        self.records_store_name = records_store
        self.windows = windows

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.records = ctx.get_store(self.records_store_name)

    def apply(self, r: Record, close: int, out: list[Record]) -> bool:
        d = self.windows.max_difference_ms
        t, k, v = r.timestamp, r.key, r.value
        if t + 1 + d <= close:
            return False
        with self.records.fetch(k, max(0, t - d - 1), t + d + 1) as cur:
            before = list(cur)
        seen_t = any(x == t for x, _ in before)
        self.records.put(k, v, t)
        # insert after the records of the same time that arrived earlier (arrival order)
        at = 0
        while at < len(before) and before[at][0] <= t:
            at += 1
        recs = [*before[:at], (t, v), *before[at:]]
        starts = {max(0, x - d) for x, _ in recs if t <= x <= t + d}
        starts |= {x + 1 for x, _ in recs if t - d - 1 <= x <= t - 1}
        if not seen_t and any(t < x <= t + 1 + d for x, _ in recs):
            starts.add(t + 1)  # the new record's right window: new, though t is not in it
        store, step = self.store, self.step
        updated = False
        for s in sorted(starts):
            end = s + d
            if end < close:  # Kafka: a sliding window stays open while end >= close
                continue
            agg = None
            for x, val in recs:
                if s <= x <= end:
                    agg = step(k, val, agg)
            if agg is None:
                continue
            old = _window_value(store, k, s)
            store.put(k, agg, s)
            updated = True
            if not self.emit_final:
                out.append(r.with_key_value(Windowed(k, s, end), Change(agg, old)))
        return updated

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any]]:
        d = self.windows.max_difference_ms
        lo = -(2**63) if prev is None else prev - d
        hi = close - d - 1
        if hi < lo:
            return []
        with self.store.fetch_all(lo, hi) as cur:
            found = list(cur)
        found.sort(key=lambda e: e[0].start)
        return found

    def final_timestamp(self, w: Windowed) -> int:
        return w.end


class SessionWindowAggregateProcessor(_WindowedAggregate):
    """Session windows: a record merges every session of its key within `gap` of it.

    `merger(key, agg1, agg2)` combines the aggregates of merged sessions (oldest first).
    Sessions absorbed into a merged one are removed from the store and, with emit="update",
    deleted downstream (`(Windowed(old), Change(None, old_agg))`), as in Kafka Streams.
    """

    def __init__(
        self,
        store: str,
        step: Step,
        merger: Step,
        windows: SessionWindows,
        emit_final: bool,
        idle_close_ms: int | None,
    ) -> None:
        super().__init__(store, step, windows.grace_ms, emit_final, idle_close_ms)
        self.merger = merger
        self.gap = windows.gap_ms

    def apply(self, r: Record, close: int, out: list[Record]) -> bool:
        k, v, t, gap = r.key, r.value, r.timestamp, self.gap
        store = self.store
        with store.find_sessions(k, t - gap, t + gap) as cur:
            found = list(cur)
        start, end = t, t
        for w, _ in found:
            start = min(start, w.start)
            end = max(end, w.end)
        if end < close:
            return False
        merged = Windowed(k, start, end)
        agg = None
        same_old = None
        for w, a in found:
            agg = a if agg is None else self.merger(k, agg, a)
            if w == merged:
                same_old = a
        agg = self.step(k, v, agg)
        for w, a in found:
            if w != merged:
                store.remove(w)
                if not self.emit_final:
                    out.append(r.with_key_value(w, Change(None, a)).with_timestamp(w.end))
        store.put(merged, agg)
        if not self.emit_final:
            out.append(r.with_key_value(merged, Change(agg, same_old)).with_timestamp(end))
        return True

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any]]:
        # closed: end + gap < close, i.e. end <= close - gap - 1
        hi = close - self.gap - 1
        lo = None if prev is None else prev - self.gap - 1
        if lo is not None and hi <= lo:
            return []
        with self.store.all() as cur:
            found = [(w, a) for w, a in cur if w.end <= hi and (lo is None or w.end > lo)]
        found.sort(key=lambda e: (e[0].end, e[0].start))
        return found

    def final_timestamp(self, w: Windowed) -> int:
        return w.end
