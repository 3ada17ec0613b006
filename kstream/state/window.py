"""The window store: values per (key, window start), for windowed aggregates and joins.

Physical key: segment(start) + escaped key + start [+ 4-byte sequence with retain_duplicates].
The sequence makes every put a new entry (stream-stream joins keep all records of a window).
It is rolled back on discard, so a retried batch writes the same changelog keys as the try
that aborted, and those earlier records are overwritten on restore instead of duplicated.

A store whose value serde is a `TimestampedSerde` keeps, with each value, the largest timestamp
of the records aggregated into it (Kafka's `ValueAndTimestamp`: 8-byte timestamp, then the
value bytes). Windowed aggregations stamp their results with it, and it must survive a restart,
so it lives in the store. The plain reads (`get`, `fetch`, ...) still return bare values, so
interactive queries see the aggregates only; the `*_timestamped` methods return both.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterator
from typing import Any

from kstream.records import Windowed
from kstream.serde import Serde
from kstream.state.base import Writes
from kstream.state.keys import TERM, TS_MAX, TS_MIN, esc, seq4, ts8, unesc, unseq4, unts8
from kstream.state.keyvalue import ts_struct
from kstream.state.segments import SegmentedStore
from store_backends.base import Cursor, prefix_upper_bound

_IMMUTABLE_KEYS = frozenset({str, bytes, int})
_TS = struct.Struct(">q")


class TimestampedSerde(Serde):
    """Marks a window store as timestamped; (de)serializes `(value, timestamp)` pairs.

    The store unwraps it: plain reads decode with `inner`, timestamped reads also return the
    8-byte timestamp that precedes the value bytes.
    """

    def __init__(self, inner: Serde) -> None:
        self.inner = inner
        super().__init__(self._pack, self._unpack, f"timestamped({inner.name})")

    def _pack(self, pair: tuple[Any, int]) -> bytes:
        return _TS.pack(pair[1]) + (self.inner.to_bytes(pair[0]) or b"")

    def _unpack(self, data: bytes) -> tuple[Any, int]:
        return self.inner.from_bytes(bytes(data[8:])), _TS.unpack_from(data)[0]


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
    _ends: tuple[int, bytes, bytes] | None = None  # (start, segment prefix, start suffix)
    _plain: Callable[[bytes], Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        vs = self.value_serde
        self.timestamped = isinstance(vs, TimestampedSerde)
        both = None
        if isinstance(vs, TimestampedSerde):
            inner = self.value_serde = vs.inner
            inner_de = inner.from_bytes
            self._plain = lambda b: inner_de(bytes(b[8:]))
            both = ts_struct(inner)
        else:
            self._plain = vs.from_bytes
        # a fixed-width value (a sum, a count) with its timestamp: one struct call each way
        # (`put_timestamped`, `get_timestamped`); -1 / () when the value is not fixed-width
        self._both_size = -1 if both is None else both[0].size
        self._pack_both = None if both is None else both[0].pack
        self._unpack_both = None if both is None else both[0].unpack
        self._exact: tuple[type, ...] = () if both is None else both[1]
        # the key serde's C function where it takes the key (`_pkey`)
        self._kfast = self.key_serde.c_to_bytes or self.key_serde.to_bytes

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
        if value is None:
            self._write(pk, None)
        elif self.timestamped:
            # no record time given: the window's start is the best the store knows
            self._write(pk, _TS.pack(start) + (self.value_serde.to_bytes(value) or b""))
        else:
            self._write(pk, self.value_serde.to_bytes(value))

    def changelog_timestamp(self, pkey: bytes, value: bytes | None) -> int:
        """A timestamped window's own timestamp (the value's first 8 bytes, as Kafka's
        timestamped window stores log it); else the writing record's time."""
        if value is not None and self.timestamped and len(value) >= 8:
            return int(_TS.unpack_from(value)[0])
        return super().changelog_timestamp(pkey, value)

    def put_timestamped(self, key: Any, value: Any, timestamp: int, start: int) -> None:
        """Store `value` with the largest record `timestamp` of the window (timestamped stores).

        A windowed aggregation calls this and `get_timestamped` once per record and window:
        `_observe` and `live_from` are written out here rather than called.
        """
        observed = self.observed
        if start > observed:
            self.observed = observed = start
        live = observed - self.retention
        if start < (live if live > TS_MIN else TS_MIN):
            return
        vb: bytes | None = None
        if value.__class__ in self._exact:
            try:
                vb = self._pack_both(timestamp, value)  # type: ignore[misc]
            except (struct.error, OverflowError):
                pass  # out of range: the serde below says so
        if vb is None:
            data = self.value_serde.to_bytes(value)
            vb = None if data is None else _TS.pack(timestamp) + data
        memo = self._memo  # the key `get_timestamped` just encoded (`_pkey`'s memo, read here)
        if memo is not None and memo[0] is key and memo[1] == start:
            self._write(memo[2], vb)
        else:
            self._write(self._pkey(key, start), vb)

    def get_timestamped(self, key: Any, start: int) -> tuple[Any, int] | None:
        """`(value, timestamp)` of `key`'s window starting at `start`, or None."""
        live = self.observed - self.retention  # live_from(), written out (see put_timestamped)
        if start < (live if live > TS_MIN else TS_MIN):
            return None
        pk = self._pkey(key, start)
        pending = self._cache.data  # self._read(pk), written out
        data = pending[pk] if pk in pending else self.backend.get(pk)
        if data is None:
            return None
        if len(data) == self._both_size:
            ts, value = self._unpack_both(data)  # type: ignore[misc]
            return value, ts
        return self.value_serde.from_bytes(bytes(data[8:])), _TS.unpack_from(data)[0]

    @property
    def timestamped_width(self) -> int:
        """Bytes of every stored (timestamp, value) when the aggregate's serde is fixed-width;
        -1 when it is not (or the store is not timestamped)."""
        return self._both_size

    def encode_timestamped(self, value: Any, timestamp: int) -> bytes | None:
        """The bytes `put_timestamped` stores for `value` and `timestamp` (None: a delete),
        raising what it raises; for a fold that writes a window once after several steps
        (kstream.state.window_fold) and must see each step's value as the store would."""
        if value.__class__ in self._exact:
            try:
                return self._pack_both(timestamp, value)  # type: ignore[misc]
            except (struct.error, OverflowError):
                pass  # out of range: the serde below says so
        data = self.value_serde.to_bytes(value)
        return None if data is None else _TS.pack(timestamp) + data

    def read_timestamped(self, pkey: bytes) -> tuple[Any, int] | None:
        """`get_timestamped` by the store key `_pkey` made, for a caller that checked the
        window is inside retention (kstream.state.window_fold)."""
        pending = self._cache.data
        data = pending[pkey] if pkey in pending else self.backend.get(pkey)
        return None if data is None else self.decode_timestamped(data)

    def put_encoded(self, pkey: bytes, start: int, data: bytes | None) -> None:
        """The write `put_timestamped` makes, by the store key `_pkey` made and the bytes
        `encode_timestamped` made, for a caller that checked the window is inside retention
        (kstream.state.window_fold)."""
        if start > self.observed:
            self.observed = start
        self._write(pkey, data)

    def decode_timestamped(self, data: bytes) -> tuple[Any, int]:
        """`(value, timestamp)` as `get_timestamped` returns stored `data`."""
        if len(data) == self._both_size:
            ts, value = self._unpack_both(data)  # type: ignore[misc]
            return value, ts
        return self.value_serde.from_bytes(bytes(data[8:])), _TS.unpack_from(data)[0]

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
        return None if data is None else self._plain(data)

    def _pkey(self, key: Any, start: int) -> bytes:
        """The physical key of (key, start), without the duplicate sequence.

        An aggregation gets a window and then puts it: the last key computed is remembered
        (for immutable keys, matched by identity) so the put does not encode it again.
        """
        memo = self._memo
        if memo is not None and memo[0] is key and memo[1] == start:
            return memo[2]
        try:
            kb = self._kfast(key)
        except Exception:
            kb = self.key_serde.to_bytes(key)  # the serde's own error, or its bytes
        if kb is None:
            raise TypeError(f"store {self.name!r}: key must not be None")
        # the records of a batch fall into few windows: keep the last start's two encodings
        ends = self._ends
        if ends is None or ends[0] != start:
            ends = self._ends = (start, self.seg(start), ts8(start))
        pk = ends[1] + kb.replace(b"\x00", b"\x00\xff") + TERM + ends[2]  # esc(kb), inlined
        if type(key) in _IMMUTABLE_KEYS:
            self._memo = (key, start, pk)
        return pk

    def fetch(self, key: Any, time_from: int = TS_MIN, time_to: int = TS_MAX) -> Cursor:
        """Cursor of (start, value) for `key` with time_from <= start <= time_to, ascending."""
        return self._fetch(key, time_from, time_to, self._plain)

    def fetch_timestamped(
        self, key: Any, time_from: int = TS_MIN, time_to: int = TS_MAX
    ) -> list[tuple[int, Any, int]]:
        """`(start, value, timestamp)` of `key`'s windows in [time_from, time_to], ascending."""
        de = self.value_serde.from_bytes
        with self._fetch(key, time_from, time_to, bytes) as cur:
            return [(start, de(b[8:]), _TS.unpack_from(b)[0]) for start, b in cur]

    def _fetch(self, key: Any, time_from: int, time_to: int, vde: Callable[[bytes], Any]) -> Cursor:
        kb = self.key_serde.to_bytes(key)
        ek = esc(kb)  # type: ignore[arg-type]
        lo_t = max(time_from, self.live_from())
        tail = b"\xff" * 4 if self.spec.retain_duplicates else b""
        its: list[Iterator[tuple[bytes, bytes]]] = []
        for sp in self._segments(time_from, time_to):
            its.append(self._scan(sp + ek + ts8(lo_t), sp + ek + ts8(time_to) + tail))
        at = 8 + len(ek)

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
        return self._fetch_range(key_from, key_to, time_from, time_to, self._plain)

    def fetch_all_timestamped(
        self, time_from: int = TS_MIN, time_to: int = TS_MAX
    ) -> list[tuple[Windowed, Any, int]]:
        """`(Windowed, value, timestamp)` of every window starting in [time_from, time_to]."""
        de = self.value_serde.from_bytes
        with self._fetch_range(None, None, time_from, time_to, bytes) as cur:
            return [(w, de(b[8:]), _TS.unpack_from(b)[0]) for w, b in cur]

    def _fetch_range(
        self,
        key_from: Any,
        key_to: Any,
        time_from: int,
        time_to: int,
        vde: Callable[[bytes], Any],
    ) -> Cursor:
        kser = self.key_serde.to_bytes
        lo_k = None if key_from is None else kser(key_from)
        hi_k = None if key_to is None else kser(key_to)
        lo_t = max(time_from, self.live_from())
        its: list[Iterator[tuple[bytes, bytes]]] = []
        for sp in self._segments(time_from, time_to):
            lo = sp + (b"" if lo_k is None else esc(lo_k))
            hi = prefix_upper_bound(sp) if hi_k is None else sp + esc(hi_k) + b"\xff" * 12
            its.append(self._scan(lo, hi))
        kde, size = self.key_serde.from_bytes, self.window_size

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

    def check_changelog(self, key: bytes, value: bytes | None) -> None:
        """Key: escaped key + 8-byte start (+ 4-byte sequence with retain_duplicates); value:
        [8-byte timestamp +] the value serde's bytes (see `StateStore.check_changelog`)."""
        kb, at = unesc(key)
        sizes = (at + 8, at + 12) if self.spec.retain_duplicates else (at + 8,)
        if len(key) not in sizes:
            raise ValueError(
                f"window key of {len(key)} bytes, expected {' or '.join(map(str, sizes))}"
            )
        self.key_serde.from_bytes(kb)
        if value is None:
            return
        if self.timestamped:
            if len(value) < 8:
                raise ValueError(f"timestamped window value of {len(value)} bytes, expected 8+")
            value = bytes(value[8:])
        self.value_serde.from_bytes(value)

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
