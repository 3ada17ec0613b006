"""Redis backend: state outside the process, in a redis-server shared by many instances.

Layout per store partition, all under the hash tag `{<namespace>:<store>:<partition>}` (so a
Redis Cluster keeps them on one slot): a sorted set `...:k` of keys (all score 0, ordered by
bytes, scanned with ZRANGEBYLEX), a hash `...:v` of values, a string `...:cp` with the
checkpoint and a string `...:epoch`, a random id made when the store partition is first used.
A batch and its checkpoint go in one MULTI/EXEC.

Lost data: a server that restarts empty (no persistence), is flushed, evicts keys or fails over
to a replica that is behind does not say so; it just answers "no such key". A handle therefore
remembers the epoch and the checkpoint it saw when it opened the store and the checkpoint it
last wrote. `check_intact` (the runtime calls it before every commit, after the batch's reads)
and every `write_batch` (under WATCH, so nothing is written into a store that changed) compare
them with the server's: a missing or different epoch or checkpoint raises `StoreLostError`, and
the runtime rebuilds the store from its changelog instead of counting from zero.

Rolled back before any output: a server restarted on an older snapshot (an RDB dump taken
before the last commits) keeps the epoch but holds an older checkpoint, and every read would
answer with old data. A server can only lose or roll back data across a new connection (a
restart or a failover drops every connection), so the client counts the connections it opens
(`_Connects`, redis-py's connect hook) and a read answered after a new connection is trusted
only once the epoch and checkpoint are checked again (`_verified`): the first read from a
restarted server raises `StoreLostError`, before anything computed from it leaves the task.

Connection loss: every operation is retried with exponential backoff (`retry_for` seconds,
default 30) and each retry is logged as a warning; when the time is up a `StoreError` names the
server and the store. Retrying a batch is safe: applying the same puts, deletes and checkpoint
twice gives the same state. A server that does not answer at all (paused, a network partition)
shows in `not_answering`: the app reports not-ready while an operation has waited longer than a
few seconds (kstream.runtime.store_health).
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from kstream.errors import ConfigError, StoreError, StoreLostError
from store_backends.base import BatchedPoints, Cursor, check_bytes, prefix_upper_bound
from store_backends.checkpoint import decode_checkpoint, encode_checkpoint

log = logging.getLogger("kstream.store_backends.redis")
T = TypeVar("T")
CHUNK = 512


class _Connects:
    """redis-py's `redis_connect_func`: sets a new connection up and counts it.

    The count tells a backend that a reply may come from a server it has not checked since it
    last compared epoch and checkpoint (redis-py reconnects silently, inside a command).
    """

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, connection: Any) -> None:
        connection.on_connect()
        self.n += 1


class RedisBackend(BatchedPoints):
    """An ordered map in Redis, namespaced by application, store and partition."""

    def __init__(
        self,
        client: Any,
        base: str,
        name: str = "store",
        partition: int = 0,
        retry_for: float = 30.0,
        where: str = "",
        connects: _Connects | None = None,
    ) -> None:
        """`connects`: the hook counting `client`'s connections (None: every read re-checks
        the epoch and checkpoint, for a client made without it)."""
        self._r = client
        self.name = name
        self.partition = partition
        self.base = base
        self._k = f"{base}:k".encode()
        self._v = f"{base}:v".encode()
        self._cp = f"{base}:cp".encode()
        self._epoch_key = f"{base}:epoch".encode()
        # what this handle believes the server holds: set on first use, moved by its writes
        self._epoch: bytes | None = None
        self._cp_seen: bytes | None = None
        self.retry_for = retry_for
        self._server = where
        self._closed = False
        self._connects = connects
        # the connection count before the last check that found the store intact (-1: never)
        self._verified = -1
        # operations waiting for the server: token -> when they began (for `not_answering`)
        self._tokens = itertools.count()
        self._inflight: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"RedisBackend({self._server!r}, {self.base!r})"

    def _where(self) -> str:
        return (
            f"redis store {self.name!r} partition {self.partition} at {self._server} ({self.base})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._where()} is closed")

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        token = next(self._tokens)
        self._inflight[token] = time.monotonic()
        try:
            return self._attempts(what, fn)
        finally:
            del self._inflight[token]

    def not_answering(self, after: float) -> str | None:
        """Why the store is not usable, when an operation has waited `after` seconds or more
        for the server (retries included); None otherwise."""
        started = list(self._inflight.values())
        if not started:
            return None
        waited = time.monotonic() - min(started)
        if waited < after:
            return None
        return (
            f"{self._where()} has not answered for {waited:.1f}s "
            f"(retrying for up to {self.retry_for:g}s)"
        )

    def _attempts(self, what: str, fn: Callable[[], T]) -> T:
        import redis

        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            self._check_open()
            try:
                return fn()
            except (redis.ConnectionError, redis.TimeoutError, redis.WatchError) as e:
                if isinstance(e, redis.WatchError) and "ConnectionError" not in str(e):
                    raise StoreError(f"{self._where()}: {what} failed: {e}") from e
                # redis-py reports a connection lost under WATCH as a WatchError that says so:
                # the server went away, nothing changed under us, so it is retried like one.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(
                        f"{self._where()}: {what} failed after {attempt} attempts over "
                        f"{self.retry_for:g}s: {e}"
                    ) from e
                log.warning(
                    "%s: %s failed (%s); retry %d in %.2fs", self._where(), what, e, attempt, delay
                )
                time.sleep(min(delay, left))
                delay = min(delay * 2, 2.0)
            except redis.RedisError as e:
                raise StoreError(f"{self._where()}: {what} failed: {e}") from e
            except Exception as e:
                # redis-py's connection torn down under a reader (a ValueError on a closed file,
                # an AttributeError on a dropped buffer): another thread closed this backend, a
                # query racing the task's rebuild. Say so, not a bare internal error.
                if not self._closed:
                    raise
                raise StoreError(f"{self._where()}: {what} failed: the store was closed") from e

    # --- loss detection ------------------------------------------------------------------------

    def _claim(self) -> None:
        """Learn the store's epoch (making one for a new store) and its current checkpoint.

        Runs once per handle, before its first read of the checkpoint or its first write, so
        that later checks compare against what the store held when this handle began.
        """
        if self._epoch is not None:
            return

        def run() -> tuple[bytes, bytes | None]:
            epoch, cp = self._r.mget(self._epoch_key, self._cp)
            if epoch is None:
                fresh = uuid.uuid4().hex.encode()
                if self._r.set(self._epoch_key, fresh, nx=True):
                    return fresh, cp
                epoch, cp = self._r.mget(self._epoch_key, self._cp)
            return bytes(epoch), cp

        self._epoch, self._cp_seen = self._retry("open", run)

    def _raise_if_lost(
        self, epoch: bytes | None, cp: bytes | None, also_ok: bytes | None = None
    ) -> None:
        if epoch != self._epoch:
            why = (
                "its epoch key is gone: the server lost its data (restarted empty, flushed or "
                "evicted keys)"
                if epoch is None
                else "its epoch changed: the store was recreated since this task opened it"
            )
            raise StoreLostError(f"{self._where()}: {why}")
        if cp != self._cp_seen and (also_ok is None or cp != also_ok):
            raise StoreLostError(
                f"{self._where()}: checkpoint is {_text(cp)} where this task last saw "
                f"{_text(self._cp_seen)}: the data was rolled back (e.g. a failover to a replica "
                "that was behind) or written by another instance"
            )

    def _connections(self) -> int:
        """Connections the client has opened so far (-2 when they are not counted)."""
        return -2 if self._connects is None else self._connects.n

    def check_intact(self) -> None:
        """Raise StoreLostError unless the server still holds what this handle last wrote."""
        self._claim()
        before = self._connections()
        epoch, cp = self._retry("check", lambda: self._r.mget(self._epoch_key, self._cp))
        self._raise_if_lost(epoch, cp)
        self._verified = before

    def _read(self, what: str, fn: Callable[[], T]) -> T:
        """A read whose answer is trusted: if the client opened a connection since the store
        was last found intact, the answer may come from a restarted or rolled-back server, so
        the epoch and checkpoint are checked before it is returned (StoreLostError if not)."""
        result = self._retry(what, fn)
        if self._connects is None or self._connects.n != self._verified:
            self.check_intact()
        return result

    # --- point operations ----------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        v: bytes | None = self._read("get", lambda: self._r.hget(self._v, key))
        return v

    def write_batch(
        self,
        puts: dict[bytes, bytes],
        deletes: Iterable[bytes],
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        dels = list(deletes)
        for k, v in puts.items():
            check_bytes("key", k)
            check_bytes("value", v)
        for k in dels:
            check_bytes("key", k)
        dels = [k for k in dels if k not in puts]
        cp = encode_checkpoint(checkpoint)
        if not puts and not dels and cp is None:
            return

        self._claim()
        before = self._connections()

        def run() -> None:
            import redis

            with self._r.pipeline(transaction=True) as p:
                # WATCH: if the epoch or checkpoint move between this check and EXEC, nothing
                # is written. A retry after an EXEC whose answer was lost finds `cp` in place.
                p.watch(self._epoch_key, self._cp)
                epoch, seen = p.mget(self._epoch_key, self._cp)
                self._raise_if_lost(epoch, seen, also_ok=cp)
                p.multi()
                for i in range(0, len(dels), 1000):
                    chunk = dels[i : i + 1000]
                    p.hdel(self._v, *chunk)
                    p.zrem(self._k, *chunk)
                if puts:
                    items = list(puts.items())
                    for i in range(0, len(items), 1000):
                        part = dict(items[i : i + 1000])
                        p.hset(self._v, mapping=part)
                        p.zadd(self._k, dict.fromkeys(part, 0))
                if cp is not None:
                    p.set(self._cp, cp)
                try:
                    p.execute()
                except redis.WatchError as e:
                    if "ConnectionError" in str(e):
                        raise  # the connection dropped: retried, and the retry re-checks
                    raise StoreLostError(
                        f"{self._where()}: its epoch or checkpoint changed during a write "
                        "(another instance writes to it, or the server lost its data)"
                    ) from None

        self._retry("write_batch", run)
        if cp is not None:
            self._cp_seen = cp
        if self._connections() == before:
            self._verified = before  # checked under WATCH, on no newer connection

    # --- scans ---------------------------------------------------------------------------------

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Cursor:
        self._check_open()
        return Cursor(self._walk(lo, hi, reverse))

    def _walk(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        lo_b: bytes = b"-" if lo is None else b"[" + lo
        hi_b: bytes = b"+" if hi is None else b"[" + hi
        while True:
            keys = self._read("range", self._page(lo_b, hi_b, reverse))
            if not keys:
                return
            vals: list[bytes | None] = self._read("range", self._values(keys))
            for k, v in zip(keys, vals, strict=True):
                if v is not None:
                    yield k, v
            if len(keys) < CHUNK:
                return
            if reverse:
                hi_b = b"(" + keys[-1]
            else:
                lo_b = b"(" + keys[-1]

    def _page(self, lo_b: bytes, hi_b: bytes, reverse: bool) -> Callable[[], list[bytes]]:
        if reverse:
            return lambda: self._r.zrevrangebylex(self._k, hi_b, lo_b, start=0, num=CHUNK)
        return lambda: self._r.zrangebylex(self._k, lo_b, hi_b, start=0, num=CHUNK)

    def _values(self, keys: list[bytes]) -> Callable[[], list[bytes | None]]:
        return lambda: self._r.hmget(self._v, keys)

    def prefix_scan(self, prefix: bytes) -> Cursor:
        end = prefix_upper_bound(prefix)
        cur = self.range(prefix or None, end)
        if end is None:
            return cur
        return Cursor((kv for kv in cur if kv[0] != end), cur.close)

    # --- lifecycle -----------------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        self._claim()
        raw: bytes | None = self._retry("checkpoint", lambda: self._r.get(self._cp))
        return decode_checkpoint(raw, self._where())

    def approximate_num_entries(self) -> int:
        return int(self._read("zcard", lambda: self._r.zcard(self._k)))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._r.close()
            except Exception:
                pass

    def destroy(self) -> None:
        self._retry("destroy", lambda: self._r.delete(self._k, self._v, self._cp, self._epoch_key))
        self._epoch = self._cp_seen = None
        self.close()


def _text(raw: bytes | None) -> str:
    return "missing" if raw is None else repr(raw.decode("utf-8", "replace"))


def open_url(
    url: str,
    *,
    name: str = "store",
    partition: int = 0,
    state_dir: str | None = None,
    namespace: str = "",
) -> RedisBackend:
    """Registry factory for `redis://host:port/db[?retry_for=SECONDS&prefix=NAME]`."""
    try:
        import redis
    except ImportError as e:
        raise ConfigError(
            "the redis store backend needs the redis package: pip install 'kstream[redis]'"
        ) from e
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    try:
        retry_for = float(query.pop("retry_for", ["30"])[-1])
    except ValueError:
        raise ConfigError(f"redis backend URL {url!r}: retry_for must be a number") from None
    prefix = query.pop("prefix", ["kstream"])[-1]
    rest = "&".join(f"{k}={v[-1]}" for k, v in query.items())
    clean = urlunsplit((parts.scheme, parts.netloc or "127.0.0.1:6379", parts.path, rest, ""))
    connects = _Connects()
    client = redis.Redis.from_url(
        clean, socket_timeout=10, socket_connect_timeout=5, redis_connect_func=connects
    )
    base = f"{prefix}:{{{namespace}:{name}:{partition}}}"
    server = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}{parts.path or '/0'}"
    return RedisBackend(
        client, base, name, partition, retry_for=retry_for, where=server, connects=connects
    )
