"""The session store: one aggregate per (key, session start, session end).

Physical key: segment(end) + escaped key + end + start, so sessions that may still merge with
a new record (recent ends) are found by scanning forward from the earliest end of interest.
Retention is by session end.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from kstream.records import Windowed
from kstream.state.base import Writes
from kstream.state.keys import TS_MAX, TS_MIN, esc, ts8, unesc, unts8
from kstream.state.segments import SegmentedStore
from store_backends.base import Cursor, prefix_upper_bound


class SessionStore(SegmentedStore):
    """find_sessions / put / remove over sessions still inside retention."""

    kind = "session"
    READ_METHODS = SegmentedStore.READ_METHODS | {"find_sessions", "fetch", "fetch_range", "all"}

    def _pkey(self, w: Windowed) -> bytes:
        kb = self.key_serde.to_bytes(w.key)
        if kb is None:
            raise TypeError(f"store {self.name!r}: session key must not be None")
        return self.seg(w.end) + esc(kb) + ts8(w.end) + ts8(w.start)

    def put(self, session: Windowed, agg: Any) -> None:
        """Store the aggregate of `session` (a `Windowed(key, start, end)`); None removes it."""
        if session.end < session.start:
            raise ValueError(f"store {self.name!r}: session end {session.end} < start")
        self._observe(session.end)
        if session.end < self.live_from():
            return
        self._write(self._pkey(session), None if agg is None else self.value_serde.to_bytes(agg))

    def remove(self, session: Windowed) -> None:
        self._write(self._pkey(session), None)

    def find_sessions(
        self, key: Any, earliest_end: int = TS_MIN, latest_start: int = TS_MAX
    ) -> Cursor:
        """Sessions of `key` with end >= earliest_end and start <= latest_start, by start.

        As in Kafka Streams' session stores, a session whose end is `retention` or more
        behind the newest session end is no longer found (so a session aggregation cannot
        merge into it, even where its grace would still accept the record).
        """
        kb = self.key_serde.to_bytes(key)
        ek = esc(kb)  # type: ignore[arg-type]
        lo_end = max(earliest_end, self.live_from() + 1)
        found: list[tuple[int, int, bytes]] = []
        at = 8 + len(ek)
        for sp in self._segments(earliest_end, TS_MAX):
            with _closing(self._scan(sp + ek + ts8(lo_end), sp + ek + b"\xff" * 16)) as it:
                for pk, v in it:
                    start = unts8(pk, at + 8)
                    if start <= latest_start:
                        found.append((start, unts8(pk, at), v))
        found.sort(key=lambda e: (e[0], e[1]))
        vde = self.value_serde.from_bytes
        return Cursor(iter([(Windowed(key, s, e), vde(v)) for s, e, v in found]))

    def fetch(self, key: Any) -> Cursor:
        """Every retained session of `key`, by start."""
        return self.find_sessions(key, TS_MIN, TS_MAX)

    def fetch_range(self, key_from: Any = None, key_to: Any = None) -> Cursor:
        """Sessions of keys in [key_from, key_to] (None = open), by key bytes, end, start."""
        kser = self.key_serde.to_bytes
        lo_k = None if key_from is None else kser(key_from)
        hi_k = None if key_to is None else kser(key_to)
        segs = self._segments(TS_MIN, TS_MAX)
        its: list[Iterator[tuple[bytes, bytes]]] = []
        for sp in segs:
            lo = sp + (b"" if lo_k is None else esc(lo_k))
            hi = prefix_upper_bound(sp) if hi_k is None else sp + esc(hi_k) + b"\xff" * 16
            its.append(self._scan(lo, hi))
        live = self.live_from()
        kde, vde = self.key_serde.from_bytes, self.value_serde.from_bytes

        def decode(it: Iterator[tuple[bytes, bytes]], sp: bytes) -> Iterator[tuple[bytes, Any]]:
            for pk, v in it:
                if not pk.startswith(sp):
                    continue
                kb, at = unesc(pk, 8)
                if (lo_k is not None and kb < lo_k) or (hi_k is not None and kb > hi_k):
                    continue
                end = unts8(pk, at)
                if end >= live:
                    yield pk[8:], (kb, unts8(pk, at + 8), end, v)

        def gen() -> Iterator[tuple[Windowed, Any]]:
            try:
                for _, (kb, s, e, v) in heapq.merge(
                    *(decode(it, sp) for it, sp in zip(its, segs, strict=True)),
                    key=lambda x: x[0],
                ):
                    yield Windowed(kde(kb), s, e), vde(v)
            finally:
                for it in its:
                    close = getattr(it, "close", None)
                    if close is not None:
                        close()

        return Cursor(gen())

    def all(self) -> Cursor:
        return self.fetch_range(None, None)

    # --- changelog ------------------------------------------------------------------------------

    def _to_changelog(self, pkey: bytes, value: bytes | None) -> tuple[bytes, bytes | None] | None:
        return pkey[8:], value

    def check_changelog(self, key: bytes, value: bytes | None) -> None:
        """Key: escaped key + 8-byte end + 8-byte start; value: the aggregate's bytes (see
        `StateStore.check_changelog`)."""
        kb, at = unesc(key)
        if len(key) != at + 16:
            raise ValueError(f"session key of {len(key)} bytes, expected {at + 16}")
        if unts8(key, at) < unts8(key, at + 8):
            raise ValueError("session key whose end is before its start")
        self.key_serde.from_bytes(kb)
        if value is not None:
            self.value_serde.from_bytes(value)

    def _from_changelog(self, key: bytes, value: bytes | None) -> Writes:
        _, at = unesc(key)
        end = unts8(key, at)
        self._observe(end)
        return ((self.seg(end) + key, value),)


class _closing:
    """Close a generator on exit (contextlib.closing without its typing friction)."""

    def __init__(self, it: Iterator[tuple[bytes, bytes]]) -> None:
        self.it = it

    def __enter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self.it

    def __exit__(self, *exc: object) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()
