"""The dedup store: id -> first-seen time, forgetting ids once they leave retention.

Physical key: segment(first seen) + id bytes, value: first-seen time. A lookup probes the few
live segments (retention / segment interval + 1 point reads) instead of keeping a separate
time index that every insert would have to write too.
"""

from __future__ import annotations

from typing import Any

from kstream.state.base import Writes
from kstream.state.keys import ts8, unts8
from kstream.state.segments import SegmentedStore


class DedupStore(SegmentedStore):
    """check_and_mark(id, timestamp) -> True for an id not seen within retention."""

    kind = "dedup"
    READ_METHODS = SegmentedStore.READ_METHODS | {"contains", "first_seen"}

    def first_seen(self, id_: Any) -> int | None:
        """When `id_` was first seen, if that is still inside retention."""
        ib = self.key_serde.to_bytes(id_)
        if ib is None:
            raise TypeError(f"store {self.name!r}: id must not be None")
        return self._first_seen(ib)

    def _first_seen(self, ib: bytes) -> int | None:
        live = self.live_from()
        segs = self._segments(live, self.observed)
        for sp in reversed(segs):
            v = self._read(sp + ib)
            if v is not None:
                t = unts8(v)
                if t >= live:
                    return t
        return None

    def contains(self, id_: Any) -> bool:
        return self.first_seen(id_) is not None

    def check_and_mark(self, id_: Any, timestamp: int) -> bool:
        """True when `id_` is new (and records `timestamp` as its first-seen time); False when
        it was already seen within retention of the newest timestamp observed."""
        ib = self.key_serde.to_bytes(id_)
        if ib is None:
            raise TypeError(f"store {self.name!r}: id must not be None")
        self._observe(timestamp)
        if self._first_seen(ib) is not None:
            return False
        if timestamp >= self.live_from():
            self._write(self.seg(timestamp) + ib, ts8(timestamp))
        return True

    def _to_changelog(self, pkey: bytes, value: bytes | None) -> tuple[bytes, bytes | None] | None:
        return pkey[8:], value

    def check_changelog(self, key: bytes, value: bytes | None) -> None:
        """Key: the id's bytes; value: the 8-byte first-seen time (see
        `StateStore.check_changelog`)."""
        self.key_serde.from_bytes(key)
        if value is not None and len(value) != 8:
            raise ValueError(f"first-seen time of {len(value)} bytes, expected 8")

    def _from_changelog(self, key: bytes, value: bytes | None) -> Writes:
        if value is None:
            return ()
        t = unts8(value)
        self._observe(t)
        return ((self.seg(t) + key, value),)
