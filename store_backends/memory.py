"""In-process ordered map: the default backend, and the reference the others are tested against.

Point reads and writes are one dict operation. The sorted key index used by scans is kept
lazily: new keys are collected and merged in at the next scan, so a put-heavy batch pays the
sorting cost once instead of per put.
"""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from typing import Any

from kstream.errors import StoreError
from store_backends.base import Cursor, check_bytes, prefix_upper_bound


class MemoryBackend:
    """A dict plus a lazily maintained sorted key list. Nothing survives `close()`."""

    def __init__(self, name: str = "store", partition: int = 0) -> None:
        self.name = name
        self.partition = partition
        self._data: dict[bytes, bytes] = {}
        self._index: list[bytes] = []
        self._added: list[bytes] = []
        self._rebuild = False
        self._checkpoint: dict[str, Any] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryBackend(name={self.name!r}, partition={self.partition})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"memory backend {self.name!r}/{self.partition} is closed")

    # --- point operations ----------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        if self._closed:
            self._check_open()
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._check_open()
        check_bytes("key", key)
        check_bytes("value", value)
        self._put(key, value)

    def _put(self, key: bytes, value: bytes) -> None:
        data = self._data
        if key not in data:
            self._added.append(key)
        data[key] = value

    def delete(self, key: bytes) -> None:
        self._check_open()
        self._delete(key)

    def _delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is None:
            return
        if self._added or self._rebuild:
            self._rebuild = True
            return
        idx = self._index
        i = bisect_left(idx, key)
        del idx[i]

    def write_batch(
        self,
        puts: dict[bytes, bytes],
        deletes: Iterable[bytes],
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        self._check_open()
        deletes = list(deletes)
        # Validate everything first: a batch is all or nothing.
        for k, v in puts.items():
            check_bytes("key", k)
            check_bytes("value", v)
        for k in deletes:
            check_bytes("key", k)
        cp = copy.deepcopy(checkpoint) if checkpoint is not None else None
        for k in deletes:
            self._delete(k)
        for k, v in puts.items():
            self._put(k, v)
        if cp is not None:
            self._checkpoint = cp

    # --- scans ---------------------------------------------------------------------------------

    def _sorted(self) -> list[bytes]:
        if self._rebuild or len(self._added) > 32 + len(self._index) // 16:
            self._index = sorted(self._data)
        elif self._added:
            idx = self._index
            for k in self._added:
                insort(idx, k)
        self._added = []
        self._rebuild = False
        return self._index

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Cursor:
        self._check_open()
        idx = self._sorted()
        i = 0 if lo is None else bisect_left(idx, lo)
        j = len(idx) if hi is None else bisect_right(idx, hi)
        keys = idx[i:j]
        if reverse:
            keys.reverse()
        return Cursor(self._iter(keys))

    def _iter(self, keys: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
        data = self._data
        for k in keys:
            v = data.get(k)
            if v is not None:
                yield k, v

    def prefix_scan(self, prefix: bytes) -> Cursor:
        self._check_open()
        idx = self._sorted()
        i = bisect_left(idx, prefix)
        end = prefix_upper_bound(prefix)
        j = len(idx) if end is None else bisect_left(idx, end)
        return Cursor(self._iter(idx[i:j]))

    # --- lifecycle -----------------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        self._check_open()
        return copy.deepcopy(self._checkpoint)

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def close(self) -> None:
        self._closed = True

    def destroy(self) -> None:
        self._data.clear()
        self._index = []
        self._added = []
        self._rebuild = False
        self._checkpoint = {}
        self._closed = True


def open_url(
    url: str,
    *,
    name: str = "store",
    partition: int = 0,
    state_dir: str | None = None,
    namespace: str = "",
) -> MemoryBackend:
    """Registry factory for `memory://` (the URL carries no options)."""
    return MemoryBackend(name, partition)
