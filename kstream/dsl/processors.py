"""The built-in processors behind the DSL's stateless and basic stateful operators.

Each works a list at a time (`process_batch`), calls user functions inside a per-record `try`
(free in Python 3.11 until something raises) and reports failures through `ctx.on_error`, which
raises or lets the record be skipped. None of them modifies a record it received.

Table operators exchange `Change(new, old)` values: `old` is the previous value of the key
(None if absent), `new` the value now (None = deleted). Carrying the old value lets filters
emit a delete only when the key was visible before, and lets grouped tables subtract it.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

from kstream.records import Record, derive
from kstream.state.keyvalue import (
    NO_TIMESTAMP,
    TimestampedGet,
    TimestampedPut,
    TimestampedSerde,
    ValueAndTimestamp,
    ts_struct,
)
from kstream.topology.processor import Processor, ProcessorContext


class Change(NamedTuple):
    """A table update: the key's new value and its old one (None = absent)."""

    new: Any
    old: Any


class NotLatest(Change):
    """An update of a versioned table older than its key's latest version (Kafka's
    `Change.isLatest == false`, KIP-914): it went into the store's history only. Filters,
    `map_values` and `transform_values` keep the mark (an unmaterialized result is still that
    update), `to_stream` lets it through; table-table and foreign-key joins and regroupings
    drop it, as the latest value did not change (kstream.dsl.versioned).

    Example:
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> prices = b.table("prices", "string", "long", versioned="1h")
        >>> prices.to_stream().to("changes", "string", "long")
        >>> with TopologyTestDriver(b) as d:
        ...     src = d.input_topic("prices", "string", "long")
        ...     src.pipe("apple", 3, timestamp=30)
        ...     src.pipe("apple", 2, timestamp=20)  # older than the latest: history only
        ...     out = d.output_topic("changes", "string", "long")
        ...     [(r.value, r.timestamp) for r in out.read_records()]
        [(3, 30), (2, 20)]
        >>> NotLatest(2, 3)
        NotLatest(new=2, old=3)
    """

    __slots__ = ()


def same_kind(change: Change, new: Any, old: Any) -> Change:
    """`Change(new, old)`, a `NotLatest` when `change` is one: the result of an operator that
    keeps the mark of the update it transformed.

    Example:
        >>> same_kind(NotLatest("b", "a"), "B", "A")
        NotLatest(new='B', old='A')
        >>> same_kind(Change("b", "a"), "B", "A")
        Change(new='B', old='A')
    """
    return NotLatest(new, old) if type(change) is NotLatest else Change(new, old)


def _tuple_new(cls: type) -> Callable[[tuple[Any, ...]], Any]:
    return functools.partial(tuple.__new__, cls)


# `new_change((new, old))` == `Change(new, old)` without the Python-level __new__ (hot paths)
new_change: Callable[[tuple[Any, Any]], Change] = _tuple_new(Change)


def without(records: Sequence[Record], bad: set[int] | None) -> list[Record]:
    """`records` but those whose `id` is in `bad` (the ones that failed)."""
    return list(records) if bad is None else [r for r in records if id(r) not in bad]


class BuiltinProcessor(Processor):
    """Keeps `ctx` and the task (whose `current` record stores use for provenance).

    `forwards` tells the task what a processor hands on (see `Task`, which works out from it
    whose records are whose): "new" records it made, the "given" ones it received, or None
    (anything, e.g. records it also keeps). A processor that can change its input records in
    place has `owns_input`, which the task sets when the records reach it through nobody else.
    """

    task: Any
    forwards: ClassVar[str | None] = None
    #: True only for a built-in operator that keeps nothing between records (no store, no
    #: state of its own), so an engine may run it in any batch anywhere: the Spark engine runs
    #: a sub-topology of only such processors without Spark state
    stateless: ClassVar[bool] = False

    def init(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self.task = getattr(ctx, "task", None)

    def process(self, record: Record) -> None:
        self.process_batch([record])


class FilterProcessor(BuiltinProcessor):
    stateless = True
    forwards = "given"

    def __init__(self, predicate: Callable[[Any, Any], Any], negate: bool = False) -> None:
        self.predicate = predicate
        self.negate = negate

    def process_batch(self, records: Sequence[Record]) -> None:
        pred, on_error = self.predicate, self.ctx.on_error
        out: list[Record] = []
        keep = out.append
        # one loop per polarity: the test of each record is the predicate's truth alone
        if self.negate:
            for r in records:
                try:
                    if not pred(r.key, r.value):
                        keep(r)
                except Exception as e:
                    on_error(e, r)
        else:
            for r in records:
                try:
                    if pred(r.key, r.value):
                        keep(r)
                except Exception as e:
                    on_error(e, r)
        self.ctx.forward_batch(out)


class MapProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.fn = fn
        self.owns_input = False

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        if self.owns_input:  # nobody else sees these records: change them, copy none
            bad: set[int] | None = None
            for r in records:
                try:
                    r.key, r.value = fn(r.key, r.value)
                except Exception as e:
                    on_error(e, r)
                    bad = (bad or set()) | {id(r)}
            self.ctx.forward_batch(without(records, bad))
            return
        out = []
        for r in records:
            try:
                k, v = fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(derive(r, k, v))  # r.with_key_value(k, v), one call fewer
        self.ctx.forward_batch(out)


class MapValuesProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[..., Any], with_key: bool = False) -> None:
        self.fn = fn
        self.with_key = with_key  # fn(key, value), Kafka's ValueMapperWithKey
        self.owns_input = False

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        if self.with_key:
            out = []
            for r in records:
                try:
                    v = fn(r.key, r.value)
                except Exception as e:
                    on_error(e, r)
                    continue
                out.append(derive(r, r.key, v))
            self.ctx.forward_batch(out)
            return
        if self.owns_input:  # nobody else sees these records: change them, copy none
            bad: set[int] | None = None
            for r in records:
                try:
                    r.value = fn(r.value)
                except Exception as e:
                    on_error(e, r)
                    bad = (bad or set()) | {id(r)}
            self.ctx.forward_batch(without(records, bad))
            return
        out = []
        for r in records:
            try:
                v = fn(r.value)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(derive(r, r.key, v))  # r.with_value(v), one call fewer
        self.ctx.forward_batch(out)


class SelectKeyProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        out = []
        for r in records:
            try:
                k = fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(r.with_key(k))
        self.ctx.forward_batch(out)


class FlatMapProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        out = []
        for r in records:
            try:
                pairs = [r.with_key_value(k, v) for k, v in fn(r.key, r.value)]
            except Exception as e:
                on_error(e, r)
                continue
            out.extend(pairs)
        self.ctx.forward_batch(out)


class FlatMapValuesProcessor(BuiltinProcessor):
    stateless = True
    forwards = "new"

    def __init__(self, fn: Callable[..., Any], with_key: bool = False) -> None:
        self.fn = fn
        self.with_key = with_key  # fn(key, value), Kafka's ValueMapperWithKey

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error, with_key = self.fn, self.ctx.on_error, self.with_key
        out = []
        for r in records:
            try:
                vs = fn(r.key, r.value) if with_key else fn(r.value)
                vals = [r.with_value(v) for v in vs]
            except Exception as e:
                on_error(e, r)
                continue
            out.extend(vals)
        self.ctx.forward_batch(out)


class PeekProcessor(BuiltinProcessor):
    """`peek` (forwards) and `foreach` (terminal: no children, so nothing is forwarded)."""

    stateless = True
    forwards = "given"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error = self.fn, self.ctx.on_error
        bad = None
        for r in records:
            try:
                fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                bad = (bad or set()) | {id(r)}
        self.ctx.forward_batch(without(records, bad))


class PassThroughProcessor(BuiltinProcessor):
    """Merge points and branch children: forward what comes in."""

    stateless = True
    forwards = "given"

    def process_batch(self, records: Sequence[Record]) -> None:
        self.ctx.forward_batch(list(records))


_NO_KEY: Any = object()


class _FixedKeyContext:
    """The context a `process_values` processor sees: the real one, but forwarding checks that
    a record forwarded while an input record is processed keeps that record's key."""

    def __init__(self, ctx: ProcessorContext, owner: FixedKeyProcessor) -> None:
        self._ctx = ctx
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def forward(self, record: Record, to: str | None = None) -> None:
        self._owner.check_key(record)
        self._ctx.forward(record, to)

    def forward_batch(self, records: list[Record], to: str | None = None) -> None:
        for r in records:
            self._owner.check_key(r)
        self._ctx.forward_batch(records, to)


class FixedKeyProcessor(BuiltinProcessor):
    """Runs a user processor that may change values but not keys (`KStream.process_values`,
    Kafka's `FixedKeyProcessor`): a record forwarded with another key than the input's fails
    (through the error handler), so no repartition is needed downstream."""

    def __init__(self, factory: Callable[[], Any], node: str) -> None:
        from kstream.topology.processor import as_processor

        self.user = as_processor(factory(), node)
        self.node = node
        self.key: Any = _NO_KEY

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.user.init(_FixedKeyContext(ctx, self))

    def check_key(self, record: Record) -> None:
        if self.key is not _NO_KEY and record.key != self.key:
            raise ValueError(
                f"process_values {self.node!r}: a record was forwarded with key {record.key!r} "
                f"for input key {self.key!r}; process_values keeps keys (use process to "
                "change them)"
            )

    def process_batch(self, records: Sequence[Record]) -> None:
        process, on_error = self.user.process, self.ctx.on_error
        try:
            for r in records:
                self.key = r.key
                try:
                    process(r)
                except Exception as e:
                    on_error(e, r)
        finally:
            self.key = _NO_KEY  # punctuations forward records kept from earlier inputs

    def close(self) -> None:
        self.user.close()


class BranchProcessor(BuiltinProcessor):
    """First matching predicate wins; records matching none go to `default` or are dropped."""

    stateless = True

    def __init__(
        self,
        predicates: Sequence[Callable[[Any, Any], Any]],
        children: Sequence[str],
        default: str | None,
    ) -> None:
        # `children` may also name the default branch, after the predicates' (as Kafka's
        # KStreamBranch: `KStream.split()` adds the branches after the splitter)
        n = len(predicates)
        self.predicates = list(predicates)
        self.children = list(children[:n])
        self.default = default if default is not None or len(children) <= n else children[n]

    def process_batch(self, records: Sequence[Record]) -> None:
        preds, on_error = self.predicates, self.ctx.on_error
        n = len(preds)
        buckets: list[list[Record]] = [[] for _ in range(n + 1)]
        for r in records:
            try:
                i = 0
                while i < n and not preds[i](r.key, r.value):
                    i += 1
            except Exception as e:
                on_error(e, r)
                continue
            buckets[i].append(r)
        for i, child in enumerate(self.children):
            if buckets[i]:
                self.ctx.forward_batch(buckets[i], to=child)
        if self.default is not None and buckets[n]:
            self.ctx.forward_batch(buckets[n], to=self.default)


class NullKeyPolicy:
    """Whether a repartition filter keeps null-key records: decided after its processor was
    added, once the DSL knows whether a join that accepts null keys reads from it (Kafka 3.7+,
    KIP-962: a left or outer join downstream keeps them)."""

    __slots__ = ("keep",)

    def __init__(self) -> None:
        self.keep = False


class DropNullKeysProcessor(BuiltinProcessor):
    """Before a repartition: a record without a key has no partition (Kafka drops it too)."""

    stateless = True

    def __init__(self, policy: NullKeyPolicy | None = None) -> None:
        self.policy = policy

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.keep = self.policy is not None and self.policy.keep

    def process_batch(self, records: Sequence[Record]) -> None:
        if self.keep:
            self.ctx.forward_batch(list(records))
            return
        out = [r for r in records if r.key is not None]
        if len(out) != len(records):
            dropped = self.ctx.record_dropped
            for r in records:
                if r.key is None:
                    dropped("null_key", r)
        self.ctx.forward_batch(out)


class _PairTimestamps:
    """Timestamped access over a store of Python objects without it (the Spark runner's
    per-bucket dicts): `ValueAndTimestamp`s are stored as the values themselves, and a value
    stored before (anything else) reads with `NO_TIMESTAMP`."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, key: Any) -> tuple[Any, Any, int]:
        stored = self.store.get(key)
        if stored is None:
            return key, None, NO_TIMESTAMP
        if isinstance(stored, ValueAndTimestamp):
            return key, stored[0], stored[1]
        return key, stored, NO_TIMESTAMP

    def put(self, key: Any, value: Any, timestamp: int) -> None:
        self.store.put(key, None if value is None else ValueAndTimestamp(value, timestamp))


def timestamped_access(store: Any) -> tuple[TimestampedGet, TimestampedPut]:
    """`(get, put)` keeping result timestamps: the store's own
    (`KeyValueStore.timestamped_access`), or pairs stored as values for other stores."""
    access = getattr(store, "timestamped_access", None)
    if access is not None:
        pair: tuple[TimestampedGet, TimestampedPut] = access()
        return pair
    view = _PairTimestamps(store)
    return view.get, view.put


UpdateSink = Callable[[Record], None]
"""Where a table processor puts one update record: `out.append` (forwarded after the run) or a
record cache's `cache_update` (forwarded when the cache flushes)."""


def cached_forwarding(
    store: Any, ctx: ProcessorContext, send_old: bool = True
) -> UpdateSink | None:
    """Forward `store`'s updates through the record cache (kstream.state.caching), as Kafka's
    `TimestampedTupleForwarder` does when its store caches: the processor then hands each
    update to the returned function right after the store write it made, with the value the
    store held before that write as the Change's old value, and the cache forwards a key's
    latest update, with the value before its first one, when it flushes (commit or eviction).
    None: the store does not cache (the cache is off, the store's spec disables it, or the
    store has no caching layer, as in the test driver); forward every update as before.

    `send_old` False (a table operator whose consumers need no old values, Kafka's
    `setFlushListener(listener, sendOldValues)`): the flushed Changes carry None as old value.
    The processor still hands the stored old value to the cache, which needs it to skip a key
    created and deleted between two flushes, and to forward the delete of one that existed."""
    register = getattr(store, "set_flush_listener", None)
    if register is None:
        return None

    def forward_flushed(flushed: list[tuple[Record, Any]]) -> None:
        ctx.forward_batch([derive(r, r.key, new_change((r.value[0], old))) for r, old in flushed])

    def forward_flushed_new(flushed: list[tuple[Record, Any]]) -> None:
        ctx.forward_batch([derive(r, r.key, new_change((r.value[0], None))) for r, _ in flushed])

    if not register(forward_flushed if send_old else forward_flushed_new):
        return None
    sink: UpdateSink = store.cache_update
    return sink


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
        times = list(map(_time_of, records))
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
