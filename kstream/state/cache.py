"""The per-task write cache: pending writes that reads must see before they reach the backend.

Writes stay here until the transaction that produced their changelog records commits; then the
whole cache goes to the backend in one atomic `write_batch`. On abort it is simply dropped, so
local state never holds uncommitted data.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Any

from store_backends.base import Cursor

_MISSING: Any = object()


class WriteCache:
    """Pending physical writes (`None` = delete) with a lazily sorted key list for scans."""

    __slots__ = ("_added", "_index", "_rebuild", "data")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes | None] = {}
        self._index: list[bytes] = []
        self._added: list[bytes] = []
        self._rebuild = False

    def __len__(self) -> int:
        return len(self.data)

    def __bool__(self) -> bool:
        return bool(self.data)

    def put(self, key: bytes, value: bytes | None) -> None:
        data = self.data
        if key not in data:
            self._added.append(key)
        data[key] = value

    def clear(self) -> None:
        self.data = {}
        self._index = []
        self._added = []
        self._rebuild = False

    def _sorted(self) -> list[bytes]:
        if self._rebuild or len(self._added) > 32 + len(self._index) // 16:
            self._index = sorted(self.data)
        elif self._added:
            for k in self._added:
                insort(self._index, k)
        self._added = []
        self._rebuild = False
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
