"""The key-value store: user keys through the key serde, ordered by their encoded bytes.

Aggregations keep the timestamp of their result next to its value, as Kafka Streams'
timestamped stores do: a result carries the largest timestamp of the records that went into
it, and that must survive restarts and restores, so it lives in the stored bytes (and hence in
the changelog). A store whose value serde is a `TimestampedSerde` stores Kafka's
`ValueAndTimestamp` layout: the 8-byte big-endian (signed) timestamp, then the value bytes, as
the window store does (kstream.state.window). `get`/`range` still return plain values (queries
are unchanged) and `get_with_timestamp`/`put_with_timestamp` reach the timestamp.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from kstream.errors import SerdeError
from kstream.serde import Serde
from kstream.state.base import StateStore
from store_backends.base import Cursor, prefix_upper_bound

NO_TIMESTAMP = -1
"""The timestamp of a value stored without one (Kafka's -1 for migrated values)."""

_TS = struct.Struct(">q")
"""The timestamp that starts a timestamped value (Kafka's `ValueAndTimestampSerializer`)."""


class ValueAndTimestamp(NamedTuple):
    """A stored value and the timestamp of the result it is (Kafka's `ValueAndTimestamp`)."""

    value: Any
    timestamp: int


class TimestampedSerde(Serde):
    """Wraps a value serde so that the stored bytes also carry a timestamp.

    Used as a plain serde it reads the value alone and writes `NO_TIMESTAMP`; the key-value
    store uses `join`/`split` to write and read the timestamp.
    """

    def __init__(self, inner: Serde) -> None:
        super().__init__(self._plain_to_bytes, self._plain_from_bytes, f"timestamped({inner.name})")
        self.inner = inner
        self._ser = inner.to_bytes
        self._de = inner.from_bytes

    def join(self, value: Any, timestamp: int) -> bytes | None:
        vb = self._ser(value)
        return None if vb is None else _TS.pack(timestamp) + vb

    def split(self, data: bytes) -> ValueAndTimestamp:
        if len(data) < 8:
            raise SerdeError(
                f"timestamped value of {len(data)} bytes: expected an 8-byte timestamp first"
            )
        return _new_vt((self._de(data[8:]), _TS.unpack_from(data)[0]))

    def _plain_to_bytes(self, value: Any) -> bytes:
        out = self.join(value, NO_TIMESTAMP)
        if out is None:
            raise TypeError(f"serde {self.inner.name!r} turned {value!r:.80} into None")
        return out

    def _plain_from_bytes(self, data: bytes) -> Any:
        return self.split(data).value


# `_new_vt((value, ts))` == `ValueAndTimestamp(value, ts)` without the Python-level __new__
_new_vt: Callable[[tuple[Any, int]], ValueAndTimestamp] = functools.partial(
    tuple.__new__, ValueAndTimestamp
)


TimestampedGet = Callable[[Any], tuple[Any, Any, int]]
"""`get(key) -> (key token, value or None, timestamp)` of `KeyValueStore.timestamped_access`."""
TimestampedPut = Callable[[Any, Any, int], None]
"""`put(key token, value or None, timestamp)`."""


def ts_struct(inner: Serde) -> tuple[struct.Struct, tuple[type, ...]] | None:
    """A timestamp and a value of the fixed-width serde `inner` as one struct (the bytes of
    `_TS.pack(timestamp) + inner.to_bytes(value)`), with the exact value classes it packs as
    the serde does; None when `inner` is not fixed-width (`Serde.fixed`)."""
    fixed = inner.fixed
    return None if fixed is None else (struct.Struct(">q" + fixed[0]), fixed[1])


def timestamped(inner: Serde) -> TimestampedSerde:
    """`inner` wrapped to keep timestamps (a serde already wrapped is returned as it is)."""
    return inner if isinstance(inner, TimestampedSerde) else TimestampedSerde(inner)


class KeyValueStore(StateStore):
    """get/put/delete/range over typed keys and values; reads see pending writes."""

    kind = "key_value"
    READ_METHODS = StateStore.READ_METHODS | {
        "get",
        "get_with_timestamp",
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

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        """The value and its timestamp (`NO_TIMESTAMP` when the store keeps none)."""
        kb: bytes = self.key_serde.to_bytes(key)  # type: ignore[assignment]
        data = self._cache.data
        vb = data[kb] if kb in data else self.backend.get(kb)
        if vb is None:
            return None
        vs = self.value_serde
        if isinstance(vs, TimestampedSerde):
            return vs.split(vb)
        return _new_vt((vs.from_bytes(vb), NO_TIMESTAMP))

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int) -> None:
        """Put `value` with its timestamp (kept only when the value serde is timestamped)."""
        kb = self.key_serde.to_bytes(key)
        if kb is None:
            raise TypeError(f"store {self.name!r}: key must not be None")
        vs = self.value_serde
        if value is None:
            self._write(kb, None)
        elif isinstance(vs, TimestampedSerde):
            self._write(kb, vs.join(value, timestamp))
        else:
            self._write(kb, vs.to_bytes(value))

    def timestamped_access(self) -> tuple[TimestampedGet, TimestampedPut]:
        """`(get, put)` for aggregations, one call each per record: `get(key)` returns
        `(key bytes, value or None, timestamp)` and `put(key bytes, value, timestamp)` writes
        (None deletes). The key is serialized once and no intermediate objects are built;
        without a timestamped value serde, timestamps read as `NO_TIMESTAMP` and are not kept.
        A fixed-width value (a count, a sum) is packed and unpacked with its timestamp in one
        call (`ts_struct`); anything that call does not take goes through the serde.
        """
        kser, cache, bget, write = (
            self.key_serde.to_bytes,
            self._cache,
            self.backend.get,
            self._write,
        )
        # the key serde's C function where it takes the key (a str key: str.encode)
        kfast = self.key_serde.c_to_bytes or kser
        vs = self.value_serde
        keep = isinstance(vs, TimestampedSerde)
        inner = vs.inner if isinstance(vs, TimestampedSerde) else vs
        de, ser = inner.from_bytes, inner.to_bytes
        unpack, pack = _TS.unpack_from, _TS.pack
        both = ts_struct(inner) if keep else None
        width = -1 if both is None else both[0].size
        pack_both = None if both is None else both[0].pack
        unpack_both = None if both is None else both[0].unpack
        exact = () if both is None else both[1]
        name = self.name

        def get(key: Any) -> tuple[bytes, Any, int]:
            try:
                kb = kfast(key)
            except Exception:
                kb = kser(key)  # the serde's own error, or its bytes for what C refused
            if kb is None:
                raise TypeError(f"store {name!r}: key must not be None")
            data = cache.data
            vb = data[kb] if kb in data else bget(kb)
            if vb is None:
                return kb, None, NO_TIMESTAMP
            if keep:
                if len(vb) == width:
                    ts, value = unpack_both(vb)  # type: ignore[misc]
                    return kb, value, ts
                return kb, de(vb[8:]), unpack(vb)[0]
            return kb, de(vb), NO_TIMESTAMP

        def put(kb: bytes, value: Any, timestamp: int) -> None:
            if value is None:
                write(kb, None)
            elif keep:
                if value.__class__ in exact:
                    try:
                        vb = pack_both(timestamp, value)  # type: ignore[misc]
                    except (struct.error, OverflowError):
                        vb = pack(timestamp) + ser(value)  # type: ignore[operator]  # it raises
                    write(kb, vb)
                else:
                    write(kb, pack(timestamp) + ser(value))  # type: ignore[operator]
            else:
                write(kb, ser(value))

        return get, put

    def changelog_timestamp(self, pkey: bytes, value: bytes | None) -> int:
        """A timestamped value's own timestamp (Kafka's change-logging layer of timestamped
        stores logs `ValueAndTimestamp.timestamp()`); else the writing record's time."""
        if value is not None and len(value) >= 8 and isinstance(self.value_serde, TimestampedSerde):
            return int(_TS.unpack_from(value)[0])
        return super().changelog_timestamp(pkey, value)

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
