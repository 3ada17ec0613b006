"""Time-segmented layout shared by the window, session and dedup stores.

Physical keys start with an 8-byte segment id (time // segment_interval), so expiring old data
is one range delete of whole segments at flush time instead of a per-entry time index. Reads
also filter by time, so an expired entry is never returned even before its segment goes.
The changelog carries keys without the segment prefix: the layout can change without making
old changelogs unreadable.

Per-store metadata (observed stream time, duplicate sequence) lives under `META`, after every
segment, and is written with each flush but never logged: restore recomputes it from the
records it applies.
"""

from __future__ import annotations

import orjson

from kstream.errors import StoreCorruptedError
from kstream.serde import Serde
from kstream.state.base import StateStore, Writes
from kstream.state.keys import TS_MIN, ts8
from kstream.state.spec import StoreSpec
from store_backends.base import Backend

META = b"\xff" * 8 + b"meta"


class SegmentedStore(StateStore):
    """Base of time-bounded stores: observed stream time, retention, segment expiry."""

    def __init__(
        self,
        spec: StoreSpec,
        backend: Backend,
        partition: int,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        super().__init__(spec, backend, partition, key_serde, value_serde)
        self.retention: int = spec.retention or 0
        self.interval: int = spec.effective_segment_interval()
        self.observed: int = TS_MIN
        self._seq = 0
        raw = backend.get(META)
        if raw is not None:
            try:
                meta = orjson.loads(raw)
                self.observed = int(meta["observed"])
                self._seq = int(meta.get("seq", 0))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise StoreCorruptedError(
                    f"store {self.name!r} partition {partition}: unreadable metadata {raw[:80]!r}"
                ) from e
        self._flushed = (self.observed, self._seq)
        self._purged_below = TS_MIN
        self._purge_next = TS_MIN

    def seg(self, t: int) -> bytes:
        return ts8(t // self.interval)

    def live_from(self) -> int:
        """The oldest time still inside retention (entries older are expired)."""
        t = self.observed - self.retention
        return t if t > TS_MIN else TS_MIN

    def _observe(self, t: int) -> None:
        if t > self.observed:
            self.observed = t

    def _segments(self, t_from: int, t_to: int) -> list[bytes]:
        """Segment prefixes covering [t_from, t_to], clamped to the live range."""
        lo = max(t_from, self.live_from())
        hi = min(t_to, self.observed)
        if self.observed == TS_MIN or lo > hi:
            return []
        first, last = lo // self.interval, hi // self.interval
        return [ts8(s) for s in range(first, last + 1)]

    def _extra_writes(self) -> Writes:
        out: list[tuple[bytes, bytes | None]] = []
        if (self.observed, self._seq) != self._flushed:
            out.append((META, orjson.dumps({"observed": self.observed, "seq": self._seq})))
        live = self.live_from()
        if live != TS_MIN:
            cut_seg = live // self.interval
            if cut_seg > self._purged_below:
                cut = ts8(cut_seg)
                with self.backend.range(None, cut) as cur:
                    out.extend((k, None) for k, _ in cur if k < cut)
                for k in self._cache.keys_between(None, cut):
                    if k < cut:
                        out.append((k, None))
                self._purge_next = cut_seg
        return out

    def _after_flush(self) -> None:
        self._flushed = (self.observed, self._seq)
        self._purged_below = max(self._purged_below, self._purge_next)

    def _after_discard(self) -> None:
        self.observed, self._seq = self._flushed
