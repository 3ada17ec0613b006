"""Redis backend: state outside the process, in a redis-server shared by many instances.

Layout per store partition, all under the hash tag `{<namespace>:<store>:<partition>}` (so a
Redis Cluster keeps them on one slot): a sorted set `...:k` of keys (all score 0, ordered by
bytes, scanned with ZRANGEBYLEX), a hash `...:v` of values and a string `...:cp` with the
checkpoint. A batch and its checkpoint go in one MULTI/EXEC.

Connection loss: every operation is retried with exponential backoff (`retry_for` seconds,
default 30) and each retry is logged as a warning; when the time is up a `StoreError` names the
server and the store. Retrying a batch is safe: applying the same puts, deletes and checkpoint
twice gives the same state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

import orjson

from kstream.errors import ConfigError, StoreCorruptedError, StoreError
from store_backends.base import BatchedPoints, Cursor, check_bytes, prefix_upper_bound

log = logging.getLogger("kstream.store_backends.redis")
T = TypeVar("T")
CHUNK = 512


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
    ) -> None:
        self._r = client
        self.name = name
        self.partition = partition
        self.base = base
        self._k = f"{base}:k".encode()
        self._v = f"{base}:v".encode()
        self._cp = f"{base}:cp".encode()
        self.retry_for = retry_for
        self._server = where
        self._closed = False

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
        import redis

        self._check_open()
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except (redis.ConnectionError, redis.TimeoutError) as e:
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

    # --- point operations ----------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        v: bytes | None = self._retry("get", lambda: self._r.hget(self._v, key))
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
        cp = None if checkpoint is None else orjson.dumps(checkpoint)
        if not puts and not dels and cp is None:
            return

        def run() -> None:
            p = self._r.pipeline(transaction=True)
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
            p.execute()

        self._retry("write_batch", run)

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
            keys = self._retry("range", self._page(lo_b, hi_b, reverse))
            if not keys:
                return
            vals: list[bytes | None] = self._retry("range", self._values(keys))
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
        raw: bytes | None = self._retry("checkpoint", lambda: self._r.get(self._cp))
        if raw is None:
            return {}
        try:
            cp = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise StoreCorruptedError(f"{self._where()}: checkpoint is not JSON: {e}") from e
        if not isinstance(cp, dict):
            raise StoreCorruptedError(f"{self._where()}: checkpoint is not an object: {cp!r}")
        return cp

    def approximate_num_entries(self) -> int:
        return int(self._retry("zcard", lambda: self._r.zcard(self._k)))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._r.close()
            except Exception:
                pass

    def destroy(self) -> None:
        self._retry("destroy", lambda: self._r.delete(self._k, self._v, self._cp))
        self.close()


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
    client = redis.Redis.from_url(clean, socket_timeout=10, socket_connect_timeout=5)
    base = f"{prefix}:{{{namespace}:{name}:{partition}}}"
    server = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}{parts.path or '/0'}"
    return RedisBackend(client, base, name, partition, retry_for=retry_for, where=server)
