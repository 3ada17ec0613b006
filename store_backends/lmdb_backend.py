"""LMDB backend: one environment (directory) per store x partition.

Layout: named database `data` holds the entries, `meta` holds the format marker and the
checkpoint; a `write_batch` is one LMDB write transaction, so data and checkpoint always agree.
Keys LMDB cannot hold directly (the empty key, keys over 511 bytes) live in `long` and `meta`
without breaking byte order (see `store_backends.lmdb_keys`).

Integrity: every stored value is prefixed with a CRC-32 of key and value. A damaged page is
therefore reported as `StoreCorruptedError` (as are LMDB's own structural errors and a missing
or foreign format marker), never returned as state; the runtime then wipes the directory and
restores from the changelog.

Durability (URL options): `sync=true` (default) fsyncs on every commit, so a committed batch
survives an OS crash. `sync=false` skips the fsync: a process crash loses nothing, an OS crash
may roll back the last commits (data and checkpoint together, so restore simply replays more of
the changelog). `map_size=BYTES` sets the initial map size (default 16 MiB); it doubles
whenever a write finds the map full, up to `max_map_size=BYTES` when that is given (default:
no limit; the map is address space, the file grows only with the data).

A write that fails for want of room says so in an operator's words (store_backends.disk): "no
space left on the device holding state_dir (<path>)", however LMDB reported it (ENOSPC, or EIO
from some filesystems), and "LMDB map full" naming the store and `max_map_size` when the map
reached its limit. Neither is corruption: LMDB aborts the transaction, so the environment stays
as it was before the write, nothing is wiped, and the app stops with that message.
"""

from __future__ import annotations

import errno
import heapq
import os
import shutil
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import lmdb

from kstream.errors import ConfigError, StoreCorruptedError, StoreError
from store_backends import lmdb_keys as lk
from store_backends.base import BatchedPoints, Cursor, check_bytes, prefix_upper_bound
from store_backends.checkpoint import decode_checkpoint, encode_checkpoint
from store_backends.disk import allocate, describe, free_bytes

FORMAT = b"kstream-lmdb-1"
NEW_ENV_SPACE = 64 << 10
"""Free bytes a new environment needs before LMDB creates it (its lock file and first pages):
below this, opening fails with "no space left" instead of LMDB touching an unbacked page of
its lock file, which a full device answers with SIGBUS."""
MAX_KEY = lk.MAX_KEY
_CRC = struct.Struct(">I")


def _seal(key: bytes, value: bytes) -> bytes:
    return _CRC.pack(zlib.crc32(value, zlib.crc32(key))) + value


class LMDBBackend(BatchedPoints):
    """An ordered map in an LMDB environment at `path` (created if missing)."""

    def __init__(
        self,
        path: str,
        name: str = "store",
        partition: int = 0,
        sync: bool = True,
        map_size: int = 16 << 20,
        max_map_size: int = 0,
        holder: str | None = None,
    ) -> None:
        """`max_map_size`: the limit the map may grow to (0: none); `holder`: the directory
        the operator configured, as messages about a full device name it (e.g.
        "state_dir (/var/lib/kstream)"; default `path`)."""
        self.path = path
        self.name = name
        self.partition = partition
        self.max_map_size = max_map_size
        self.holder = holder or path
        self._closed = False
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise self._device_error("creating the directory", e) from e
        fresh = not os.path.exists(os.path.join(path, "data.mdb"))
        lock = os.path.join(path, "lock.mdb")
        if not os.path.exists(lock):
            free = free_bytes(path)
            if free is not None and free < NEW_ENV_SPACE:
                short = OSError(errno.ENOSPC, f"{free} bytes free, {NEW_ENV_SPACE} needed")
                raise self._device_error("creating the LMDB environment", short)
        try:
            self._env = lmdb.open(
                path, map_size=map_size, max_dbs=3, sync=sync, metasync=sync, readahead=False
            )
            try:
                allocate(lock)  # every reader slot backed: no SIGBUS on a full device later
            except OSError as e:
                self._close_env()
                raise self._device_error("allocating the LMDB lock file", e) from e
            self._data = self._env.open_db(b"data")
            self._meta = self._env.open_db(b"meta")
            self._long = self._env.open_db(b"long")
            with self._env.begin(write=fresh) as txn:
                fmt = txn.get(b"format", db=self._meta)
                if fresh and fmt is None:
                    txn.put(b"format", FORMAT, db=self._meta)
                    fmt = FORMAT
        except lmdb.Error as e:
            self._close_env()
            if describe(e, self.holder, path) is not None:
                # a full or failing device: wiping and restoring would fail the same way
                raise self._device_error("opening the LMDB environment", e) from e
            raise StoreCorruptedError(f"{self._where()}: cannot open LMDB environment: {e}") from e
        if fmt != FORMAT:
            self._close_env()
            raise StoreCorruptedError(
                f"{self._where()}: local state has format {fmt!r}, expected {FORMAT!r}; "
                "it must be wiped and restored"
            )

    def __repr__(self) -> str:
        return f"LMDBBackend({self.path!r})"

    def _where(self) -> str:
        return f"lmdb store {self.name!r} partition {self.partition} at {self.path}"

    def _device_error(self, doing: str, e: BaseException) -> StoreError:
        """A StoreError for a failure of `doing`, led by the device's state when that is the
        cause (store_backends.disk)."""
        cause = describe(e, self.holder, self.path)
        if cause is None:
            return StoreError(f"{self._where()}: {doing} failed: {e}")
        return StoreError(f"{cause}; {self._where()}: {doing} failed ({e})")

    def _grow(self) -> None:
        """Double the map after a write found it full, up to `max_map_size`."""
        size = int(self._env.info()["map_size"])
        if self.max_map_size and size >= self.max_map_size:
            raise StoreError(
                f"LMDB map full: {self._where()} reached its max_map_size of {size} bytes; "
                "raise max_map_size in the backend URL (or leave it out: the map then grows "
                "as the data does)"
            )
        new = size * 2 if not self.max_map_size else min(size * 2, self.max_map_size)
        try:
            self._env.set_mapsize(new)
        except lmdb.Error as e:
            raise StoreError(
                f"LMDB map full: {self._where()} could not grow its map from {size} to {new} "
                f"bytes: {e}"
            ) from e

    def _close_env(self) -> None:
        env = getattr(self, "_env", None)
        if env is not None:
            env.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._where()} is closed")

    def _key(self, key: bytes) -> bytes:
        check_bytes("key", key)
        return key

    def _open(self, key: bytes, raw: bytes) -> bytes:
        if len(raw) < 4 or _CRC.unpack_from(raw)[0] != zlib.crc32(raw[4:], zlib.crc32(key)):
            raise StoreCorruptedError(f"{self._where()}: checksum mismatch for key {key[:60]!r}")
        return raw[4:]

    # --- point operations ----------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        try:
            with self._env.begin(db=self._data) as txn:
                if lk.is_direct(key):
                    raw = txn.get(key)
                elif not key:
                    raw = txn.get(lk.EMPTY_KEY, db=self._meta)
                else:
                    prefix, rest = lk.split(key)
                    packed = txn.get(prefix, db=self._long)
                    bucket = [] if packed is None else lk.decode_bucket(packed, self._where())
                    raw = lk.bucket_get(bucket, rest)
        except lmdb.Error as e:
            raise StoreCorruptedError(f"{self._where()}: read failed: {e}") from e
        return None if raw is None else self._open(key, raw)

    def write_batch(
        self,
        puts: dict[bytes, bytes],
        deletes: Iterable[bytes],
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        self._check_open()
        dels = [self._key(k) for k in deletes]
        items = []
        odd: list[tuple[bytes, bytes | None]] = []  # empty and long keys, in write order
        for k in dels:
            if not lk.is_direct(k):
                odd.append((k, None))
        for k, v in puts.items():
            check_bytes("value", v)
            if lk.is_direct(self._key(k)):
                items.append((k, _seal(k, v)))
            else:
                odd.append((k, _seal(k, v)))
        cp = encode_checkpoint(checkpoint)
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    for k in dels:
                        if lk.is_direct(k):
                            txn.delete(k, db=self._data)
                    if items:
                        with txn.cursor(db=self._data) as cur:
                            cur.putmulti(items)
                    if odd:
                        self._write_odd(txn, odd)
                    if cp is not None:
                        txn.put(b"checkpoint", cp, db=self._meta)
                return
            except lmdb.MapFullError:
                # The transaction was aborted as a whole; grow the map and write it again.
                self._grow()
            except lmdb.Error as e:
                raise self._device_error("write", e) from e

    def _write_odd(self, txn: Any, writes: list[tuple[bytes, bytes | None]]) -> None:
        """Apply writes of empty and long keys (None = delete) inside `txn`."""
        buckets: dict[bytes, lk.Bucket] = {}
        for key, sealed in writes:
            if not key:
                if sealed is None:
                    txn.delete(lk.EMPTY_KEY, db=self._meta)
                else:
                    txn.put(lk.EMPTY_KEY, sealed, db=self._meta)
                continue
            prefix, rest = lk.split(key)
            bucket = buckets.get(prefix)
            if bucket is None:
                packed = txn.get(prefix, db=self._long)
                bucket = [] if packed is None else lk.decode_bucket(packed, self._where())
                buckets[prefix] = bucket
            if sealed is None:
                lk.bucket_delete(bucket, rest)
            else:
                lk.bucket_put(bucket, rest, sealed)
        for prefix, bucket in buckets.items():
            if bucket:
                txn.put(prefix, lk.encode_bucket(bucket), db=self._long)
            else:
                txn.delete(prefix, db=self._long)

    # --- scans ---------------------------------------------------------------------------------

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Cursor:
        self._check_open()
        txn = self._env.begin(db=self._data)
        cur = txn.cursor()
        long_cur = txn.cursor(db=self._long)

        def done() -> None:
            cur.close()
            long_cur.close()
            txn.abort()

        def scan() -> Iterator[tuple[bytes, bytes]]:
            try:
                direct = self._walk(cur, lo, hi, reverse)
                if not txn.stat(self._long)["entries"]:
                    longs: Iterator[tuple[bytes, bytes]] = iter(())
                else:
                    longs = self._walk_long(long_cur, lo, hi, reverse)
                merged = heapq.merge(direct, longs, key=_first, reverse=reverse)
                empty = txn.get(lk.EMPTY_KEY, db=self._meta) if lo is None or not lo else None
                if empty is not None and not reverse:
                    yield b"", self._open(b"", empty)
                for k, raw in merged:
                    yield k, self._open(k, raw)
                if empty is not None and reverse:
                    yield b"", self._open(b"", empty)
            except lmdb.Error as e:
                raise StoreCorruptedError(f"{self._where()}: scan failed: {e}") from e

        return Cursor(scan(), done)

    @staticmethod
    def _seek(cur: Any, lo: bytes | None, hi: bytes | None, reverse: bool) -> bool:
        """Position `cur` on the first candidate: bounds may be longer than LMDB keys, so
        they are cut to 511 bytes, which never skips a key inside them."""
        if not reverse:
            return bool(cur.set_range(lo[:MAX_KEY]) if lo else cur.first())
        if hi is None:
            return bool(cur.last())
        if not hi:
            return False
        return bool(cur.set_range(hi[:MAX_KEY]) or cur.last())

    def _walk(
        self, cur: Any, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Raw `(key, sealed value)` of the `data` database inside [lo, hi]."""
        ok = self._seek(cur, lo, hi, reverse)
        step = cur.prev if reverse else cur.next
        while ok:
            k = cur.key()
            if reverse:
                if hi is not None and k > hi:
                    ok = step()
                    continue
                if lo is not None and k < lo:
                    return
            else:
                if lo is not None and k < lo:
                    ok = step()
                    continue
                if hi is not None and k > hi:
                    return
            yield k, cur.value()
            ok = step()

    def _walk_long(
        self, cur: Any, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Raw `(key, sealed value)` of the long keys inside [lo, hi], bucket by bucket."""
        ok = self._seek(cur, lo, hi, reverse)
        step = cur.prev if reverse else cur.next
        while ok:
            prefix = cur.key()
            bucket = lk.decode_bucket(cur.value(), self._where())
            for rest, sealed in reversed(bucket) if reverse else bucket:
                k = prefix + rest
                if (lo is not None and k < lo) if not reverse else (hi is not None and k > hi):
                    continue
                if (hi is not None and k > hi) if not reverse else (lo is not None and k < lo):
                    return
                yield k, sealed
            ok = step()

    def prefix_scan(self, prefix: bytes) -> Cursor:
        end = prefix_upper_bound(prefix)
        if end is None:
            return self.range(prefix or None, None)
        cur = self.range(prefix or None, end)
        return Cursor((kv for kv in cur if kv[0] != end), cur.close)

    def verify(self) -> int:
        """Read every entry and check its checksum; returns the entry count.

        Run once when local state is adopted at start-up, so damage is found before the state
        is used rather than at the first read of a damaged key.
        """
        n = 0
        with self.range() as cur:
            for _ in cur:
                n += 1
        return n

    # --- lifecycle -----------------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        self._check_open()
        try:
            with self._env.begin(db=self._meta) as txn:
                raw = txn.get(b"checkpoint")
        except lmdb.Error as e:
            raise StoreCorruptedError(f"{self._where()}: cannot read checkpoint: {e}") from e
        return decode_checkpoint(raw, self._where())

    def approximate_num_entries(self) -> int:
        self._check_open()
        with self._env.begin(db=self._data) as txn:
            n = int(txn.stat(self._data)["entries"])
            if txn.get(lk.EMPTY_KEY, db=self._meta) is not None:
                n += 1
            if txn.stat(self._long)["entries"]:
                with txn.cursor(db=self._long) as cur:
                    for raw in cur.iternext(keys=False, values=True):
                        n += len(lk.decode_bucket(raw, self._where()))
            return n

    def approximate_size_bytes(self) -> int:
        """Bytes of the pages the data holds (branch, leaf and overflow pages times the page
        size): LMDB keeps these counts, so this costs no scan (read for the store metrics)."""
        self._check_open()
        with self._env.begin(db=self._data) as txn:
            st = txn.stat(self._data)
        pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return int(pages * st["psize"])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


def _first(kv: tuple[bytes, bytes]) -> bytes:
    return kv[0]


def _flag(url: str, query: dict[str, list[str]], key: str, default: bool) -> bool:
    raw = query.get(key, [None])[-1]
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"lmdb backend URL {url!r}: {key} must be true or false, got {raw!r}")


def store_path(
    url: str, *, name: str, partition: int, state_dir: str | None, namespace: str
) -> str:
    """Where the environment of one store partition lives for `url`.

    `lmdb:///abs/root` -> /abs/root/<namespace>/<name>/<partition>; a relative root (or none
    at all, as in `"lmdb"`) is taken under `state_dir`.
    """
    parts = urlsplit(url)
    root = parts.netloc + parts.path
    if not os.path.isabs(root):
        if state_dir is None:
            raise ConfigError(
                f"lmdb backend URL {url!r} has a relative path and no state_dir was given"
            )
        root = os.path.join(state_dir, root)
    segs = [root] + ([namespace] if namespace else []) + [name, str(partition)]
    return os.path.join(*segs)


def open_url(
    url: str,
    *,
    name: str = "store",
    partition: int = 0,
    state_dir: str | None = None,
    namespace: str = "",
) -> LMDBBackend:
    """Registry factory for `lmdb:///abs/dir`, `lmdb://rel/dir` and the short name `lmdb`."""
    query = parse_qs(urlsplit(url).query)
    sync = _flag(url, query, "sync", True)
    map_size = _bytes(url, query, "map_size", 16 << 20)
    max_map_size = _bytes(url, query, "max_map_size", 0)
    path = store_path(url, name=name, partition=partition, state_dir=state_dir, namespace=namespace)
    parts = urlsplit(url)
    root = parts.netloc + parts.path
    holder = root if os.path.isabs(root) else f"state_dir ({state_dir})"
    return LMDBBackend(
        path,
        name,
        partition,
        sync=sync,
        map_size=map_size,
        max_map_size=max_map_size,
        holder=holder,
    )


def _bytes(url: str, query: dict[str, list[str]], key: str, default: int) -> int:
    raw = query.get(key, [None])[-1]
    if raw is None:
        return default
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"lmdb backend URL {url!r}: {key} must be an integer") from None
    if n < 0:
        raise ConfigError(f"lmdb backend URL {url!r}: {key} must not be negative, got {n}")
    return n
