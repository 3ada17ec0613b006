"""How a stateful processor reads and writes its store's timestamped values, and forwards its
updates through the record cache (kstream.state.caching) when the store has one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.dsl.processors.base import new_change
from kstream.records import Record, derive
from kstream.state.keyvalue import (
    NO_TIMESTAMP,
    TimestampedGet,
    TimestampedPut,
    ValueAndTimestamp,
)
from kstream.topology.processor import ProcessorContext


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
