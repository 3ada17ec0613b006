"""What every typed store shares: the write cache, flush/discard, checkpoints, read-only views.

Typed stores map user keys to *physical* backend keys (possibly with a time segment prefix)
and to *logical* changelog keys (no segment: the changelog must not depend on how a store lays
out its data). `_to_changelog` and `_from_changelog` translate between the two; the layer
that turns pending writes into changelog records is `kstream.state.changelog`, around the
typed store (kstream.state's docstring has the whole chain).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from kstream.errors import StoreError
from kstream.records import Record
from kstream.serde import Serde
from kstream.state.cache import WriteCache, merged
from kstream.state.spec import StoreSpec
from store_backends.base import Backend

Writes = Iterable[tuple[bytes, bytes | None]]
"""Physical writes (None = delete)."""

Source = tuple[str, int, int]
"""Provenance of a write: the (topic, partition, offset) of the input record that caused it."""

Origin = Record | int
"""What a store notes of each pending write: the record being processed when it was made, or,
with none (a punctuation), the time of the write (`RecordContext.record_time`). A record's
origin and time never change once it is processed (records are not modified in place but for
their key and value), so keeping the record is keeping its provenance and time, at the cost of
one reference per write instead of a call for each."""


class RecordContext(Protocol):
    """What a store reads at each write (the task: `kstream.topology.task.Task`)."""

    current: Record | None
    """The record being processed, or None (a punctuation, a flush)."""

    def record_time(self) -> int:
        """The time of what is being processed (Kafka's record-context timestamp)."""
        ...


def source_of(origin: Origin | None) -> Source | None:
    """The provenance an origin gives: the record's topic, partition and offset, or None for
    a write no input record caused (a punctuation, a record made without an origin)."""
    if origin is None or origin.__class__ is int:
        return None
    topic, partition, offset = origin.topic, origin.partition, origin.offset  # type: ignore[union-attr]
    if topic is None or partition is None or offset is None:
        return None
    return (topic, partition, offset)


def time_of(origin: Origin | None) -> int:
    """The time an origin gives: the record's timestamp, the time noted, or -1 (none)."""
    if origin is None:
        return -1
    if origin.__class__ is int:
        return origin
    return origin.timestamp  # type: ignore[union-attr]


class StateStore:
    """Base of the typed stores. Subclasses add the typed read and write methods."""

    kind = "state"
    READ_METHODS: frozenset[str] = frozenset({"name", "spec", "partition", "kind"})

    def __init__(
        self,
        spec: StoreSpec,
        backend: Backend,
        partition: int,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.partition = partition
        self.backend = backend
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._cache = WriteCache()
        self.context: RecordContext | None = None
        """Set by the task: where a write finds the record being processed, whose provenance
        and time (Kafka's record context timestamp: a punctuation's time in a punctuation)
        its changelog record carries (`pending_writes`, `changelog_timestamp`)."""
        self._origins: dict[bytes, Origin] = {}
        self.last_written: bytes | None = None
        """The physical key of the latest write: the record-cache layer
        (kstream.state.caching) reads it after a processor's write, and clears it."""
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, partition={self.partition})"

    # --- the write cache ------------------------------------------------------------------------

    def _write(self, pkey: bytes, value: bytes | None) -> None:
        if self._closed:
            raise StoreError(f"store {self.name!r} partition {self.partition} is closed")
        self._cache.data[pkey] = value  # WriteCache.put, written out (a call per write less)
        ctx = self.context
        if ctx is not None:
            cur = ctx.current
            self._origins[pkey] = cur if cur is not None else ctx.record_time()
        self.last_written = pkey

    def _read(self, pkey: bytes) -> bytes | None:
        data = self._cache.data
        if pkey in data:
            return data[pkey]
        return self.backend.get(pkey)

    def _scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Physical entries in [lo, hi] as the store sees them (backend + pending writes)."""
        return merged(self.backend.range(lo, hi, reverse), self._cache, lo, hi, reverse)

    def _to_changelog(self, pkey: bytes, value: bytes | None) -> tuple[bytes, bytes | None] | None:
        """The changelog record for a physical write, or None when it is not logged."""
        return pkey, value

    def _from_changelog(self, key: bytes, value: bytes | None) -> Writes:
        """The physical writes that replay one changelog record."""
        return ((key, value),)

    def _extra_writes(self) -> Writes:
        """Physical writes a store adds at flush time (expiry, metadata); never logged."""
        return ()

    def check_changelog(self, key: bytes, value: bytes | None) -> None:
        """Raise unless a changelog record is one this store could have written: its key and
        value decode with the store's serdes (None deletes). Restore calls it for every record
        it applies, so a record written by something else is refused where it is, instead of
        failing a later input record that reads it. A well-formed value of the right type
        passes: a serde cannot tell a forged value from a real one."""
        self.key_serde.from_bytes(key)
        if value is not None:
            self.value_serde.from_bytes(value)

    def has_pending(self) -> bool:
        return bool(self._cache)

    def pending_writes(self) -> Iterator[tuple[bytes, bytes | None, Source | None]]:
        """The pending physical writes in write order (one per key, the last write wins), each
        with the input record that caused it: what the change-logging layer logs."""
        origins = self._origins
        for pk, v in self._cache.data.items():
            yield pk, v, source_of(origins.get(pk))

    def changelog_timestamp(self, pkey: bytes, value: bytes | None) -> int:
        """The timestamp of the changelog record of a pending write (-1: none known): the
        time of the record that made the write, as Kafka's change-logging layer takes it from
        the record context. Stores that keep a timestamp in the value (aggregations) take that
        one instead, as Kafka's timestamped stores do."""
        return time_of(self._origins.get(pkey))

    def flush(self, checkpoint: dict[str, Any] | None = None) -> None:
        """Apply pending writes and `checkpoint` in one atomic backend write."""
        if self._closed:
            raise StoreError(f"store {self.name!r} partition {self.partition} is closed")
        puts: dict[bytes, bytes] = {}
        deletes: list[bytes] = []
        for k, v in self._cache.data.items():
            if v is None:
                deletes.append(k)
            else:
                puts[k] = v
        for k, v in self._extra_writes():
            if v is None:
                puts.pop(k, None)
                deletes.append(k)
            else:
                puts[k] = v
        if puts or deletes or checkpoint is not None:
            self.backend.write_batch(puts, deletes, checkpoint)
        self._cache.clear()
        self._origins = {}
        self._after_flush()

    def _after_flush(self) -> None:
        """Hook: state to remember once pending writes are durable."""

    def discard(self) -> None:
        """Drop pending writes (the transaction aborted)."""
        self._cache.clear()
        self._origins = {}
        self.last_written = None
        self._after_discard()

    def _after_discard(self) -> None:
        """Hook: roll in-memory state back to the last flush."""

    def apply_changelog(
        self, records: Iterable[tuple[bytes, bytes | None]], checkpoint: dict[str, Any] | None
    ) -> int:
        """Restore: write changelog records straight to the backend with `checkpoint`.

        Returns the number of records applied. Pending writes must be empty (restore runs
        before processing).
        """
        if self._cache:
            raise StoreError(f"store {self.name!r}: cannot restore with pending writes")
        puts: dict[bytes, bytes] = {}
        deletes: set[bytes] = set()
        n = 0
        for key, value in records:
            n += 1
            for pk, pv in self._from_changelog(key, value):
                if pv is None:
                    puts.pop(pk, None)
                    deletes.add(pk)
                else:
                    deletes.discard(pk)
                    puts[pk] = pv
        for pk, pv in self._extra_writes():
            if pv is None:
                puts.pop(pk, None)
                deletes.add(pk)
            else:
                deletes.discard(pk)
                puts[pk] = pv
        self.backend.write_batch(puts, deletes, checkpoint)
        self._after_flush()
        return n

    # --- lifecycle ------------------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        return self.backend.checkpoint()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._cache.clear()
            self.backend.close()

    def destroy(self) -> None:
        self._closed = True
        self._cache.clear()
        self.backend.destroy()

    def read_only(self) -> ReadOnlyView:
        return ReadOnlyView(self)


class ReadOnlyView:
    """A store seen by queries: only its read methods are reachable.

    `store` is a typed store or a layer around one (kstream.state.metrics.MeteredStore,
    kstream.state.changelog.ChangeLoggingStore): the read methods are those of the typed
    store, looked up through the layers."""

    __slots__ = ("_store",)

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, attr: str) -> Any:
        if attr in self._store.READ_METHODS:
            return getattr(self._store, attr)
        raise AttributeError(
            f"store {self._store.name!r} is read-only here: {attr!r} is not a read method"
        )

    def __repr__(self) -> str:
        return f"ReadOnly({self._store!r})"
