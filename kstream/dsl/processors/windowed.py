"""The processors behind windowed aggregations: time (tumbling/hopping), sliding and session.

They follow Kafka Streams' `KStreamWindowAggregate`, `KStreamSlidingWindowAggregate` and
`KStreamSessionWindowAggregate` record for record. With the record cache on
(`cache_max_bytes`, kstream.state.caching) and `emit="update"`, each update goes to the cache
right after its store write and the cache forwards a window's latest one when it flushes.

Time: each processor tracks its own observed stream time (the largest timestamp it has seen),
so results do not depend on how records were batched. With `close = stream time - grace`:

- a time window `[start, end)` accepts records while `end > close`;
- a sliding window `[start, end]` (both inclusive) while `end >= close`; a record at `t` is
  dropped when `t + max_difference < close`;
- a session accepts a record while the session the record would merge into ends at or after
  `close - gap`.

Drops are reported with `ctx.record_dropped`: a record no window accepts is a `"late_record"`;
a record accepted by some windows but too late for others (a hopping window, a sliding
window next to it) counts one `"expired_window"` per window it skipped, as Kafka's
dropped-records sensor does. Null keys and values are dropped as `"null_key"`/`"null_value"`.

Result timestamps: an update carries the largest timestamp of the records in its window
(Kafka's `ValueAndTimestamp`, kept in the window store so it survives a restart); a session's
is its end, which is its largest record timestamp. Session merges forward a delete
(`Change(None, old)`) for every merged session, the merged session included, then the new
aggregate with no old value, exactly as Kafka does.

`emit="final"` forwards each window once, when a record closes it, with the window's stored
timestamp (a session's end), in window-start order (sessions: end order),
as Kafka's `EmitStrategy.onWindowClose()` does. Kafka checks at most once per second of wall
clock; here every record checks, which emits the same results, possibly sooner.

Closing on the wall clock (`emit="final"` only, a kstream extension): a processor that gets no
records would never see its stream time move, and its last windows would never close. So every
`idle_close` interval of wall-clock time a punctuation does this: if a record advanced the
processor's stream time since the previous punctuation, it notes (stream time, wall clock) and
only takes the task's stream time into account; if none did, stream time moves to
`noted stream time + wall clock elapsed since it was noted` (or the task's stream time if
larger). Windows closed by that are emitted, and later records for them count as late, exactly
as if a record with that timestamp had arrived. So windows close between one and two
`idle_close` intervals after the input goes quiet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, _tuple_new, new_change
from kstream.dsl.processors.cache import UpdateSink, cached_forwarding
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.records import Record, Windowed, derive
from kstream.state.window_fold import WindowFold, fold_for
from kstream.topology.processor import ProcessorContext

# `new_windowed((key, start, end))` == `Windowed(key, start, end)`, cheaper (hot path)
new_windowed: Callable[[tuple[Any, int, int]], Windowed] = _tuple_new(Windowed)

Step = Callable[[Any, Any, Any], Any]

# The saved stream-time state is (observed, record time, emitted close)


def _update(r: Record, key: Windowed, new: Any, old: Any, ts: int) -> Record:
    """The update record for `key`, keeping the provenance of the record `r` that caused it."""
    u = derive(r, key, new_change((new, old)))
    u.timestamp = ts
    return u


class _WindowedAggregate(BuiltinProcessor):
    """Observed stream time, drops, final emission and the wall-clock close."""

    forwards = "new"  # updates and final results it made (the record cache's flush: anew)

    def __init__(
        self, store: str, grace_ms: int, emit_final: bool, idle_close_ms: int | None
    ) -> None:
        self.store_name = store
        self.grace = grace_ms
        self.emit_final = emit_final
        self.idle_close_ms = idle_close_ms
        self.observed = -1  # stream time as this processor has seen it
        self.record_time = -1  # the largest record timestamp (observed may run ahead of it)
        self.emitted_close: int | None = None  # the close time up to which finals went out
        self._anchor: tuple[int, int] | None = None

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        self.dropped = ctx.record_dropped
        # the record cache holds back updates only when every update is forwarded (Kafka
        # disables caching for emit-on-window-close)
        sink = None if self.emit_final else cached_forwarding(self.store, ctx)
        # with it, each update goes to the record cache as it is made (right after its store
        # write) instead of to the list forwarded after the run
        self.sink: UpdateSink | None = sink
        # Stream time and the final-emission point are state like the aggregates: they live
        # in a small changelogged store, committed with them, so a restarted task drops the
        # same late records and emits no final result twice.
        self.time_store = ctx.get_store(stream_time_store(self.store_name))
        self._load_time()
        if self.emit_final and self.idle_close_ms:
            ctx.schedule(self.idle_close_ms, "wall_clock", self._on_wall_clock)

    def _load_time(self) -> None:
        """Stream time and the final-emission point as the time store holds them."""
        saved = self.time_store.get(0)
        if saved is not None:
            self.observed, self.record_time, self.emitted_close = saved
        else:
            self.observed, self.record_time, self.emitted_close = -1, -1, None
        self._saved = None if saved is None else tuple(saved)
        self._anchor = None

    def after_discard(self) -> None:
        """The batch is retried: back to the committed stream time (see `Task.discard`)."""
        self._load_time()

    # --- per record ---------------------------------------------------------------------------

    def process_batch(self, records: Sequence[Record]) -> None:
        task, on_error, dropped = self.task, self.ctx.on_error, self.dropped
        emit_final = self.emit_final
        out: list[Record] = []
        emit = out.append if self.sink is None else self.sink
        apply, grace = self.apply, self.grace
        for r in records:
            if r.key is None:
                dropped("null_key", r)
                continue
            if r.value is None:
                dropped("null_value", r)
                continue
            if task is not None:
                task.current = r
            ts = r.timestamp
            if ts > self.record_time:
                self.record_time = ts
            if ts > self.observed:
                self.observed = ts
            close = self.observed - grace
            if emit_final:
                # Kafka emits after aggregating the record (a record never updates a window
                # it closes), from a store the record's new windows may have pushed closed
                # windows out of, losing their final results; emitting first keeps them
                # (docs/differences.md, "Output and emission", states when Kafka loses one).
                self._emit_until(close, out, r)
            try:
                apply(r, close, emit)
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

    def apply(self, r: Record, close: int, emit: UpdateSink) -> None:
        """Aggregate `r` into its open windows (reporting what it cannot go into), handing
        each update to `emit`."""
        raise NotImplementedError

    # --- final results ------------------------------------------------------------------------

    def _emit_until(self, close: int, out: list[Record], cause: Record | None) -> None:
        prev = self.emitted_close
        if prev is not None and close <= prev:
            return
        self.emitted_close = close
        for w, agg, ts in self.closed_between(prev, close):
            if cause is None:
                out.append(Record(w, new_change((agg, None)), ts))
            else:
                out.append(_update(cause, w, agg, None, ts))

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any, int]]:
        """`(window, aggregate, timestamp)` of the windows that were open at close time
        `prev` (None: any) and are closed at `close`, in emission order."""
        raise NotImplementedError

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


def _by_start(found: list[tuple[Windowed, Any, int]]) -> list[tuple[Windowed, Any, int]]:
    found.sort(key=lambda e: e[0].start)
    return found


class TimeWindowAggregateProcessor(_WindowedAggregate):
    """Tumbling and hopping windows over a timestamped window store (one entry per window)."""

    def __init__(
        self,
        store: str,
        step: Step,
        windows: TimeWindows,
        emit_final: bool,
        idle_close_ms: int | None,
    ) -> None:
        super().__init__(store, windows.grace_ms, emit_final, idle_close_ms)
        self.step = step
        self.windows = windows
        self.tumbling = windows.advance_ms == windows.size_ms

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        # behind the record cache, a batch is folded per (key, window) when it provably
        # leaves what record by record leaves (kstream.state.window_fold)
        self.fold: WindowFold | None = fold_for(self, new_change)

    def process_batch(self, records: Sequence[Record]) -> None:
        if self.fold is not None and self.fold(records):
            return
        super().process_batch(records)

    def apply(self, r: Record, close: int, emit: UpdateSink) -> None:
        store, step, size = self.store, self.step, self.windows.size_ms
        k, v, t = r.key, r.value, r.timestamp
        expired = 0
        if self.tumbling:  # one window, computed here (window_starts builds a list per call)
            starts: Sequence[int] = (t - t % size,) if t >= 0 else ()
        else:
            starts = self.windows.window_starts(t)
        for start in starts:
            end = start + size
            if end <= close:
                expired += 1
                continue
            found = store.get_timestamped(k, start)
            if found is None:
                old, ts = None, t
            else:
                old, ts = found
                if t > ts:
                    ts = t
            new = step(k, v, old)
            store.put_timestamped(k, new, ts, start)
            if not self.emit_final:  # _update(...), one call fewer: once per record
                u = derive(r, new_windowed((k, start, end)), new_change((new, old)))
                u.timestamp = ts
                emit(u)
        if expired:
            if expired == len(starts):
                self.dropped("late_record", r)
            else:
                for _ in range(expired):
                    self.dropped("expired_window", r)
        elif t < 0:  # no window holds a negative timestamp (Kafka's windows start at 0)
            self.dropped("late_record", r)

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any, int]]:
        size = self.windows.size_ms
        lo = 0 if prev is None else max(0, prev - size + 1)
        hi = close - size
        if hi < lo:
            return []
        return _by_start(self.store.fetch_all_timestamped(lo, hi))


class SlidingWindowAggregateProcessor(_WindowedAggregate):
    """Kafka's sliding windows, derived incrementally from the neighbouring windows.

    The windows of a key are `[s, s + d]` (both ends inclusive): each record at `x` has a left
    window `[x - d, x]` (`[0, d]` for records before `d`) and, when a later record is within
    `d + 1` of it, a right window `[x + 1, x + 1 + d]`. A new record is folded into the
    existing windows that hold it, in arrival order (so an out-of-order record ends up last in
    the aggregate, as in Kafka); its new windows start from the aggregate of the neighbouring
    window they overlap with. Windows that do not hold the record are not touched.
    """

    def __init__(
        self,
        store: str,
        step: Step,
        windows: SlidingWindows,
        emit_final: bool,
        idle_close_ms: int | None,
    ) -> None:
        super().__init__(store, windows.grace_ms, emit_final, idle_close_ms)
        self.step = step
        self.d = windows.max_difference_ms

    def apply(self, r: Record, close: int, emit: UpdateSink) -> None:
        t, d = r.timestamp, self.d
        if t + d < close or t < 0:
            self.dropped("late_record", r)
        elif t < d:
            self._early(r, close, emit)
        else:
            self._regular(r, close, emit)

    def _window(
        self, r: Record, start: int, seed: Any, seed_ts: int, existed: bool, close: int,
        emit: UpdateSink,
    ) -> None:  # fmt: skip
        """Fold `r` into the window at `start`, which held `seed` (None: the initial value)."""
        end = start + self.d
        if end < close:
            self.dropped("expired_window", r)
            return
        k, t = r.key, r.timestamp
        new = self.step(k, r.value, seed)
        ts = t if seed is None or seed_ts < t else seed_ts
        self.store.put_timestamped(k, new, ts, start)
        if not self.emit_final:
            emit(_update(r, new_windowed((k, start, end)), new, seed if existed else None, ts))

    def _right_window(self, r: Record, seed: tuple[Any, int], emit: UpdateSink) -> None:
        """The new right window of `r`: the records after it, from a neighbouring aggregate."""
        k, start = r.key, r.timestamp + 1
        agg, ts = seed
        self.store.put_timestamped(k, agg, ts, start)
        if not self.emit_final:
            emit(_update(r, new_windowed((k, start, start + self.d)), agg, None, ts))

    def _regular(self, r: Record, close: int, emit: UpdateSink) -> None:
        t, d, k = r.timestamp, self.d, r.key
        starts: set[int] = set()
        left_seed: tuple[Any, int] | None = None
        right_seed: tuple[Any, int] | None = None
        left_exists = right_exists = False
        prev_ts: int | None = None
        for start, agg, wts in reversed(self.store.fetch_timestamped(k, max(0, t - 2 * d), t + 1)):
            starts.add(start)
            end = start + d
            if start == t + 1:
                right_exists = True
            elif end > t:
                if right_seed is None:
                    right_seed = (agg, wts)
                self._window(r, start, agg, wts, True, close, emit)
            elif end == t:
                left_exists = True
                self._window(r, start, agg, wts, True, close, emit)
                if wts >= t:
                    return  # a record at t was here already: every window of t exists
                prev_ts = wts
            else:
                left_seed, prev_ts = (agg, wts), wts
                break
        if prev_ts is not None and prev_ts + 1 not in starts and prev_ts + 1 + d >= t:
            self._window(r, prev_ts + 1, None, t, False, close, emit)  # the previous right window
        if not left_exists:
            if left_seed is not None and prev_ts is not None and t - d <= prev_ts:
                self._window(r, t - d, left_seed[0], t, False, close, emit)
            else:
                self._window(r, t - d, None, t, False, close, emit)
        if not right_exists and right_seed is not None and right_seed[1] > t:
            self._right_window(r, right_seed, emit)

    def _early(self, r: Record, close: int, emit: UpdateSink) -> None:
        """A record before `d`: its left window would start before 0, so it goes into
        `[0, d]` (as in Kafka) and right windows are made as later records arrive."""
        t, k = r.timestamp, r.key
        combined: tuple[Any, int] | None = None
        right_seed: tuple[Any, int] | None = None
        right_exists = False
        starts: set[int] = set()
        prev_ts: int | None = None
        for start, agg, wts in self.store.fetch_timestamped(k, 0, t + 1):
            starts.add(start)
            if start == 0:
                combined = (agg, wts)
                if wts < t:
                    prev_ts = wts
            elif start <= t:
                right_seed = (agg, wts)
                self._window(r, start, agg, wts, True, close, emit)
            else:  # start == t + 1
                right_exists = True
        if right_seed is None and combined is not None and combined[1] > t:
            right_seed = combined
        if not right_exists and right_seed is not None and right_seed[1] > t:
            self._right_window(r, right_seed, emit)
        if prev_ts is not None and prev_ts + 1 not in starts:
            self._window(r, prev_ts + 1, None, t, False, close, emit)
        if combined is None:
            self._window(r, 0, None, t, False, close, emit)
        else:
            self._window(r, 0, combined[0], combined[1], True, close, emit)

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any, int]]:
        d = self.d
        lo = 0 if prev is None else max(0, prev - d)
        hi = close - d - 1
        if hi < lo:
            return []
        return _by_start(self.store.fetch_all_timestamped(lo, hi))


class SessionWindowAggregateProcessor(_WindowedAggregate):
    """Session windows: a record merges every session of its key within `gap` of it.

    As in Kafka, the aggregate starts from `initializer()`, folds in each merged session's
    aggregate with `merger(key, agg, session_agg)` (oldest first; even a single session), then
    the record with `aggregator(key, value, agg)`. When the result is not the record's own
    `[t, t]` session, every merged session is removed and, with emit="update", deleted
    downstream (`Change(None, old)`) before the merged one is forwarded.
    """

    def __init__(
        self,
        store: str,
        initializer: Callable[[], Any],
        aggregator: Step,
        merger: Step,
        windows: SessionWindows,
        emit_final: bool,
        idle_close_ms: int | None,
    ) -> None:
        super().__init__(store, windows.grace_ms, emit_final, idle_close_ms)
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        self.gap = windows.gap_ms

    def apply(self, r: Record, close: int, emit: UpdateSink) -> None:
        k, v, t, gap = r.key, r.value, r.timestamp, self.gap
        store, merger = self.store, self.merger
        with store.find_sessions(k, t - gap, t + gap) as cur:
            found = list(cur)
        start = end = t
        agg = self.initializer()
        for w, a in found:
            agg = merger(k, agg, a)
            if w.start < start:
                start = w.start
            if w.end > end:
                end = w.end
        if end < close - gap:
            self.dropped("late_record", r)
            return
        if start != t or end != t:
            for w, a in found:
                store.remove(w)
                if not self.emit_final:
                    emit(_update(r, w, None, a, w.end))
        agg = self.aggregator(k, v, agg)
        merged = new_windowed((k, start, end))
        store.put(merged, agg)
        if not self.emit_final:
            emit(_update(r, merged, agg, None, end))

    def closed_between(self, prev: int | None, close: int) -> list[tuple[Windowed, Any, int]]:
        # closed: end < close - gap; emitted before: end < prev - gap
        hi = close - self.gap - 1
        lo = 0 if prev is None else max(0, prev - self.gap)
        if hi < lo:
            return []
        with self.store.all() as cur:
            found = [(w, a, w.end) for w, a in cur if lo <= w.end <= hi]
        found.sort(key=lambda e: (e[0].end, e[0].start))
        return found
