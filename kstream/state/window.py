"""The window store: values per (key, window start), for windowed aggregates and joins.

Physical key: segment(start) + escaped key + start [+ 4-byte sequence with retain_duplicates].
The sequence makes every put a new entry (stream-stream joins keep all records of a window).
It is rolled back on discard, so a retried batch writes the same changelog keys as the try
that aborted, and those earlier records are overwritten on restore instead of duplicated.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from kstream.records import Windowed
from kstream.state.base import Writes
from kstream.state.keys import TS_MAX, TS_MIN, esc, seq4, ts8, unesc, unseq4, unts8
from kstream.state.segments import SegmentedStore
from store_backends.base import Cursor, prefix_upper_bound

_IMMUTABLE_KEYS = frozenset({str, bytes, int})


class WindowStore(SegmentedStore):
    """put(key, value, start) / fetch(key, t_from, t_to) over retained windows."""

    kind = "window"
    READ_METHODS = SegmentedStore.READ_METHODS | {
        "get",
        "fetch",
        "fetch_range",
        "all",
        "fetch_all",
    }

    _memo: tuple[Any, int, bytes] | None = None

    @property
    def window_size(self) -> int:
        return self.spec.window_size or 0

    def put(self, key: Any, value: Any, start: int) -> None:
        """Store `value` for the window of `key` starting at `start` (None deletes).

        With retain_duplicates every non-None put adds an entry and None is ignored. Puts
        older than retention (relative to the newest start seen) are dropped.
        """
        self._observe(start)
        if start < self.live_from():
            return
        pk = self._pkey(key, start)
        if self.spec.retain_duplicates:
            if value is None:
                return
            self._seq = (self._seq + 1) & 0xFFFFFFFF
            pk += seq4(self._seq)
        self._write(pk, None if value is None else self.value_serde.to_bytes(value))

    def get(self, key: Any, start: int) -> Any:
        """The value of `key`'s window starting at `start` (None if absent or expired).

        One point lookup instead of a scan; with retain_duplicates, the last of the window's
        entries (as `fetch` would end with).
        """
        if self.spec.retain_duplicates:
            found = None
            with self.fetch(key, start, start) as cur:
                for _, v in cur:
                    found = v
            return found
        if start < self.live_from():
            return None
        data = self._read(self._pkey(key, start))
        return None if data is None else self.value_serde.from_bytes(data)

    def _pkey(self, key: Any, start: int) -> bytes:
        """The physical key of (key, start), without the duplicate sequence.

        An aggregation gets a window and then puts it: the last key computed is remembered
        (for immutable keys, matched by identity) so the put does not encode it again.
        """
        memo = self._memo
        if memo is not None and memo[0] is key and memo[1] == start:
            return memo[2]
        kb = self.key_serde.to_bytes(key)
        if kb is None:
            raise TypeError(f"store {self.name!r}: key must not be None")
        pk = self.seg(start) + esc(kb) + ts8(start)
        if type(key) in _IMMUTABLE_KEYS:
            self._memo = (key, start, pk)
        return pk

    def fetch(self, key: Any, time_from: int = TS_MIN, time_to: int = TS_MAX) -> Cursor:
        """Cursor of (start, value) for `key` with time_from <= start <= time_to, ascending."""
        kb = self.key_serde.to_bytes(key)
        ek = esc(kb)  # type: ignore[arg-type]
        lo_t = max(time_from, self.live_from())
        tail = b"\xff" * 4 if self.spec.retain_duplicates else b""
        its: list[Iterator[tuple[bytes, bytes]]] = []
        for sp in self._segments(time_from, time_to):
            its.append(self._scan(sp + ek + ts8(lo_t), sp + ek + ts8(time_to) + tail))
        at = 8 + len(ek)
        vde = self.value_serde.from_bytes

        def gen() -> Iterator[tuple[int, Any]]:
            try:
                for it in its:
                    for pk, v in it:
                        yield unts8(pk, at), vde(v)
            finally:
                _close_all(its)

        return Cursor(gen())

    def backward_fetch(self, key: Any, time_from: int = TS_MIN, time_to: int = TS_MAX) -> Cursor:
        with self.fetch(key, time_from, time_to) as cur:
            items = list(cur)
        items.reverse()
        return Cursor(iter(items))

    def fetch_range(
        self,
        key_from: Any = None,
        key_to: Any = None,
        time_from: int = TS_MIN,
        time_to: int = TS_MAX,
    ) -> Cursor:
        """Cursor of (Windowed, value) for keys in [key_from, key_to] (None = open) and window
        starts in [time_from, time_to], ordered by key bytes then start."""
        kser = self.key_serde.to_bytes
        lo_k = None if key_from is None else kser(key_from)
        hi_k = None if key_to is None else kser(key_to)
        lo_t = max(time_from, self.live_from())
        its: list[Iterator[tuple[bytes, bytes]]] = []
        for sp in self._segments(time_from, time_to):
            lo = sp + (b"" if lo_k is None else esc(lo_k))
            hi = prefix_upper_bound(sp) if hi_k is None else sp + esc(hi_k) + b"\xff" * 12
            its.append(self._scan(lo, hi))
        kde, vde, size = self.key_serde.from_bytes, self.value_serde.from_bytes, self.window_size

        def decode(it: Iterator[tuple[bytes, bytes]], sp: bytes) -> Iterator[tuple[bytes, Any]]:
            for pk, v in it:
                if not pk.startswith(sp):
                    continue
                kb, at = unesc(pk, 8)
                if (lo_k is not None and kb < lo_k) or (hi_k is not None and kb > hi_k):
                    continue
                start = unts8(pk, at)
                if lo_t <= start <= time_to:
                    yield pk[8:], (kb, start, v)

        segs = self._segments(time_from, time_to)

        def gen() -> Iterator[tuple[Windowed, Any]]:
            try:
                for _, (kb, start, v) in heapq.merge(
                    *(decode(it, sp) for it, sp in zip(its, segs, strict=True)),
                    key=lambda e: e[0],
                ):
                    yield Windowed(kde(kb), start, start + size), vde(v)
            finally:
                _close_all(its)

        return Cursor(gen())

    def fetch_all(self, time_from: int = TS_MIN, time_to: int = TS_MAX) -> Cursor:
        return self.fetch_range(None, None, time_from, time_to)

    def all(self) -> Cursor:
        return self.fetch_range(None, None, TS_MIN, TS_MAX)

    # --- changelog ------------------------------------------------------------------------------

    def _to_changelog(self, pkey: bytes, value: bytes | None) -> tuple[bytes, bytes | None] | None:
        return pkey[8:], value

    def _from_changelog(self, key: bytes, value: bytes | None) -> Writes:
        _, at = unesc(key)
        start = unts8(key, at)
        self._observe(start)
        if self.spec.retain_duplicates and len(key) >= at + 12:
            seq = unseq4(key, at + 8)
            if seq > self._seq:
                self._seq = seq
        return ((self.seg(start) + key, value),)


def _close_all(its: list[Iterator[Any]]) -> None:
    for it in its:
        close = getattr(it, "close", None)
        if close is not None:
            close()
