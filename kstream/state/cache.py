"""The per-task write cache: pending writes that reads must see before they reach the backend.

Writes stay here until the transaction that produced their changelog records commits; then the
whole cache goes to the backend in one atomic `write_batch`. On abort it is simply dropped, so
local state never holds uncommitted data.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from itertools import islice
from typing import Any

from store_backends.base import Cursor

_MISSING: Any = object()


class WriteCache:
    """Pending physical writes (`None` = delete) with a lazily sorted key list for scans.

    A key once written stays until `clear` (a delete is a None value), so the dict's keys
    are in first-write order and the ones the sorted list lacks are its last ones: a write
    is one dict store (`put`, which `StateStore._write` writes out), and a scan sorts in
    what came since the previous scan."""

    __slots__ = ("_index", "_indexed", "data")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes | None] = {}
        self._index: list[bytes] = []
        self._indexed = 0  # how many of `data`'s first keys `_index` holds

    def __len__(self) -> int:
        return len(self.data)

    def __bool__(self) -> bool:
        return bool(self.data)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.data[key] = value

    def clear(self) -> None:
        self.data = {}
        self._index = []
        self._indexed = 0

    def _sorted(self) -> list[bytes]:
        data = self.data
        added = len(data) - self._indexed
        if added:
            if added > 32 + len(self._index) // 16:
                self._index = sorted(data)
            else:
                for k in islice(data, self._indexed, None):
                    insort(self._index, k)
            self._indexed = len(data)
        return self._index

    def keys_between(self, lo: bytes | None, hi: bytes | None) -> list[bytes]:
        """Pending keys in [lo, hi] ascending (None = open end)."""
        if not self.data:
            return []
        idx = self._sorted()
        i = 0 if lo is None else bisect_left(idx, lo)
        j = len(idx) if hi is None else bisect_right(idx, hi)
        return idx[i:j]


def merged(
    base: Cursor, cache: WriteCache, lo: bytes | None, hi: bytes | None, reverse: bool = False
) -> Iterator[tuple[bytes, bytes]]:
    """Backend entries in [lo, hi] overlaid with pending writes, in key order.

    Pending values win; pending deletes hide the backend entry.
    """
    pending = cache.keys_between(lo, hi)
    if not pending:
        yield from base
        return
    data = cache.data
    if reverse:
        pending.reverse()
    pi, pn = 0, len(pending)
    with base:
        for k, v in base:
            while pi < pn and (pending[pi] > k if reverse else pending[pi] < k):
                pk = pending[pi]
                pv = data.get(pk, _MISSING)
                pi += 1
                if pv is not None and pv is not _MISSING:
                    yield pk, pv
            if pi < pn and pending[pi] == k:
                pv = data.get(k, _MISSING)
                pi += 1
                if pv is _MISSING:
                    yield k, v
                elif pv is not None:
                    yield k, pv
                continue
            if k in data:
                pv = data[k]
                if pv is not None:
                    yield k, pv
                continue
            yield k, v
        while pi < pn:
            pk = pending[pi]
            pv = data.get(pk, _MISSING)
            pi += 1
            if pv is not None and pv is not _MISSING:
                yield pk, pv
