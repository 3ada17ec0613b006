"""A time-windowed aggregation behind the record cache, folded per batch: one store read, write
and cache update per (key, window) of a batch instead of one per record and window.

Why: with the record cache on, what a batch of a tumbling or hopping windowed count, reduce or
aggregate leaves behind is, for each (key, window) it wrote, its latest aggregate (with the
largest timestamp and the provenance of its last record) and the value it had before the
batch; the downstream operators see nothing until the cache flushes. So a batch can read each
window once, run the aggregation's steps on the values in hand, and write each window once,
and leave the same store contents, changelog records (in the same order: windows are written
in the order of their first write) and cache state (entries, sizes, dirty order and recency
order, through `CachingStore.cache_updates`) as the processor's per-record path
(`TimeWindowAggregateProcessor.apply`).

What is kept exactly:

- **the steps, as user code sees them**: they are called in the batch's record order with the
  same arguments as record by record, and the aggregate each gets is the previous result after
  a round trip through the store's value serde (what the store's read would have returned;
  a float into a double store is its own round trip), so a step that keeps state, mutates its
  aggregate or returns a value its serde changes (an int into a double) sees what it sees
  record by record;
- **stream time, closing and drops**: every record moves the processor's observed stream time
  and finds its windows closed or open exactly as record by record, in order; late records
  and expired windows are reported in the same order and number, and stream time is saved
  once after the batch, as record by record;
- **errors**: a step or an encoding that raises is handed to `on_error` for its record at the
  same point (the record's earlier windows written, its later ones and its drop reports not),
  and if `on_error` raises, the windows aggregated so far are written before it propagates,
  so the store and cache are what record by record would have left at that point.

It applies only when nothing in the batch could have gone otherwise record by record, decided
before any step runs (so giving up costs only the look): no null key or value (drops that
Kafka makes before stream time moves), every key taken by the key serde's C encoder, no write
the window store would drop for retention (the cache forwards such a write at once), room in
the cache for every window of the batch at the value's fixed width (an eviction forwards
mid-batch, where downstream code would run between two steps), and every read done without
error. Only stores whose aggregate has a fixed-width serde (count's long, a double sum) fold:
their cache entries have one size whatever the value, which the room check needs. And it pays
only where the batch's windows take several records each (`min_records_per_window`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from kstream.records import Record, Windowed, derive
from kstream.state.layer import typed_store
from kstream.state.window import WindowStore

# Slots of a window's state during a fold (a list, the cheapest mutable record here).
_FOUND = 0  # whether the store holds the window (as its read would find it)
_VALUE = 1  # its value as the store's read would return it
_TS = 2  # the timestamp stored with it
_NEW = 3  # the last step's result, as the step returned it
_PREV = 4  # the value that step got
_LAST = 5  # the record of the last write
_SEQ = 6  # when that write was, in the batch (0: not written)
_KEY = 7  # the key of the window's first record
_START = 8  # the window's start
_PKEY = 9  # its store key
_BEFORE = 10  # its value before the batch
_WROTE_TS = 11  # the timestamp of its last write
_FIRST = 12  # when its first write was, in the batch


def _state(key: Any, start: int) -> list[Any]:
    return [False, None, 0, None, None, None, 0, key, start, b"", None, 0, 0]


def _first_write(st: list[Any]) -> Any:
    return st[_FIRST]


def _last_write(st: list[Any]) -> Any:
    return st[_SEQ]


_Step = tuple[Record, Sequence[list[Any]], int, int]
"""A record of the batch, the states of its open windows, how many of its windows were
closed, how many windows it falls in."""

_new_windowed = Windowed._make
_key_of = operator.attrgetter("key")
_time_of = operator.attrgetter("timestamp")
_record_of = operator.itemgetter(0)


def _latest(steps: list[_Step]) -> int:
    """The largest timestamp of the records of `steps` (found in C); -1 for none."""
    return max(map(_time_of, map(_record_of, steps)), default=-1)


class WindowFold:
    """The per-batch path of one `TimeWindowAggregateProcessor` (see the module docstring).

    Called with a batch, returns True when it processed it and False (having done nothing but
    reads) when the batch needs the per-record path."""

    def __init__(
        self, proc: Any, store: Any, typed: WindowStore, new_change: Callable[[Any], Any]
    ) -> None:
        self.proc = proc
        self.store = store
        self.typed = typed
        self.new_change = new_change
        self.size: int = proc.windows.size_ms
        self.tumbling: bool = proc.tumbling
        self.window_starts: Callable[[int], list[int]] = proc.windows.window_starts
        encode = store.key_serde.c_to_bytes
        assert encode is not None
        self.encode: Callable[[Any], bytes] = encode
        self.width: int = typed.timestamped_width
        # a double's bytes give back the float they were made from: a step's float result
        # needs no round trip through them to be what the store's read would return
        fixed = typed.value_serde.fixed
        self.same_float: bool = fixed is not None and fixed[0] == "d"
        # without a metering layer, the layers' reads and writes are the typed store's own:
        # the fold then reads and writes by the store key it computed once
        self.direct: bool = all(
            getattr(getattr(store, op), "__self__", None) is typed
            for op in ("get_timestamped", "put_timestamped")
        )

    min_records_per_window = 1.5
    """A batch with fewer records per window than this goes record by record: a fold pays
    only where windows take several records of a batch. `process_batch` alone, tumbling
    windows on a memory store, 100,000 records, us per record record by record / folded:
    2.9 / 3.5-3.7 with 1 record per window, 2.8 / 2.8-3.0 with 1.5, 3.0 / 2.2 with 2,
    2.8 / 1.6 with 4 (a batch turned away by the key count costs 3.1-3.2)."""

    def __call__(self, records: Sequence[Record]) -> bool:
        # a window per key at least: too few records per key, too few per window, found
        # by a set of the keys (in C) before the plan's loop
        try:
            if len(records) < self.min_records_per_window * len(set(map(_key_of, records))):
                return False
        except TypeError:  # an unhashable key: the plan groups by the key's bytes
            pass
        planned = self._plan(records)
        if planned is None:
            return False
        self._run(*planned)
        return True

    # --- before any step: can the batch fold? ---------------------------------------------------

    def _plan(self, records: Sequence[Record]) -> tuple[list[_Step], list[list[Any]], int] | None:
        """The batch's steps, the states of its windows (in first-seen order) with their
        store keys and values before the batch, and the batch's largest timestamp (-1 if none
        is larger: no record moves time then); None when the batch must go record by record
        (nothing done but reads)."""
        proc, encode, size = self.proc, self.encode, self.size
        grace, observed = proc.grace, proc.observed
        tumbling, window_starts = self.tumbling, self.window_starts
        states: dict[tuple[bytes, int], list[Any]] = {}
        steps: list[_Step] = []
        # the window store's own stream time (the largest start written) and retention: it
        # drops a write past retention, and the cache forwards that write at once, mid-batch
        typed_observed, retention = self.typed.observed, self.typed.retention
        hi = -1
        for r in records:
            k = r.key
            if k is None or r.value is None:
                return None
            try:
                kb = encode(k)
            except Exception:
                return None
            t = r.timestamp
            if t > observed:
                observed = t
            if t > hi:
                hi = t
            if tumbling:
                start = t - t % size
                if t < 0:  # in no window
                    steps.append((r, (), 0, 0))
                    continue
                if start + size <= observed - grace:
                    steps.append((r, (), 1, 1))
                    continue
                if start > typed_observed:
                    typed_observed = start
                elif start < typed_observed - retention:
                    return None
                st = states.get((kb, start))
                if st is None:
                    st = states[(kb, start)] = _state(k, start)
                steps.append((r, (st,), 0, 1))
                continue
            close = observed - grace
            starts = window_starts(t)
            open_: list[list[Any]] = []
            for start in starts:
                if start + size <= close:
                    continue
                if start > typed_observed:
                    typed_observed = start
                elif start < typed_observed - retention:
                    return None
                st = states.get((kb, start))
                if st is None:
                    st = states[(kb, start)] = _state(k, start)
                open_.append(st)
            steps.append((r, open_, len(starts) - len(open_), len(starts)))
        windows = list(states.values())
        if len(records) < self.min_records_per_window * len(windows):
            return None
        if windows and not self._prepare(windows):
            return None
        return steps, windows, hi

    def _prepare(self, windows: list[list[Any]]) -> bool:
        """Check that the batch's windows can be written once each as record by record would
        write them (store keys, room in the cache), and read each; False when not. Writing
        each window once, in the order of first writes, the store has seen no larger start at
        a window's write than record by record at its first: no write is past retention."""
        typed, store = self.typed, self.store
        pkey = typed._pkey
        try:
            for st in windows:
                st[_PKEY] = pkey(st[_KEY], st[_START])
        except Exception:
            return False
        if not store.batch_room([st[_PKEY] for st in windows], self.width):
            return False
        try:
            if self.direct:
                read = typed.read_timestamped
                for st in windows:
                    found = read(st[_PKEY])
                    if found is not None:
                        value, st[_TS] = found
                        st[_FOUND], st[_VALUE], st[_BEFORE] = True, value, value
            else:
                get = store.get_timestamped
                for st in windows:
                    found = get(st[_KEY], st[_START])
                    if found is not None:
                        value, st[_TS] = found
                        st[_FOUND], st[_VALUE], st[_BEFORE] = True, value, value
        except Exception:
            return False
        return True

    # --- the batch, folded ----------------------------------------------------------------------

    def _run(self, steps: list[_Step], windows: list[list[Any]], hi: int) -> None:
        proc = self.proc
        task, on_error, dropped, step = proc.task, proc.ctx.on_error, proc.dropped, proc.step
        encode_value, decode_value = self.typed.encode_timestamped, self.typed.decode_timestamped
        same_float = self.same_float
        seq = 0
        r: Record | None = None
        done = 0
        try:
            for r, open_, expired, n in steps:
                if task is not None:
                    task.current = r
                k, v, t = r.key, r.value, r.timestamp
                failed = False
                for st in open_:
                    old = st[_VALUE]
                    try:
                        new = step(k, v, old)
                        ts = t if not st[_FOUND] or st[_TS] < t else st[_TS]
                        if new.__class__ is float and same_float:
                            st[_FOUND], st[_VALUE] = True, new
                        else:
                            vb = encode_value(new, ts)
                            if vb is None:  # what its serde writes as a delete
                                st[_FOUND], st[_VALUE] = False, None
                            else:
                                st[_FOUND], st[_VALUE] = True, decode_value(vb)[0]
                    except Exception as e:
                        on_error(e, r)
                        failed = True
                        break
                    seq += 1
                    if not st[_SEQ]:
                        st[_FIRST] = seq
                    st[_TS] = ts
                    st[_NEW], st[_PREV], st[_LAST], st[_SEQ], st[_WROTE_TS] = new, old, r, seq, ts
                if not failed:
                    if expired:
                        if expired == n:
                            dropped("late_record", r)
                        else:
                            for _ in range(expired):
                                dropped("expired_window", r)
                    elif t < 0:
                        dropped("late_record", r)
                done += 1
        finally:
            # the records processed (all, or up to one whose on_error raised) move stream
            # time and their windows are written, as record by record
            ran = done + (done < len(steps))
            # all of them: the plan's largest timestamp, without another pass over the records
            self._advance_time(hi if ran == len(steps) else _latest(steps[:ran]))
            self._write(windows)
            if task is not None:
                task.current = r
        proc._save_time()  # its provenance: the batch's last record, as record by record
        if task is not None:
            task.current = None
        proc.ctx.forward_batch([])

    def _advance_time(self, t: int) -> None:
        """Move the processor's record time and observed stream time to `t`, the largest
        timestamp of the records processed, as the records one by one would: both are
        running maxima, so the batch's maximum moves them alike."""
        proc = self.proc
        if t > proc.record_time:
            proc.record_time = t
        if t > proc.observed:
            proc.observed = t

    def _write(self, windows: list[list[Any]]) -> None:
        """One store write per window written in the batch, in the order of their first
        writes, each with its last record as provenance; then one cache update each, the
        cache told the windows' order of last writes."""
        task, size, new_change = self.proc.task, self.size, self.new_change
        written = [st for st in windows if st[_SEQ]]
        if not written:
            return
        written.sort(key=_first_write)
        updates: list[tuple[bytes, Record, Any]] = []
        if self.direct:
            put_encoded, encode_value = self.typed.put_encoded, self.typed.encode_timestamped
            for st in written:
                r, ts, start = st[_LAST], st[_WROTE_TS], st[_START]
                if task is not None:
                    task.current = r
                put_encoded(st[_PKEY], start, encode_value(st[_NEW], ts))
                u = derive(
                    r,
                    _new_windowed((r.key, start, start + size)),
                    new_change((st[_NEW], st[_PREV])),
                )
                u.timestamp = ts
                updates.append((st[_PKEY], u, st[_BEFORE]))
        else:
            put = self.store.put_timestamped
            for st in written:
                r, ts, start = st[_LAST], st[_WROTE_TS], st[_START]
                if task is not None:
                    task.current = r
                put(r.key, st[_NEW], ts, start)
                u = derive(
                    r,
                    _new_windowed((r.key, start, start + size)),
                    new_change((st[_NEW], st[_PREV])),
                )
                u.timestamp = ts
                updates.append((st[_PKEY], u, st[_BEFORE]))
        written.sort(key=_last_write)
        self.store.cache_updates(updates, [st[_PKEY] for st in written])


def fold_for(proc: Any, new_change: Callable[[Any], Any]) -> WindowFold | None:
    """The per-batch path for a time-windowed aggregation `proc`, or None when it has none:
    its updates are not held back by the record cache (cache off, emit="final", a store
    without the caching layer), or its store is not a timestamped window store of a
    fixed-width aggregate without duplicates, or its key serde has no C encoder.
    `new_change((new, old))` builds the update's Change (the DSL's type)."""
    if proc.emit_final or proc.sink is None:
        return None
    store = proc.store
    if getattr(store, "cache_updates", None) is None:
        return None
    typed = typed_store(store)
    if not isinstance(typed, WindowStore) or typed.timestamped_width < 0:
        return None
    if typed.spec.retain_duplicates or getattr(store.key_serde, "c_to_bytes", None) is None:
        return None
    return WindowFold(proc, store, typed, new_change)
