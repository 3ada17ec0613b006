"""What a serde is: `Serde`, `ContextSerde`, `SerdeContext`, and the batch paths over them.

A `Serde` pairs two functions. The built-ins do not look at the context, which lets batch code
call `serde.to_bytes` / `serde.from_bytes` directly without building a context per record;
user serdes that need topic or headers implement `serialize(value, ctx)` and
`deserialize(data, ctx)`.

Batches. `Serde.deserialize_batch` / `serialize_batch` turn a list of inputs into a list of
outputs with one error rule: a bad input is handed to `on_error(index, exception)` (its slot
holds None) or, without `on_error`, its exception is raised as the serde raised it, the first
bad input's. `deserialize_records` / `serialize_records` do a list of records' keys and values
and name each bad record once, key before value, in record order: the topology's source and
sink nodes (so the native runtime and Spark, which runs the same nodes) and the test driver
read and write records through them.

The serdes themselves build on these types: the built-ins and `serde()` resolution in
`kstream.serde` (which re-exports every name here), the Schema Registry formats in
`kstream.schema_registry`. Both import this module and `kstream.serde` imports the registry
module, so the dependency runs one way.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from kstream.errors import SerdeError
from kstream.records import Headers, Record

__all__ = [
    "NO_CONTEXT",
    "BadRecord",
    "ContextSerde",
    "OnError",
    "Serde",
    "SerdeContext",
    "deserialize_records",
    "serialize_records",
]


@dataclass(frozen=True, slots=True)
class SerdeContext:
    """Where a value is being (de)serialized: its topic, its headers, key or value."""

    topic: str | None = None
    headers: Headers = ()
    is_key: bool = False


NO_CONTEXT = SerdeContext()


class Serde:
    """A serializer/deserializer pair. `None` always passes through (tombstones)."""

    name: str = "custom"
    # C functions the batch paths may call instead of to_bytes / from_bytes, saving a Python
    # call per record: each gives the same result for every input it accepts and raises for
    # every other, after which the caller calls the full function (which raises the serde's
    # own error). `c_from_bytes` raises for None too; `c_to_bytes` is never given None (the
    # sink serializes a None key or value as None, a tombstone, itself). None: no such
    # function.
    c_to_bytes: Callable[[Any], bytes] | None = None
    c_from_bytes: Callable[[bytes], Any] | None = None
    # A fixed-width serde (long, double, ...): its `struct` code without the byte order
    # ("q") and the exact classes whose values it writes as that code packs them. A
    # timestamped store then packs and unpacks a timestamp with its value in one call
    # (kstream.state.keyvalue.ts_struct). None: not a fixed-width serde.
    fixed: tuple[str, tuple[type, ...]] | None = None

    def __init__(
        self,
        to_bytes: Callable[[Any], bytes],
        from_bytes: Callable[[bytes], Any],
        name: str = "custom",
    ) -> None:
        self._to_bytes = to_bytes
        self._from_bytes = from_bytes
        self.name = name

    def to_bytes(self, value: Any) -> bytes | None:
        """Serialize without a context (fast path used by batch code)."""
        if value is None:
            return None
        return self._to_bytes(value)

    def from_bytes(self, data: bytes | None) -> Any:
        """Deserialize without a context (fast path used by batch code)."""
        if data is None:
            return None
        return self._from_bytes(data)

    def serialize(self, value: Any, ctx: SerdeContext | None = None) -> bytes | None:
        return self.to_bytes(value)

    def deserialize(self, data: bytes | None, ctx: SerdeContext | None = None) -> Any:
        return self.from_bytes(data)

    def deserialize_batch(
        self,
        data: Sequence[bytes | None],
        context: Callable[[int], SerdeContext] | None = None,
        on_error: OnError | None = None,
    ) -> list[Any]:
        """`deserialize` of each item of `data`, in order (the batch rule: module docstring).

        `context(i)` is the context of item `i`, asked for only by serdes that read one.
        """
        if self.needs_context:
            de, ctx = self.deserialize, context or _no_context
            return _each(data, lambda i, d: de(d, ctx(i)), on_error)
        fast, full = self.c_from_bytes, self.from_bytes
        try:  # the C function (or the full one) on every item; on any exception, item by item
            return list(map(fast or full, data))  # type: ignore[arg-type]  # a None raises
        except Exception:
            pass  # not raised from here: a caller sees the serde's own error alone
        return _each_fast(data, fast, full, on_error)

    def serialize_batch(
        self,
        values: Sequence[Any],
        context: Callable[[int], SerdeContext] | None = None,
        on_error: OnError | None = None,
    ) -> list[bytes | None]:
        """`serialize` of each of `values`, in order (the batch rule: module docstring); a
        None is a None (a tombstone, a null key) unless the serde reads a context."""
        if self.needs_context:
            ser, ctx = self.serialize, context or _no_context
            return _each(values, lambda i, v: ser(v, ctx(i)), on_error)
        fast, full = self.c_to_bytes, self.to_bytes
        try:  # as deserialize_batch
            if fast is None:
                if self.fixed is None:
                    return list(map(full, values))
                # a fixed-width serde: its values of the exact classes packed in C (out of
                # range raises, and the item-by-item pass below names the error)
                code, exact = self.fixed
                pack = struct.Struct(">" + code).pack
                return [pack(v) if v.__class__ in exact else full(v) for v in values]
            if None not in values:  # no tombstone, no null key: one pass from C
                return list(map(fast, values))
            return [None if v is None else fast(v) for v in values]
        except Exception:
            pass
        return _each_fast(values, fast, full, on_error)

    @property
    def needs_context(self) -> bool:
        """True when serialize/deserialize were overridden to use the context."""
        cls = type(self)
        return cls.serialize is not Serde.serialize or cls.deserialize is not Serde.deserialize

    def __repr__(self) -> str:
        return f"Serde({self.name!r})"


OnError = Callable[[int, Exception], None]
"""Told of each bad input of a batch: its index and the serde's exception."""


def _no_context(_i: int) -> SerdeContext:
    return NO_CONTEXT


def _each(
    data: Sequence[Any], one: Callable[[int, Any], Any], on_error: OnError | None
) -> list[Any]:
    out: list[Any] = []
    append = out.append
    for i, d in enumerate(data):
        try:
            v = one(i, d)
        except Exception as e:
            if on_error is None:
                raise
            on_error(i, e)
            v = None
        append(v)
    return out


def _each_fast(
    data: Sequence[Any],
    fast: Callable[[Any], Any] | None,
    full: Callable[[Any], Any],
    on_error: OnError | None,
) -> list[Any]:
    """`full` on each item, or `fast` (a serde's C function) where it accepts the item: it is
    never given None, and where it raises `full` decides (a value, or the serde's error)."""
    out: list[Any] = []
    append = out.append
    for i, d in enumerate(data):
        try:
            if fast is not None and d is not None:
                try:
                    append(fast(d))
                    continue
                except Exception:
                    pass
            append(full(d))
        except Exception as e:
            if on_error is None:
                raise
            on_error(i, e)
            append(None)
    return out


_KEY = attrgetter("key")
_VALUE = attrgetter("value")


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record of a batch its serdes refused: its index, "key" or "value", the exception."""

    index: int
    part: str
    error: Exception


def deserialize_records(
    records: Sequence[Record], key_serde: Serde, value_serde: Serde, topic: str | None = None
) -> list[BadRecord]:
    """Deserialize the key and value of each of `records` in place; the records that failed,
    in record order, each once (its key if that failed, else its value), are returned and
    left as they came, bytes and all, for an error policy or a dead-letter queue.

    The context of each is its headers and `topic`, or the record's own topic if None.
    """
    if key_serde.needs_context or value_serde.needs_context:
        keys, values, bad = _records(records, key_serde, value_serde, topic, decode=True)
        refused = {b.index for b in bad}
        for i, r in enumerate(records):
            if i not in refused:
                r.key = keys[i]
                r.value = values[i]
        return bad
    # the batch rule of `Serde.deserialize_batch` in one loop over the records, which saves
    # the hot path a list per side and a second pass
    kfull, vfull = key_serde.from_bytes, value_serde.from_bytes
    kd, vd = key_serde.c_from_bytes or kfull, value_serde.c_from_bytes or vfull
    keys, values = list(map(_KEY, records)), list(map(_VALUE, records))
    if None not in keys and None not in values:
        # no null key or tombstone: each side in one pass from C; if anything raises, the
        # loop below decodes record by record and names the bad ones
        try:
            decoded = zip(list(map(kd, keys)), list(map(vd, values)), strict=True)
        except Exception:
            pass
        else:
            for r, (k, v) in zip(records, decoded, strict=True):
                r.key = k
                r.value = v
            return []
    out: list[BadRecord] = []
    for i, r in enumerate(records):
        kb, vb = r.key, r.value
        try:  # None (a null key, a tombstone) is the full function's: the C one raises for it
            k = kd(kb) if kb is not None else kfull(kb)
        except Exception:
            try:
                k = kfull(kb)
            except Exception as e:
                out.append(BadRecord(i, "key", e))
                continue
        try:
            v = vd(vb) if vb is not None else vfull(vb)
        except Exception:
            try:
                v = vfull(vb)
            except Exception as e:
                out.append(BadRecord(i, "value", e))
                continue
        r.key = k
        r.value = v
    return out


def serialize_records(
    records: Sequence[Record], topic: str, key_serde: Serde, value_serde: Serde
) -> tuple[list[bytes | None], list[bytes | None], list[BadRecord]]:
    """The keys and values of `records` serialized for `topic`, and the records that failed,
    in record order, each once (its key if that failed, else its value; its slots None)."""
    return _records(records, key_serde, value_serde, topic, decode=False)


def _records(
    records: Sequence[Record],
    key_serde: Serde,
    value_serde: Serde,
    topic: str | None,
    decode: bool,
) -> tuple[list[Any], list[Any], list[BadRecord]]:
    """The keys and values of `records` through the serdes' batch methods, and the failed
    records in record order, each once (key before value); a failed record's slots None."""
    bad: dict[int, BadRecord] = {}

    def context(is_key: bool) -> Callable[[int], SerdeContext]:
        if topic is None:
            return lambda i: SerdeContext(records[i].topic, records[i].headers, is_key)
        return lambda i: SerdeContext(topic, records[i].headers, is_key)

    def failed(part: str) -> OnError:
        def note(i: int, e: Exception) -> None:
            if i not in bad:  # a record with a bad key is not reported for its value too
                bad[i] = BadRecord(i, part, e)

        return note

    if decode:
        keys = key_serde.deserialize_batch(list(map(_KEY, records)), context(True), failed("key"))
        values = value_serde.deserialize_batch(
            list(map(_VALUE, records)), context(False), failed("value")
        )
    else:
        keys = key_serde.serialize_batch(list(map(_KEY, records)), context(True), failed("key"))
        values = value_serde.serialize_batch(
            list(map(_VALUE, records)), context(False), failed("value")
        )
    for i in bad:
        keys[i] = values[i] = None
    return keys, values, [bad[i] for i in sorted(bad)]


class ContextSerde(Serde):
    """Base for user serdes that read the context: override serialize and deserialize."""

    def __init__(self, name: str = "custom") -> None:
        super().__init__(self._no_ctx_ser, self._no_ctx_de, name)

    def _no_ctx_ser(self, value: Any) -> bytes:
        out = self.serialize(value, NO_CONTEXT)
        if out is None:
            raise SerdeError(f"serde {self.name!r} returned None for a non-None value")
        return out

    def _no_ctx_de(self, data: bytes) -> Any:
        return self.deserialize(data, NO_CONTEXT)
