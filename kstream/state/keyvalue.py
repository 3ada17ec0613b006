"""The key-value store: user keys through the key serde, ordered by their encoded bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kstream.state.base import StateStore
from store_backends.base import Cursor, prefix_upper_bound


class KeyValueStore(StateStore):
    """get/put/delete/range over typed keys and values; reads see pending writes."""

    kind = "key_value"
    READ_METHODS = StateStore.READ_METHODS | {
        "get",
        "range",
        "prefix_scan",
        "all",
        "approximate_num_entries",
    }

    def get(self, key: Any) -> Any:
        kb: bytes = self.key_serde.to_bytes(key)  # type: ignore[assignment]
        data = self._cache.data
        vb = data[kb] if kb in data else self.backend.get(kb)
        return None if vb is None else self.value_serde.from_bytes(vb)

    def put(self, key: Any, value: Any) -> None:
        kb = self.key_serde.to_bytes(key)
        if kb is None:
            raise TypeError(f"store {self.name!r}: key must not be None")
        self._write(kb, None if value is None else self.value_serde.to_bytes(value))

    def put_if_absent(self, key: Any, value: Any) -> Any:
        """Put unless the key has a value; returns the existing value or None."""
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def delete(self, key: Any) -> Any:
        """Delete the key; returns the old value or None."""
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    def put_all(self, entries: Any) -> None:
        for k, v in entries:
            self.put(k, v)

    def _cursor(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Cursor:
        return Cursor(self._decode(self._scan(lo, hi, reverse)))

    def _decode(self, it: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        kde, vde = self.key_serde.from_bytes, self.value_serde.from_bytes
        try:
            for k, v in it:
                yield kde(k), vde(v)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def range(self, lo: Any = None, hi: Any = None, reverse: bool = False) -> Cursor:
        """Entries with lo <= key <= hi (None = open end), ascending by key bytes."""
        kser = self.key_serde.to_bytes
        lob = None if lo is None else kser(lo)
        hib = None if hi is None else kser(hi)
        return self._cursor(lob, hib, reverse)

    def reverse_range(self, lo: Any = None, hi: Any = None) -> Cursor:
        return self.range(lo, hi, reverse=True)

    def prefix_scan(self, prefix: Any) -> Cursor:
        """Entries whose encoded key starts with the encoded `prefix`.

        With the default serde a `str` prefix matches `str` keys that start with it; a `bytes`
        prefix is used as raw key bytes when the key serde is "bytes".
        """
        pb = self.key_serde.to_bytes(prefix)
        if pb is None:
            raise TypeError(f"store {self.name!r}: prefix must not be None")
        end = prefix_upper_bound(pb)
        it = self._scan(pb, end)
        if end is not None:
            it = (kv for kv in it if kv[0] != end)
        return Cursor(self._decode(it))

    def all(self) -> Cursor:
        return self._cursor(None, None)

    def approximate_num_entries(self) -> int:
        n = self.backend.approximate_num_entries()
        get = self.backend.get
        for k, v in self._cache.data.items():
            present = get(k) is not None
            if v is None and present:
                n -= 1
            elif v is not None and not present:
                n += 1
        return max(n, 0)
