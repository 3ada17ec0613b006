"""The record cache: Kafka Streams' `statestore.cache.max.bytes` and its caching layer.

Two caches live in the state package; they do different jobs:

- the *write cache* (`kstream.state.cache.WriteCache`, inside every typed store) holds the
  writes of the open transaction until it commits, so that local state never holds
  uncommitted data. It is always there, and it is why a store's changelog already gets one
  record per key per commit.
- the *record cache* (here, config `cache_max_bytes`, 0 = off, the default) holds back the
  *forwarding* of a table's updates: a key updated many times between two commits reaches the
  operators downstream (and the output topics) once, as `Change(latest value, value before
  the first of those updates)`, with the timestamp and headers of its latest update. It is
  Kafka's `ThreadCache` with its `Caching*Store` layers, minus the read cache Kafka's also is
  (reads here are served by the write cache and the backend).

`RecordCache` is one stream thread's budget, as Kafka divides `statestore.cache.max.bytes`
among its stream threads (one per process here: the supervisor of `--processes N` gives each
worker 1/N). `CachingStore` is the
layer of one store partition, in the chain as Kafka's `Metered(Caching(ChangeLogging(inner)))`
(kstream.state's docstring): the runtime adds it to every key-value, window and session store
whose spec allows caching (`StoreSpec.caching`) when the cache is on. A processor that forwards
a store's updates (the aggregations, a materialized table source, and the `materialized=`
results of table filter, map_values, transform_values and joins, through
`kstream.dsl.processors.cached_forwarding`) registers a *flush listener* (`set_flush_listener`,
Kafka's `TimestampedTupleForwarder` contract): it then hands each update to `cache_update`
right after its store write instead of forwarding it, with the value the store held before
that write as old value (the listener leaves it out when no consumer wants old values). A
store nobody listens to holds nothing back.

An entry is keyed by the physical key of the store write it follows, and its size counts the
key and value bytes plus `ENTRY_OVERHEAD` (Kafka counts its entries' bookkeeping too). The
entries of a store are kept in least-recently-written order; when the thread's cache grows past
its budget, the store being written evicts its oldest entries, and evicting a dirty one flushes
every dirty entry of that store, the evicted one first, then the others in the order they
became dirty, exactly as Kafka's `NamedCache.evict`. A commit flushes every dirty entry before
the task's changelog records and input offsets are sent, so the updates, the changelog and the
offsets are in the same transaction. A flushed entry stays, clean, until it is evicted; a key
created and deleted between two flushes forwards nothing (Kafka's flush skips an update whose
new and old values are both null). A rollback drops the cache's entries with the write cache's
writes: what the retry forwards is computed again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from kstream.records import Record
from kstream.state.layer import StoreLayer, typed_store

ENTRY_OVERHEAD = 64
"""Bytes an entry counts beyond its key and value: Kafka's `LRUCacheEntry` and `NamedCache`
node bookkeeping (record context, list links) is of this order."""

CACHED_KINDS = frozenset({"key_value", "window", "session"})
"""Store kinds that can have the layer, as in Kafka (versioned and dedup stores cannot)."""

FlushListener = Callable[[list[tuple[Record, Any]]], None]
"""Called with the flushed updates of a store, oldest-dirty first: each is the latest update
record of a key (its value a `(new, old)` pair, as the processor made it) and the key's value
before the first update since the previous flush. The processor forwards them."""


class RecordCache:
    """One stream thread's record-cache budget: `max_bytes` shared by the thread's caching
    stores (Kafka's `ThreadCache`); 0 turns caching off."""

    __slots__ = ("evictions", "flushes", "max_bytes", "size")

    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"cache_max_bytes: expected an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.size = 0
        self.evictions = 0
        self.flushes = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __repr__(self) -> str:
        return f"RecordCache({self.size}/{self.max_bytes} bytes)"


class _Entry:
    __slots__ = ("dirty", "old", "record", "size")

    def __init__(self, record: Record, old: Any, size: int) -> None:
        self.record = record
        self.old = old
        self.size = size
        self.dirty = True


class CachingStore(StoreLayer):
    """The record-cache layer around one store partition (Kafka's `Caching*Store`).

    Every attribute but its own is the inner store's, reached as every layer reaches it
    (kstream.state.layer: the inner store's public methods bound onto the layer, so an
    operation through it costs no forwarding step; attributes set on it, the task's `context`,
    set on the inner store).
    """

    inner: Any

    def __init__(self, inner: Any, cache: RecordCache) -> None:
        super().__init__(inner)
        own = object.__setattr__
        own(self, "cache", cache)
        own(self, "_entries", OrderedDict())
        own(self, "_dirty", {})
        own(self, "_listener", None)
        # the typed store notes the key of its latest write (`last_written`), which the
        # update that follows it is cached under
        own(self, "_typed", typed_store(inner))
        own(self, "cache_update", self._updater())

    # --- the processor's side -------------------------------------------------------------------

    def set_flush_listener(self, listener: FlushListener) -> bool:
        """Forward this store's updates through the cache from now on; False (and nothing
        changes) when the cache is off or the store's spec disables caching."""
        if not self.cache.enabled or not getattr(self.inner.spec, "caching", True):
            return False
        object.__setattr__(self, "_listener", listener)
        return True

    cache_update: Callable[[Record], None]
    """Hold back `record`, the update the processor made for the store write it just did (its
    value a `(new, old)` pair, `old` the value the store held before that write). A function
    made per layer (`_updater`), bound onto it at construction."""

    def _updater(self) -> Callable[[Record], None]:
        """`cache_update` for this layer: a closure over the typed store, the entries and the
        thread's cache, as it runs once per update of every caching store (a closure's
        variables cost less to read than the layer's attributes; P3's profile had this call
        as its largest own cost)."""
        typed, cache = self._typed, self.cache
        entries: OrderedDict[bytes, _Entry] = self._entries
        dirty: dict[bytes, None] = self._dirty
        write_cache = typed._cache
        entry_get, to_end = entries.get, entries.move_to_end

        def cache_update(record: Record) -> None:
            pkey = typed.last_written
            if pkey is None:  # the store kept nothing (a write past retention): forward it now
                listener = self._listener
                assert listener is not None, "cache_update before set_flush_listener"
                listener([(record, record.value[1])])
                return
            typed.last_written = None
            value = write_cache.data.get(pkey)
            size = len(pkey) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
            e = entry_get(pkey)
            if e is None:
                entries[pkey] = _Entry(record, record.value[1], size)
                dirty[pkey] = None
                cache.size += size
            else:
                to_end(pkey)
                cache.size += size - e.size
                e.size = size
                if not e.dirty:
                    e.dirty = True
                    e.old = record.value[1]
                    dirty[pkey] = None
                e.record = record
            if cache.size > cache.max_bytes:
                while cache.size > cache.max_bytes and entries:
                    self._evict()

        return cache_update

    def batch_room(self, pkeys: Iterable[bytes], value_len: int) -> bool:
        """Whether writing each of `pkeys` (any number of times) with values of `value_len`
        bytes keeps the thread's cache within its budget after every write, so that no write
        evicts: then one update per key, handed over after the batch (`cache_updates`), leaves
        the cache as an update per write would have. Every write of a key gives its entry the
        same size, so the cache is never larger than when every key has grown once."""
        entries = self._entries
        grow = 0
        for pkey in pkeys:
            e = entries.get(pkey)
            d = len(pkey) + value_len + ENTRY_OVERHEAD - (0 if e is None else e.size)
            if d > 0:
                grow += d
        cache: RecordCache = self.cache
        return cache.size + grow <= cache.max_bytes

    def cache_updates(
        self, updates: list[tuple[bytes, Record, Any]], recency: Iterable[bytes]
    ) -> None:
        """Hold back the latest update of each key a processor wrote in one batch, after all
        its store writes: `updates` are `(physical key, its latest update record, the value
        the key had before the batch)` in the order the keys were first written in the batch
        (the order they become dirty, hence flush); `recency` the keys in the
        order of their last write (the least-recently-written order evictions follow). The
        caller checked `batch_room`: the same entries, sizes, dirty order and recency order as
        `cache_update` after every write, without a call per write."""
        typed = self._typed
        typed.last_written = None
        data = typed._cache.data
        cache, entries, dirty = self.cache, self._entries, self._dirty
        for pkey, record, before in updates:
            value = data.get(pkey)
            size = len(pkey) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
            e = entries.get(pkey)
            if e is None:
                entries[pkey] = _Entry(record, before, size)
                dirty[pkey] = None
                cache.size += size
            else:
                cache.size += size - e.size
                e.size = size
                if not e.dirty:
                    e.dirty = True
                    e.old = before
                    dirty[pkey] = None
                e.record = record
        move = entries.move_to_end
        for pkey in recency:
            move(pkey)
        while cache.size > cache.max_bytes and entries:  # not reached after `batch_room`
            self._evict()

    # --- flushing -------------------------------------------------------------------------------

    def _evict(self) -> None:
        """Drop the least recently written entry; a dirty one flushes the store's dirty
        entries first (Kafka's `NamedCache.evict`)."""
        pkey, e = self._entries.popitem(last=False)
        self.cache.size -= e.size
        self.cache.evictions += 1
        if e.dirty:
            del self._dirty[pkey]
            self._flush(e)

    def _flush(self, evicted: _Entry | None = None) -> None:
        dirty, entries, cache = self._dirty, self._entries, self.cache
        order = list(dirty)
        dirty.clear()
        flushed: list[_Entry] = [] if evicted is None else [evicted]
        for pkey in order:
            e = entries[pkey]
            e.dirty = False
            flushed.append(e)
            if e.record.value[0] is None:  # a delete leaves no entry behind
                del entries[pkey]
                cache.size -= e.size
        cache.flushes += 1
        out = [
            (e.record, e.old) for e in flushed if e.record.value[0] is not None or e.old is not None
        ]
        if out:
            listener = self._listener
            assert listener is not None
            listener(out)

    def flush_cache(self) -> bool:
        """Forward every dirty entry (before a commit); True if there were any."""
        if not self._dirty:
            return False
        self._flush()
        return True

    def dirty_count(self) -> int:
        """Updates held back, waiting for a flush."""
        return len(self._dirty)

    def _drop_entries(self) -> None:
        self.cache.size -= sum(e.size for e in self._entries.values())
        self._entries.clear()
        self._dirty.clear()
        self._typed.last_written = None

    # --- the store's lifecycle ------------------------------------------------------------------

    def discard(self) -> None:
        """The transaction aborted: drop the held-back updates with the pending writes."""
        self._drop_entries()
        self.inner.discard()

    def close(self) -> None:
        self._drop_entries()
        self.inner.close()

    def destroy(self) -> None:
        self._drop_entries()
        self.inner.destroy()

    def __repr__(self) -> str:
        return f"Caching({self.inner!r})"


def cached(store: Any, cache: RecordCache | None) -> Any:
    """`store` inside a `CachingStore` when `cache` is on and the store can cache (its kind,
    its spec's `caching`); else `store` as it is."""
    if cache is None or not cache.enabled:
        return store
    spec = store.spec
    if spec.kind not in CACHED_KINDS or not getattr(spec, "caching", True):
        return store
    return CachingStore(store, cache)
