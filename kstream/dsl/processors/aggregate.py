"""The aggregations of a grouped stream (count, reduce, aggregate) into a timestamped
key-value store, and their steps."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, new_change
from kstream.dsl.processors.cache import cached_forwarding, timestamped_access
from kstream.records import Record, derive
from kstream.state.keyvalue import TimestampedSerde, ts_struct
from kstream.topology.processor import ProcessorContext


class AggregateProcessor(BuiltinProcessor):
    """count / reduce / aggregate of a grouped stream into a timestamped key-value store.

    `step(key, value, agg_or_None) -> new agg`. Records with a None key or value are dropped
    (counted), as Kafka's KStreamAggregate/KStreamReduce skip them. A result carries the
    largest timestamp of the records aggregated into it: `max(record, stored)`, or the
    record's own when the key has no aggregate yet. Emits `Change(new, old)`.

    `initial` (count's 0, aggregate's initializer; None for reduce) is what a key without an
    aggregate starts from: as Kafka's KStreamAggregate, its first result's old value is that
    initial aggregate, not None, which a table filter or a regroup below sees (a regroup
    subtracts it from its group).
    """

    forwards = "new"  # updates it made (the record cache's flush makes them anew too)

    def __init__(
        self,
        store: str,
        step: Callable[[Any, Any, Any], Any],
        initial: Callable[[], Any] | None = None,
    ) -> None:
        self.store_name = store
        self.step = step
        self.initial = initial

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        store = ctx.get_store(self.store_name)
        self.cached = cached_forwarding(store, ctx)
        self.get, self.put = timestamped_access(store)
        self.folding = (
            counts_by_key(store) if self.cached is not None and self.step is count_step else None
        )

    def process_batch(self, records: Sequence[Record]) -> None:
        if self.folding is not None and self._fold_counts(records, *self.folding):
            return
        get, put, step, task, on_error = self.get, self.put, self.step, self.task, self.ctx.on_error
        dropped, initial, cached = self.ctx.record_dropped, self.initial, self.cached
        out: list[Record] = []
        # cached: the update's old value is what the store held (None for a new key), as the
        # cache's flush forwards it in Kafka; uncached, a new key's is the initial aggregate
        emit = out.append if cached is None else cached
        for r in records:
            k, v = r.key, r.value
            if k is None:
                dropped("null_key", r)
                continue
            if v is None:
                dropped("null_value", r)
                continue
            if task is not None:
                task.current = r
            try:
                kb, stored, stored_ts = get(k)
                old = initial() if stored is None and initial is not None else stored
                new = step(k, v, old)
            except Exception as e:
                on_error(e, r)
                continue
            ts = r.timestamp
            if stored is not None and stored_ts > ts:
                ts = stored_ts
            put(kb, new, ts)
            result = derive(r, k, new_change((new, old if cached is None else stored)))
            result.timestamp = ts  # a record of its own: stamped in place, not copied
            emit(result)
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)

    def _fold_counts(
        self, records: Sequence[Record], encode: Callable[[Any], bytes], layer: Any
    ) -> bool:
        """A count behind the record cache, one store read, write and cache update per key of
        the batch instead of per record; False (and nothing done) when the batch needs the
        per-record path.

        With the cache holding every update back, what leaves a batch is each key's last
        update (its count, the largest timestamp, the provenance of its last record) and the
        value before its first one, which is exactly what this writes: the store gets one
        write per key in first-write order (the changelog and its record order are the
        same), the cache the same entries, dirty order and recency order
        (`CachingStore.cache_updates`). It applies only when nothing in the batch could
        have gone another way record by record: no null key or value (drops), every key
        encoded by the serde's C function and read without error (no `on_error`), and room in
        the cache for every key (no eviction, which forwards mid-batch). Counting calls no
        user code, so giving up after looking costs nothing but the look.
        """
        keys = list(map(_key_of, records))
        if None in keys or None in map(_value_of, records):
            return False
        try:
            kbs = list(map(encode, keys))
        except Exception:
            return False
        counts = Counter(kbs)  # keys in first-write order
        if not layer.batch_room(counts, _COUNT_WIDTH):
            return False
        last = dict(zip(kbs, records, strict=True))  # each key's last record
        get, put, task = self.get, self.put, self.task
        try:
            reads = [get(last[kb].key) for kb in counts]
        except Exception:
            return False
        # each key's largest timestamp: the last one per key once the records are in time
        # order. A partition's records usually are, and checking that (a sort of a sorted
        # list, linear, in C) costs half of sorting the batch's indexes by time
        times = list(map(_time_of, records))
        if sorted(times) == times:
            latest = dict(zip(kbs, times, strict=True))
        else:
            by_time = sorted(range(len(times)), key=times.__getitem__)
            latest = dict(
                zip(map(kbs.__getitem__, by_time), map(times.__getitem__, by_time), strict=True)
            )
        updates: list[tuple[bytes, Record, Any]] = []
        for (kb, n), (_, stored, stored_ts) in zip(counts.items(), reads, strict=True):
            r = last[kb]
            new = n if stored is None else stored + n
            # the last update's old value: what the store held before the key's last write
            prev = stored if n == 1 else new - 1
            ts = latest[kb]
            if stored is not None and stored_ts > ts:
                ts = stored_ts
            if task is not None:
                task.current = r  # the write's provenance: the key's last record
            put(kb, new, ts)
            result = derive(r, r.key, new_change((new, prev)))
            result.timestamp = ts
            updates.append((kb, result, stored))
        if task is not None:
            task.current = None
        layer.cache_updates(updates, reversed(dict.fromkeys(reversed(kbs))))
        self.ctx.forward_batch([])
        return True


_key_of = operator.attrgetter("key")


_value_of = operator.attrgetter("value")


_time_of = operator.attrgetter("timestamp")


_COUNT_WIDTH = 16
"""Bytes of a stored count: its 8-byte timestamp and the 8-byte long (`ts_struct`)."""


def counts_by_key(store: Any) -> tuple[Callable[[Any], bytes], Any] | None:
    """`(key encoder, caching layer)` for `AggregateProcessor._fold_counts`, or None when the
    store is not a caching key-value store of timestamped longs with a C key encoder."""
    if getattr(store, "cache_updates", None) is None:
        return None
    vs = getattr(store, "value_serde", None)
    if not isinstance(vs, TimestampedSerde):
        return None
    both = ts_struct(vs.inner)
    if both is None or both[0].format != ">qq" or both[0].size != _COUNT_WIDTH:
        return None
    encode = getattr(store.key_serde, "c_to_bytes", None)
    return None if encode is None else (encode, store)


def count_step(_k: Any, _v: Any, agg: Any) -> int:
    return 1 if agg is None else agg + 1


def count_initial() -> int:
    """Count's initial aggregate (Kafka's `countInitializer`)."""
    return 0


def reduce_step(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    def step(_k: Any, v: Any, agg: Any) -> Any:
        return v if agg is None else reducer(agg, v)

    return step


def aggregate_step(
    initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any]
) -> Callable[[Any, Any, Any], Any]:
    def step(k: Any, v: Any, agg: Any) -> Any:
        return aggregator(k, v, initializer() if agg is None else agg)

    return step
