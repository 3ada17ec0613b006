"""A task's stores kept per key in Spark's state: a batch reads and writes only what it touches.

Each store of a task (sub-topology, partition) is one Spark `MapState` of that task's group
(`transformWithStateInPandas`, RocksDB). `MapBackend` is a `store_backends` backend over it, so
the typed stores above (key-value, window, session, dedup) run unchanged. Entries are grouped
by *user key*, so a lookup is one Spark read whatever the store's size:

- key-value stores: one map entry per key (tag `g` + key bytes);
- window and session stores (physical key: segment + escaped key + times): one entry per user
  key holding all of that key's windows or sessions, in every segment, so a fetch of a key's
  windows is one read, never a scan;
- versioned stores (history: segment + escaped key + valid-from; the latest version:
  `versioned.LATEST` + key): one entry per user key holding its latest version and its whole
  history, so a read as of any time is one read;
- dedup stores (segment + id): one entry per id, all its segments together;
- a segmented store's metadata (`segments.META`) is one more entry (tag `m`).

Ranges across keys (window expiry, `fetch_all`, `all()`) use a per-segment directory: the user
keys with entries in a segment, in pages of `PAGE` keys (tag `d` + segment + page number),
appended when a key first gets an entry in that segment. Expiring a segment reads its
directory, deletes its keys' old entries, and drops the directory once no listed key has
entries left in the segment: the cost is that of the data that expires. Ranges over a
key-value store (a user processor's `range`/`all`, a suppress or grace buffer) iterate the
store's map: those read the whole store, by their nature, once per batch.

Within a batch everything read is kept in memory, and every write too: `sync` writes the
changed entries back (one Spark write per changed key, directory page or metadata entry) at
the end of the batch. The directories' page counts travel in the task's metadata (`dirs`).
Before the task runs, `prefetch` reads the entries of the batch's record keys together, and
`sync` writes together: `kstream.spark.state_client` pipelines them to Spark's state server.
"""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from kstream.state.keys import TERM, esc
from kstream.state.segments import META
from kstream.state.versioned import LATEST
from store_backends.base import BatchedPoints, Cursor

VERSIONED = "versioned_key_value"

PAGE = 4096
"""User keys per directory page: bounds what appending to a segment's directory rewrites."""

_DATA, _DIR, _META = b"g", b"d", b"m"
DATA_TAG = _DATA
"""The tag of the entries that hold user keys' data (the ones worth keeping in buckets)."""


class MapLike(Protocol):
    """The part of a Spark `MapState` (bytes -> bytes) the backend uses."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def remove(self, key: bytes) -> None: ...

    def items(self) -> Iterator[tuple[bytes, bytes]]: ...

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]: ...

    def write_many(self, ops: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Put each (key, value); remove the key where the value is None."""


class DictMap:
    """A `MapLike` over a dict: the same layout without Spark (tests, tools)."""

    def __init__(self, data: dict[bytes, bytes] | None = None) -> None:
        self.data = {} if data is None else data
        self.reads = 0
        self.writes = 0
        self.rounds = 0  # calls of get_many / write_many: a round trip each over Spark's socket
        self.single_reads = 0  # reads by `get`: a round trip each

    def get(self, key: bytes) -> bytes | None:
        self.reads += 1
        self.single_reads += 1
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.writes += 1
        self.data[key] = value

    def remove(self, key: bytes) -> None:
        self.writes += 1
        self.data.pop(key, None)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        self.reads += 1
        return iter(list(self.data.items()))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.rounds += 1
        self.reads += len(keys)
        return [self.data.get(k) for k in keys]

    def write_many(self, ops: Sequence[tuple[bytes, bytes | None]]) -> None:
        self.rounds += 1
        for k, v in ops:
            if v is None:
                self.remove(k)
            else:
                self.put(k, v)


@contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Python's cyclic collector held off while a batch's entries are read or written in bulk.

    `prefetch` and `sync` create tens of thousands of objects that live until the batch ends
    (each key's entries, its segments, the requests), none of them in a reference cycle. Left
    running, the collector scans the young ones every 700 allocations and then, as they keep
    surviving, the whole heap (bench/spark_state_path.py, 1,000,000 keys: a task ran in 15.5
    us per record with the collector off throughout, 25 with it on; pausing it here, on top of
    `_segments`, took 0.3-1.0 us more off). Paused, it runs after, as the native runtime pauses
    it per batch (`kstream.runtime.thread`). A collector someone else turned off stays off;
    `pause=False` (config `gc_pause` off) leaves it running.
    """
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


SEGMENTED = frozenset({"window", "session", "dedup", VERSIONED})
"""Store kinds whose physical keys start with a time segment (kstream.state.segments)."""


def user_key(kind: str, pk: bytes) -> bytes:
    """The part of a physical key that names its user key (the unit of Spark reads)."""
    if kind == VERSIONED and pk.startswith(LATEST):  # a key's latest version: with its history
        return esc(pk[len(LATEST) :])
    if kind in ("window", "session", VERSIONED):
        return pk[8 : pk.index(TERM, 8) + 2]
    if kind == "dedup":
        return pk[8:]
    return pk


def _segments(group: dict[bytes, bytes]) -> bytes:
    """The segments (8-byte prefixes) of a user key's entries, sorted, as one bytes object.

    Kept for every key a batch reads, to tell at `sync` which segments' directories gain it:
    bytes rather than a set, because the collector never tracks bytes, and tens of thousands of
    sets living through a batch made its collections scan them again and again."""
    if len(group) == 1:
        for pk in group:
            return pk[:8]
    return b"".join(sorted({pk[:8] for pk in group}))


def _split(segments: bytes) -> set[bytes]:
    """The segments `_segments` joined."""
    return {segments[i : i + 8] for i in range(0, len(segments), 8)}


def _gained(now: bytes, before: bytes) -> Iterable[bytes]:
    """The segments in `now` and not in `before` (both `_segments`)."""
    if not before:  # a key new to the store (the usual case of a large state): all of them
        return (now,) if len(now) == 8 else _split(now)
    return _split(now) - _split(before)


def _in(k: bytes, lo: bytes | None, hi: bytes | None) -> bool:
    return (lo is None or k >= lo) and (hi is None or k <= hi)


class MapBackend(BatchedPoints):
    """An ordered bytes map (the `store_backends.Backend` contract) over one store's map.

    `dirs` is the store's directory index (segment -> [pages, keys in the last page]), from the
    task's metadata; `sync` updates it in place.
    """

    def __init__(
        self, name: str, kind: str, state: MapLike, dirs: dict[bytes, list[int]] | None = None
    ) -> None:
        self.name = name
        self.kind = kind
        self.state = state
        self.segmented = kind in SEGMENTED
        self.dirs: dict[bytes, list[int]] = {} if dirs is None else dirs
        # user key -> {physical key: value} as read (segmented), or key -> value | None (kv)
        self._entries: dict[bytes, Any] = {}
        # user key -> the segments it has entries in, as stored (`_segments`)
        self._segs_read: dict[bytes, bytes] = {}
        self._dirty: set[bytes] = set()
        self._meta: bytes | None = None
        self._meta_state = 0  # 0 unread, 1 read, 2 changed
        self._pages: dict[tuple[bytes, int], list[bytes]] = {}
        self._dir_listed: dict[bytes, set[bytes]] = {}
        self._checkpoint: dict[str, Any] = {}
        self._closed = False
        self._prefetched: set[bytes] = set()
        self._asked: set[bytes] = set()
        self._stored: dict[bytes, bytes] | None = None  # a key-value store's map, once read

    def __repr__(self) -> str:
        return f"MapBackend({self.name!r}, {self.kind})"

    # --- reading through ---------------------------------------------------------------------

    def _group(self, uk: bytes) -> dict[bytes, bytes]:
        """The entries of user key `uk` (segmented stores), read from Spark once per batch."""
        self._asked.add(uk)
        got = self._entries.get(uk)
        if got is None:
            got = self._keep_group(uk, self.state.get(_DATA + uk))
        return got

    def _keep_group(self, uk: bytes, raw: bytes | None) -> dict[bytes, bytes]:
        got: dict[bytes, bytes] = {} if raw is None else pickle.loads(raw)
        self._entries[uk] = got
        self._segs_read[uk] = _segments(got)
        return got

    def _read_groups(self, uks: list[bytes]) -> None:
        """Read the groups of `uks` not read yet in one pipelined round (a range across keys,
        e.g. expiring a segment, reads every key listed in its directory)."""
        missing = [uk for uk in uks if uk not in self._entries]
        if missing:
            for uk, raw in zip(
                missing, self.state.get_many([_DATA + uk for uk in missing]), strict=True
            ):
                self._keep_group(uk, raw)

    def _value(self, key: bytes) -> bytes | None:
        """The value of `key` (key-value stores), read from Spark once per batch."""
        self._asked.add(key)
        if key in self._entries:
            v: bytes | None = self._entries[key]
            return v
        v = self.state.get(_DATA + key)
        self._entries[key] = v
        return v

    def prefetch(self, record_keys: Iterable[bytes]) -> None:
        """Read the entries of the batch's record keys in one pipelined round, before the
        task runs: a store is most often keyed by its records' keys (the DSL repartitions
        before a stateful step), and one read per key, one after another, costs more than the
        task's processing. Dedup stores are keyed by something else; for other stores
        `prefetch_missed` tells whether the guess was wrong."""
        if self.kind == "dedup":
            return
        with gc_paused():
            self._prefetch(record_keys)

    def _prefetch(self, record_keys: Iterable[bytes]) -> None:
        wanted = list(
            dict.fromkeys(
                uk
                for uk in (esc(k) if self.segmented else k for k in record_keys)
                if uk not in self._entries
            )
        )
        if not wanted:
            return
        found = self.state.get_many([_DATA + uk for uk in wanted])
        for uk, raw in zip(wanted, found, strict=True):
            if self.segmented:
                self._keep_group(uk, raw)
            else:
                self._entries[uk] = raw
        self._prefetched.update(wanted)

    def prefetch_missed(self) -> bool:
        """Whether most of what `prefetch` read was never asked for (the store is keyed by
        something other than its records' keys), judged on enough keys to tell."""
        tried = len(self._prefetched)
        return tried >= 16 and 2 * len(self._prefetched & self._asked) < tried

    def _read_meta(self) -> bytes | None:
        if self._meta_state == 0:
            self._meta = self.state.get(_META)
            self._meta_state = 1
        return self._meta

    def get(self, key: bytes) -> bytes | None:
        if not self.segmented:
            return self._value(key)
        if key == META:
            return self._read_meta()
        return self._group(user_key(self.kind, key)).get(key)

    # --- writing -----------------------------------------------------------------------------

    def write_batch(
        self,
        puts: dict[bytes, bytes],
        deletes: Iterable[bytes],
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        for k in deletes:
            self._set(k, None)
        for k, v in puts.items():
            self._set(k, v)
        if checkpoint is not None:
            self._checkpoint = dict(checkpoint)

    def _set(self, key: bytes, value: bytes | None) -> None:
        if not self.segmented:
            self._entries[key] = value
            self._dirty.add(key)
        elif key == META:
            self._meta, self._meta_state = value, 2
        else:
            uk = user_key(self.kind, key)
            group = self._group(uk)
            if value is None:
                group.pop(key, None)
            else:
                group[key] = value
            self._dirty.add(uk)

    # --- ranges ------------------------------------------------------------------------------

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Cursor:
        items = sorted(self._range(lo, hi))
        if reverse:
            items.reverse()
        return Cursor(iter(items))

    def prefix_scan(self, prefix: bytes) -> Cursor:
        items = sorted((k, v) for k, v in self._range(prefix, None) if k.startswith(prefix))
        return Cursor(iter(items))

    def _range(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes]]:
        if not self.segmented:
            return self._kv_range(lo, hi)
        one = self._one_key(lo, hi)
        if one is not None:
            return [(k, v) for k, v in self._group(one).items() if _in(k, lo, hi)]
        out: list[tuple[bytes, bytes]] = []
        keys = self._keys_in_segments(lo, hi)
        self._read_groups(keys)
        for uk in keys:
            out.extend((k, v) for k, v in self._group(uk).items() if _in(k, lo, hi))
        if _in(META, lo, hi):
            meta = self._read_meta()
            if meta is not None:
                out.append((META, meta))
        return out

    def _one_key(self, lo: bytes | None, hi: bytes | None) -> bytes | None:
        """The user key every physical key in [lo, hi] has, if lo and hi pin one down."""
        if lo is None or hi is None or lo[:8] != hi[:8] or len(lo) < 8:
            return None
        try:
            a, b = user_key(self.kind, lo), user_key(self.kind, hi)
        except ValueError:
            return None
        if a != b or self.kind == "dedup":
            return None
        return a

    def _kv_range(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes]]:
        if self._stored is None:  # read once per batch: a buffer scanned per record reads it so
            self._stored = {k[1:]: v for k, v in self.state.items() if k[:1] == _DATA}
        merged: dict[bytes, bytes | None] = dict(self._stored)
        merged.update(self._entries)
        return [(k, v) for k, v in merged.items() if v is not None and _in(k, lo, hi)]

    def _keys_in_segments(self, lo: bytes | None, hi: bytes | None) -> list[bytes]:
        """User keys with entries in the segments [lo, hi] may touch: listed in the
        directories, or given entries there in this batch."""
        seg_lo = None if lo is None else lo[:8]
        seg_hi = None if hi is None else hi[:8]
        found: dict[bytes, None] = {}
        for seg in sorted(self.dirs):
            if _in(seg, seg_lo, seg_hi):
                found.update(dict.fromkeys(self._listed(seg)))
        for uk in list(self._dirty):
            group = self._entries[uk]
            if any(_in(pk[:8], seg_lo, seg_hi) for pk in group):
                found[uk] = None
        return list(found)

    def _listed(self, seg: bytes) -> set[bytes]:
        """Every user key in `seg`'s directory (all its pages, read once per batch)."""
        got = self._dir_listed.get(seg)
        if got is None:
            got = set()
            for page in range(self.dirs[seg][0]):
                got.update(self._page(seg, page))
            self._dir_listed[seg] = got
        return got

    def _page(self, seg: bytes, page: int) -> list[bytes]:
        got = self._pages.get((seg, page))
        if got is None:
            raw = self.state.get(_DIR + seg + page.to_bytes(4, "big"))
            got = [] if raw is None else pickle.loads(raw)
            self._pages[(seg, page)] = got
        return got

    # --- end of batch ------------------------------------------------------------------------

    def sync(self) -> None:
        """Write what this batch changed back to Spark's state (entries, directories, meta)."""
        with gc_paused():
            self._sync()

    def _sync(self) -> None:
        ops: list[tuple[bytes, bytes | None]] = []
        if not self.segmented:
            ops.extend((_DATA + k, self._entries[k]) for k in self._dirty)
        else:
            added: dict[bytes, list[bytes]] = {}
            entries, segs_read, dumps = self._entries, self._segs_read, pickle.dumps
            for uk in sorted(self._dirty):
                group = entries[uk]
                ops.append((_DATA + uk, dumps(group, protocol=5) if group else None))
                now = _segments(group)
                before = segs_read[uk]
                if now != before:
                    for seg in _gained(now, before):
                        added.setdefault(seg, []).append(uk)
                    segs_read[uk] = now  # what the store holds of the key once written
            self._drop_empty_directories(added, ops)
            for seg in sorted(added):
                self._append(seg, added[seg], ops)
            if self._meta_state == 2:
                ops.append((_META, self._meta))
                self._meta_state = 1
        if ops:
            self.state.write_many(ops)
        self._dirty.clear()

    def _drop_empty_directories(
        self, added: dict[bytes, list[bytes]], ops: list[tuple[bytes, bytes | None]]
    ) -> None:
        """A segment whose directory was read this batch and none of whose keys has entries in
        it any more (it expired) loses its directory."""
        for seg, listed in list(self._dir_listed.items()):
            if seg in added or seg not in self.dirs:
                continue
            if any(any(pk[:8] == seg for pk in self._entries[uk]) for uk in listed):
                continue
            for page in range(self.dirs.pop(seg)[0]):
                ops.append((_DIR + seg + page.to_bytes(4, "big"), None))
                self._pages.pop((seg, page), None)
            del self._dir_listed[seg]

    def _append(self, seg: bytes, keys: list[bytes], ops: list[tuple[bytes, bytes | None]]) -> None:
        pages, last = self.dirs.setdefault(seg, [0, 0])
        listed = self._dir_listed.get(seg)
        while keys:
            if pages == 0 or last >= PAGE:
                self._pages[(seg, pages)] = []
                pages, last = pages + 1, 0
            page = self._page(seg, pages - 1)
            take, keys = keys[: PAGE - last], keys[PAGE - last :]
            page.extend(take)
            if listed is not None:
                listed.update(take)
            last = len(page)
            ops.append((_DIR + seg + (pages - 1).to_bytes(4, "big"), pickle.dumps(page, 5)))
        self.dirs[seg] = [pages, last]

    # --- the rest of the backend contract ----------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        return dict(self._checkpoint)

    def approximate_num_entries(self) -> int:
        """Entries this batch has seen (Spark's state has no cheap count)."""
        if not self.segmented:
            return sum(1 for v in self._entries.values() if v is not None)
        return sum(len(g) for g in self._entries.values())

    def close(self) -> None:
        self._closed = True

    def destroy(self) -> None:
        self._closed = True
