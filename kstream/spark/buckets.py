"""Many keys per Spark state entry: a map's keys in hash buckets, grown by linear hashing.

A request to Spark's state server costs about the same whatever it carries: measured on
local[1], 57-70 us pipelined per get or put of a 60-byte value, most of it fixed (the request
crosses a socket and the JVM turns it into a row before RocksDB sees it), where (un)pickling
another small entry costs well under a microsecond. A batch that touches many keys of a large
store paid two requests per key (read, then write back). `BucketedMap` keeps the keys in
buckets instead, one state entry per bucket, so such a batch pays two requests per bucket it
touches.

The bucket count grows with the keys by linear hashing: when there are more than `LOAD` keys
per bucket, the bucket at the split pointer is split in two (its keys rehashed with one more
bit), and the pointer moves on; every bucket has split once when it comes back to the start,
and the table has doubled. So a bucket holds about `LOAD` keys whatever the store's size, and
a touched key brings at most a bucket's worth of other keys along: a batch's cost stays
proportional to the batch, not to the state. Buckets never merge when keys go away (a store
whose keys expire keeps its bucket count; its buckets get smaller).

The layout (`level`, `split`, `keys`) lives in the caller's `layout` dict, which the task
keeps in its metadata with the rest of its state, so the two are committed together.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from typing import Any

LOAD = 64
"""Keys per bucket (on average) before a bucket splits. On local[2], a windowed count over
1,000,000 keys ran its task stage in 58.4, 55.7 and 50.8 s with 16, 32 and 64: requests cost
more than bytes. A batch holds up to `LOAD` keys' entries per key it touches."""

FIRST = 16
"""Buckets of an empty map (a power of two)."""

BUCKET_TAG = b"B"
"""Tag of a bucket's own state entry: `B` + bucket number (4 bytes, big-endian)."""


def bucket_key(bucket: int) -> bytes:
    return BUCKET_TAG + bucket.to_bytes(4, "big")


class BucketedMap:
    """A `kstream.spark.task_state.MapLike` that keeps keys starting with `prefix` in buckets
    of `inner` (other keys go to `inner` as they are).

    Buckets read are kept for the life of the object (one batch): `inner` must not be
    written by anyone else meanwhile.
    """

    def __init__(self, inner: Any, layout: MutableMapping[str, int], prefix: bytes) -> None:
        self.inner = inner
        self.layout = layout
        for name in ("level", "split", "keys"):
            layout.setdefault(name, 0)
        self.prefix = prefix
        self._buckets: dict[int, dict[bytes, bytes]] = {}

    # --- addressing ----------------------------------------------------------------------------

    def bucket_of(self, key: bytes) -> int:
        """The bucket `key` is in under the current layout."""
        n = FIRST << self.layout["level"]
        h = zlib.crc32(key)
        b = h & (n - 1)
        return h & (2 * n - 1) if b < self.layout["split"] else b

    @property
    def buckets(self) -> int:
        return (FIRST << self.layout["level"]) + self.layout["split"]

    def _bucketer(self) -> Callable[[bytes], int]:
        """`bucket_of` under the layout as it is now, for many keys in a row."""
        n = FIRST << self.layout["level"]
        low, high, split, crc32 = n - 1, 2 * n - 1, self.layout["split"], zlib.crc32

        def bucket(key: bytes) -> int:
            h = crc32(key)
            b = h & low
            return h & high if b < split else b

        return bucket

    def _mine(self, key: bytes) -> bool:
        return key.startswith(self.prefix)

    def _read(self, buckets: Iterable[int]) -> None:
        """Read the buckets not read yet, in one round."""
        have = self._buckets
        missing = sorted({b for b in buckets if b not in have})
        if not missing:
            return
        raws = self.inner.get_many([bucket_key(b) for b in missing])
        for b, raw in zip(missing, raws, strict=True):
            self._buckets[b] = {} if raw is None else pickle.loads(raw)

    # --- MapLike -------------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        if not self._mine(key):
            got: bytes | None = self.inner.get(key)
            return got
        return self.get_many([key])[0]

    def put(self, key: bytes, value: bytes) -> None:
        if not self._mine(key):
            self.inner.put(key, value)
        else:
            self.write_many([(key, value)])

    def remove(self, key: bytes) -> None:
        if not self._mine(key):
            self.inner.remove(key)
        else:
            self.write_many([(key, None)])

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        # each key's bucket computed once (-1: not ours); a prefetch asks for thousands
        prefix, bucket = self.prefix, self._bucketer()
        bs = [bucket(k) if k.startswith(prefix) else -1 for k in keys]
        found: dict[bytes, bytes | None] = {}
        if -1 in bs:
            other = [k for k, b in zip(keys, bs, strict=True) if b < 0]
            found = dict(zip(other, self.inner.get_many(other), strict=True))
        self._read(b for b in bs if b >= 0)
        buckets = self._buckets
        return [buckets[b].get(k) if b >= 0 else found[k] for k, b in zip(keys, bs, strict=True)]

    def write_many(self, ops: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply the ops to the buckets, split buckets while there are more than `LOAD` keys
        per bucket, and write every changed bucket (and the other keys' ops) in one round."""
        prefix, bucket = self.prefix, self._bucketer()
        out = [op for op in ops if not op[0].startswith(prefix)]
        mine = [op for op in ops if op[0].startswith(prefix)] if out else ops
        bs = [bucket(k) for k, _ in mine]
        self._read(bs)
        changed: set[int] = set()
        keys = self.layout["keys"]
        for b, (k, v) in zip(bs, mine, strict=True):
            held = self._buckets[b]
            if v is None:
                if held.pop(k, None) is not None:
                    keys -= 1
                    changed.add(b)
            else:
                keys += k not in held
                held[k] = v
                changed.add(b)
        self.layout["keys"] = keys
        self._grow(changed)
        out.extend(
            (
                bucket_key(b),
                pickle.dumps(self._buckets[b], protocol=5) if self._buckets[b] else None,
            )
            for b in sorted(changed)
        )
        if out:
            self.inner.write_many(out)

    def _grow(self, changed: set[int]) -> None:
        level, split = self.layout["level"], self.layout["split"]
        existing = self.buckets
        # the buckets that will split: read those already in the state in one round
        sources = []
        lv, sp = level, split
        while self.layout["keys"] > LOAD * ((FIRST << lv) + sp):
            sources.append(sp)
            sp += 1
            if sp == FIRST << lv:
                lv, sp = lv + 1, 0
        if not sources:
            return
        self._read(s for s in sources if s < existing)
        for source in sources:
            n = FIRST << level
            src = self._buckets[source]
            new = source + n
            moved = {k: v for k, v in src.items() if zlib.crc32(k) & (2 * n - 1) == new}
            for k in moved:
                del src[k]
            self._buckets[new] = moved  # a bucket number never used before: nothing stored
            changed.update((source, new))
            split += 1
            if split == n:
                level, split = level + 1, 0
            self.layout["level"], self.layout["split"] = level, split

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self.inner.items():
            if k.startswith(BUCKET_TAG) and len(k) == len(BUCKET_TAG) + 4:
                yield from pickle.loads(v).items()
            elif not self._mine(k):
                yield k, v
