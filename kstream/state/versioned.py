"""The versioned key-value store (KIP-889): every value a key had, each with its validity.

A put is `put(key, value, timestamp)`: the value is valid from `timestamp` until the key's
next version (or forever, the latest). `get(key)` is the latest version, `get(key, as_of)` the
version valid at `as_of`. Kafka Streams' `RocksDBVersionedStore` semantics, call for call:

- stream time is the largest timestamp put (or deleted) so far; history older than
  `stream time - history_retention` is gone: a put older than that is dropped
  (`PUT_RETURN_CODE_NOT_PUT`) and a `get` as of such a time returns None, unless the latest
  version already applies then (the latest version never expires);
- a put older than the latest version goes into history: it splits the version it falls in
  (or fills the gap a delete left) and returns the time its validity ends; a put at or after
  the latest returns `PUT_RETURN_CODE_VALID_TO_UNDEFINED`;
- None (or `delete(key, timestamp)`) is a tombstone at that time: the key has no value from
  then until its next version.

Layout over any ordered bytes backend (`store_backends`), on the time segments the window
stores use (kstream.state.segments):

- latest: `LATEST + key` -> timestamp, flag, value (flag 0: the latest version is a tombstone,
  kept so an older put learns where its validity ends);
- history: `segment(valid_to) + escaped key + valid_from` -> valid_to, flag, value. A version
  lives in the segment of the time its validity ended, so whole segments drop out of
  retention. Tombstones are versions too (flag 0): an older put that lands in one splits it,
  and ends where it ended.

The changelog has one record per put, in put order: key = the key's bytes, value =
timestamp + flag + value bytes, record timestamp = when it was written (the wall clock, not the
put's time: `changelog_timestamp` says why). A restore replays them through the same `put`, so
history comes back exactly as it was built (the logical changelog does not depend on the
layout). The
write cache keeps one value per physical key, so these records are kept in a list of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from kstream.errors import StoreError
from kstream.serde import Serde
from kstream.state.base import Source, Writes, source_of
from kstream.state.keys import TS_MAX, TS_MIN, esc, ts8, unts8
from kstream.state.segments import META, SegmentedStore
from kstream.state.spec import StoreSpec
from store_backends.base import Backend

__all__ = [
    "PUT_RETURN_CODE_NOT_PUT",
    "PUT_RETURN_CODE_VALID_TO_UNDEFINED",
    "VersionedKeyValueStore",
    "VersionedRecord",
]

PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
"""`put` made the latest version (Kafka's `VersionedKeyValueStore` constant)."""
PUT_RETURN_CODE_NOT_PUT = TS_MIN
"""`put` was older than history retention and was dropped (Kafka's constant)."""

LATEST = META[:8] + b"latest"
"""Prefix of the latest versions: after every segment (purges never reach it), before META."""
_VALUE, _TOMBSTONE = b"\x01", b"\x00"


class VersionedRecord(NamedTuple):
    """A version of a key: its value, when it became valid, and until when (None: the latest)."""

    value: Any
    timestamp: int
    valid_to: int | None = None


class _Version(NamedTuple):
    """A stored version: raw value (None: tombstone), valid from, valid to (TS_MAX: latest)."""

    value: bytes | None
    valid_from: int
    valid_to: int


class VersionedKeyValueStore(SegmentedStore):
    """put(key, value, timestamp) / get(key[, as_of]) / delete(key, timestamp)."""

    kind = "versioned_key_value"
    READ_METHODS = SegmentedStore.READ_METHODS | {"get", "versions", "history_retention"}

    def __init__(
        self,
        spec: StoreSpec,
        backend: Backend,
        partition: int,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        super().__init__(spec, backend, partition, key_serde, value_serde)
        self._log: list[tuple[bytes, bytes, Source | None]] = []

    @property
    def history_retention(self) -> int:
        """How long (ms of stream time) versions older than the latest stay readable."""
        return self.retention

    # --- typed operations -----------------------------------------------------------------------

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Put `value` (None: a tombstone) valid from `timestamp`; returns when its validity
        ends, `PUT_RETURN_CODE_VALID_TO_UNDEFINED` (-1) for the latest version, or
        `PUT_RETURN_CODE_NOT_PUT` when `timestamp` is older than history retention."""
        kb = self._key(key)
        vb = None if value is None else self.value_serde.to_bytes(value)
        return self._put(kb, vb, int(timestamp), log=True)

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        """A tombstone at `timestamp`; returns the version valid at `timestamp` before it, or
        None (also when `timestamp` is older than history retention, when nothing is deleted)."""
        kb = self._key(key)
        if timestamp < self.live_from():
            return None
        existing = self._decoded(self._find(kb, timestamp))
        self._put(kb, None, int(timestamp), log=True)
        return existing

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord | None:
        """The latest version of `key`, or with `as_of_timestamp` the one valid then (None when
        there is none, or when that time is older than history retention and the latest
        version did not yet apply)."""
        kb = self._key(key)
        if as_of_timestamp is None:
            latest = self._latest(kb)
            return None if latest is None or latest.value is None else self._decoded(latest)
        return self._decoded(self._find(kb, as_of_timestamp))

    def versions(
        self,
        key: Any,
        from_time: int | None = None,
        to_time: int | None = None,
        ascending: bool = False,
    ) -> list[VersionedRecord]:
        """The versions of `key` valid at some time in [from_time, to_time] (None: unbounded),
        tombstones left out, newest first unless `ascending` (Kafka's `MultiVersionedKeyQuery`,
        KIP-968): a version that started at or before `to_time` and did not end at or before
        `from_time`. Versions past history retention are gone, as for `get`."""
        kb = self._key(key)
        lo = TS_MIN if from_time is None else int(from_time)
        hi = TS_MAX - 1 if to_time is None else int(to_time)
        found: list[_Version] = []
        latest = self._latest(kb)
        if latest is not None and latest.valid_from <= hi:
            found.append(latest)
        ek = esc(kb)
        # history versions are filed by the segment of their end (valid_to > lo)
        for seg in self._segments(lo + 1 if lo < TS_MAX else lo, TS_MAX):
            with_start = self._scan(seg + ek + ts8(TS_MIN), seg + ek + ts8(hi))
            try:
                for pkey, raw in with_start:
                    v = _history(pkey, raw)
                    if v.valid_to > lo and v.valid_to > self.live_from():
                        found.append(v)
            finally:
                close = getattr(with_start, "close", None)
                if close is not None:
                    close()
        found.sort(key=lambda v: v.valid_from, reverse=not ascending)
        return [r for r in map(self._decoded, found) if r is not None]

    def _key(self, key: Any) -> bytes:
        kb = self.key_serde.to_bytes(key)
        if kb is None:
            raise TypeError(f"store {self.name!r}: key must not be None")
        return kb

    def _decoded(self, v: _Version | None) -> VersionedRecord | None:
        if v is None or v.value is None:
            return None
        valid_to = None if v.valid_to == TS_MAX else v.valid_to
        return VersionedRecord(self.value_serde.from_bytes(v.value), v.valid_from, valid_to)

    # --- reads ----------------------------------------------------------------------------------

    def _latest(self, kb: bytes) -> _Version | None:
        raw = self._read(LATEST + kb)
        if raw is None:
            return None
        value = bytes(raw[9:]) if raw[8:9] == _VALUE else None
        return _Version(value, unts8(raw), TS_MAX)

    def _find(self, kb: bytes, t: int) -> _Version | None:
        """The version (tombstones included) valid at `t`, honouring history retention."""
        latest = self._latest(kb)
        if latest is not None and latest.valid_from <= t:
            return latest
        if t < self.live_from():
            return None
        return self._history_at(kb, t)

    def _history_at(self, kb: bytes, t: int) -> _Version | None:
        """The history version with valid_from <= t < valid_to (tombstones included)."""
        ek = esc(kb)
        for seg in self._segments(t + 1, TS_MAX):
            hit = self._first(seg + ek + ts8(TS_MIN), seg + ek + ts8(t), reverse=True)
            if hit is not None:
                version = _history(hit[0], hit[1])
                if version.valid_to > t:
                    return version
        return None

    def _next_start(self, kb: bytes, t: int, latest: _Version | None) -> int:
        """The smallest valid_from after `t` among the key's versions (there is one: the
        latest, or a tombstone latest, starts after `t` when this is called)."""
        ek = esc(kb)
        best = TS_MAX if latest is None else latest.valid_from
        for seg in self._segments(t + 1, TS_MAX):
            hit = self._first(seg + ek + ts8(t + 1), seg + ek + ts8(TS_MAX))
            if hit is not None:
                best = min(best, unts8(hit[0], len(hit[0]) - 8))
        return best

    def _first(self, lo: bytes, hi: bytes, reverse: bool = False) -> tuple[bytes, bytes] | None:
        it = self._scan(lo, hi, reverse)
        try:
            return next(it, None)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    # --- writes ---------------------------------------------------------------------------------

    def _put(self, kb: bytes, vb: bytes | None, t: int, *, log: bool) -> int:
        if t < self.live_from():
            return PUT_RETURN_CODE_NOT_PUT
        self._observe(t)
        if log:
            payload = ts8(t) + (_TOMBSTONE if vb is None else _VALUE + vb)
            ctx = self.context
            self._log.append((kb, payload, None if ctx is None else source_of(ctx.current)))
        latest = self._latest(kb)
        if latest is None or latest.valid_from <= t:
            if latest is not None and latest.valid_from < t:
                self._write_history(kb, _Version(latest.value, latest.valid_from, t))
            self._write_latest(kb, vb, t)
            return PUT_RETURN_CODE_VALID_TO_UNDEFINED
        old = self._history_at(kb, t)
        if old is None:  # before the key's first version
            valid_to = self._next_start(kb, t, latest)
        else:  # split the version `t` falls in (or replace it, at the same time)
            valid_to = old.valid_to
            self._write(self._history_key(kb, old), None)  # its key may change segment
            if old.valid_from < t:
                self._write_history(kb, _Version(old.value, old.valid_from, t))
        self._write_history(kb, _Version(vb, t, valid_to))
        return valid_to

    def _history_key(self, kb: bytes, v: _Version) -> bytes:
        return self.seg(v.valid_to) + esc(kb) + ts8(v.valid_from)

    def _write_history(self, kb: bytes, v: _Version) -> None:
        flagged = _TOMBSTONE if v.value is None else _VALUE + v.value
        self._write(self._history_key(kb, v), ts8(v.valid_to) + flagged)

    def _write_latest(self, kb: bytes, vb: bytes | None, t: int) -> None:
        self._write(LATEST + kb, ts8(t) + (_TOMBSTONE if vb is None else _VALUE + vb))

    # --- changelog, flush, restore --------------------------------------------------------------

    def pending_writes(self) -> Iterator[tuple[bytes, bytes | None, Source | None]]:
        """One changelog entry per put of the open transaction, in put order (a physical
        write is a layout detail: none is logged as it is)."""
        yield from self._log

    def _to_changelog(self, pkey: bytes, value: bytes | None) -> tuple[bytes, bytes | None] | None:
        return pkey, value  # pending_writes already yields logical (key, payload) pairs

    def changelog_timestamp(self, pkey: bytes, value: bytes | None) -> int:
        """None (-1): the record goes out with the producer's wall clock, not the put's time.

        The changelog is compacted, one record per key kept, and only `min.compaction.lag.ms`
        (history retention plus a day) keeps the older versions a restore needs. The broker
        measures that lag against the records' timestamps. Kafka's versioned store logs each
        put at its own time, so a version of event time older than the lag (a backfill, a
        replay, any input stamped days ago) is compacted away as soon as its segment rolls,
        and a segment of such records rolls at the first newer record (a transaction marker
        is one): a restore then lacks history that stream time still covers, and a
        stream-table join reads None (the grace-join crash test lost answers so). The put's
        time is in the payload, so the restore does not need it in the record; stamped with
        the time of writing, a version stays at least a day past history retention of wall
        clock, never less than with its own (past) time."""
        return -1

    def check_changelog(self, key: bytes, value: bytes | None) -> None:
        """Key: the key's bytes; value: 8-byte timestamp, flag, value bytes (see
        `StateStore.check_changelog`)."""
        self.key_serde.from_bytes(key)
        if value is None or len(value) < 9 or value[8:9] not in (_VALUE, _TOMBSTONE):
            raise ValueError("a versioned changelog value is timestamp (8 bytes), flag, value")
        if value[8:9] == _VALUE:
            self.value_serde.from_bytes(value[9:])

    def _extra_writes(self) -> Writes:
        out = list(super()._extra_writes())
        if self._purge_next > self._purged_below:
            # a segment went: latest tombstones it outlived say nothing a later put needs
            # (a put before them would be dropped as older than retention)
            live = self.live_from()
            with self.backend.prefix_scan(LATEST) as cur:
                for k, v in cur:
                    if v[8:9] == _TOMBSTONE and unts8(v) < live and k not in self._cache.data:
                        out.append((bytes(k), None))
        return out

    def _after_flush(self) -> None:
        super()._after_flush()
        self._log = []

    def _after_discard(self) -> None:
        super()._after_discard()
        self._log = []

    def apply_changelog(
        self, records: Iterable[tuple[bytes, bytes | None]], checkpoint: dict[str, Any] | None
    ) -> int:
        """Restore: replay each logged put (through the write cache, not logged again), then
        write the result with `checkpoint` in one batch."""
        if self._cache:
            raise StoreError(f"store {self.name!r}: cannot restore with pending writes")
        n = 0
        for key, value in records:
            n += 1
            if value is None:  # not written by this store; check_changelog refuses it
                continue
            vb = bytes(value[9:]) if value[8:9] == _VALUE else None
            self._put(bytes(key), vb, unts8(value), log=False)
        self.flush(checkpoint)
        return n


def _history(pkey: bytes, raw: bytes) -> _Version:
    value = bytes(raw[9:]) if raw[8:9] == _VALUE else None
    return _Version(value, unts8(pkey, len(pkey) - 8), unts8(raw))
