"""A bounded in-memory backend that forgets the least recently used entries.

What an eviction means: the entry disappears from local state only. No tombstone is written to
the changelog, so the changelog still holds the value, and a restore brings it back (and then
evicts again once the bound is hit). A store on this backend is therefore a cache: use it where
a missing key can be recomputed or looked up again, never for aggregates that must be exact.
The checkpoint is never evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kstream.errors import ConfigError
from store_backends.memory import MemoryBackend


class LRUBackend(MemoryBackend):
    """`MemoryBackend` with at most `max_entries` entries; reads and writes refresh recency."""

    def __init__(self, max_entries: int, name: str = "store", partition: int = 0) -> None:
        if max_entries <= 0:
            raise ConfigError(f"lru backend {name!r}: max_entries must be > 0, got {max_entries}")
        super().__init__(name, partition)
        self.max_entries = max_entries
        self._data: OrderedDict[bytes, bytes] = OrderedDict()
        self.evictions = 0

    def __repr__(self) -> str:
        return f"LRUBackend(name={self.name!r}, partition={self.partition}, max={self.max_entries})"

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        v = self._data.get(key)
        if v is not None:
            self._data.move_to_end(key)
        return v

    def _put(self, key: bytes, value: bytes) -> None:
        data = self._data
        if key in data:
            data.move_to_end(key)
        else:
            self._added.append(key)
        data[key] = value
        while len(data) > self.max_entries:
            data.popitem(last=False)
            self._rebuild = True
            self.evictions += 1

    def destroy(self) -> None:
        super().destroy()
        self._data = OrderedDict()


def open_url(
    url: str,
    *,
    name: str = "store",
    partition: int = 0,
    state_dir: str | None = None,
    namespace: str = "",
) -> LRUBackend:
    """Registry factory for `lru://?max_entries=N` (default 10000)."""
    query: dict[str, Any] = parse_qs(urlsplit(url).query)
    raw = query.get("max_entries", ["10000"])[-1]
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"lru backend URL {url!r}: max_entries must be an integer") from None
    return LRUBackend(n, name, partition)
