"""Serializers and deserializers, wire-compatible with Kafka's Java serdes: the built-ins and
`serde()`, which resolves a serde given by name, object or function pair.

What a serde is (`Serde`, `ContextSerde`, `SerdeContext`) and the batch paths over a list of
records (`deserialize_records`, `serialize_records`) are defined in `kstream.serde_base` and
re-exported here, where callers import them from. The Schema Registry formats ("avro",
"protobuf", "json_schema") are built by `kstream.schema_registry`, which builds on
`kstream.serde_base` only: the dependency runs one way, from here to there.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from kstream import auto_codec
from kstream.errors import SerdeError
from kstream.schema_registry import FORMATS as REGISTRY_FORMATS
from kstream.schema_registry import registry_serde
from kstream.serde_base import (
    NO_CONTEXT,
    BadRecord,
    ContextSerde,
    OnError,
    Serde,
    SerdeContext,
    deserialize_records,
    serialize_records,
)

__all__ = [
    "BUILTIN",
    "BadRecord",
    "ContextSerde",
    "OnError",
    "Serde",
    "SerdeContext",
    "SerdeLike",
    "deserialize_records",
    "null_safe_serde",
    "serde",
    "serialize_records",
]


def _bytes_ser(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise SerdeError(f"bytes serde expects bytes, got {type(v).__name__}: {v!r:.80}")


def _bytes_de(b: bytes | None) -> bytes | None:
    return None if b is None else bytes(b)


def _string_ser(v: Any) -> bytes | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise SerdeError(f"string serde expects str, got {type(v).__name__}: {v!r:.80}")
    return v.encode("utf-8")


def _string_de(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SerdeError(f"string serde: invalid UTF-8 ({e})") from e


def _json_ser(v: Any) -> bytes | None:
    if v is None:
        return None
    try:
        return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as e:
        raise SerdeError(f"json serde: cannot serialize {type(v).__name__}: {e}") from e


def _json_de(b: bytes | None) -> Any:
    if b is None:
        return None
    try:
        return orjson.loads(b)
    except orjson.JSONDecodeError as e:
        raise SerdeError(f"json serde: invalid JSON ({e}): {bytes(b)[:80]!r}") from e


def _fixed(
    fmt: str, label: str, kind: type | tuple[type, ...]
) -> tuple[Callable[[Any], bytes | None], Callable[[bytes | None], Any]]:
    s = struct.Struct(fmt)
    pack, unpack, size = s.pack, s.unpack, s.size

    def ser(v: Any) -> bytes | None:
        if v is None:
            return None
        if (isinstance(v, bool) and kind is not bool) or not isinstance(v, kind):
            raise SerdeError(f"{label} serde expects {_kind_name(kind)}, got {type(v).__name__}")
        try:
            return pack(v)
        except (struct.error, OverflowError) as e:
            raise SerdeError(f"{label} serde: {v!r} does not fit ({e})") from e

    def de(b: bytes | None) -> Any:
        if b is None:
            return None
        if len(b) != size:
            raise SerdeError(f"{label} serde expects {size} bytes, got {len(b)}")
        return unpack(b)[0]

    return ser, de


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _bool_ser(v: Any) -> bytes:
    if not isinstance(v, bool):
        raise SerdeError(f"boolean serde expects bool, got {type(v).__name__}")
    return b"\x01" if v else b"\x00"


def _bool_de(b: bytes) -> bool:
    if b == b"\x01":
        return True
    if b == b"\x00":
        return False
    raise SerdeError(f"boolean serde expects one byte 0x00 or 0x01, got {bytes(b)!r}")


def _uuid_ser(v: Any) -> bytes:
    if isinstance(v, uuid.UUID):
        return str(v).encode("ascii")
    raise SerdeError(f"uuid serde expects uuid.UUID, got {type(v).__name__}")


def _uuid_de(b: bytes) -> uuid.UUID:
    try:
        return uuid.UUID(b.decode("ascii"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SerdeError(f"uuid serde: not a UUID string: {bytes(b)[:60]!r}") from e


_int_ser, _int_de = _fixed(">i", "integer", int)
_long_ser, _long_de = _fixed(">q", "long", int)
_double_ser, _double_de = _fixed(">d", "double", (float, int))
_float_ser, _float_de = _fixed(">f", "float", (float, int))


class _NullSafeSerde(Serde):
    """A built-in serde whose functions pass None through themselves.

    `to_bytes`/`from_bytes` are the functions themselves (instance attributes), which saves a
    Python call per record on the batch paths.
    """

    def __init__(
        self,
        to_bytes: Callable[[Any], bytes | None],
        from_bytes: Callable[[bytes | None], Any],
        name: str,
        c_to_bytes: Callable[[Any], bytes] | None = None,
        c_from_bytes: Callable[[bytes], Any] | None = None,
        fixed: tuple[str, tuple[type, ...]] | None = None,
    ) -> None:
        super().__init__(to_bytes, from_bytes, name)  # type: ignore[arg-type]
        self.to_bytes = to_bytes  # type: ignore[method-assign,assignment]
        self.from_bytes = from_bytes  # type: ignore[method-assign,assignment]
        self.c_to_bytes = c_to_bytes
        self.c_from_bytes = c_from_bytes
        self.fixed = fixed


def null_safe_serde(
    to_bytes: Callable[[Any], bytes | None],
    from_bytes: Callable[[bytes | None], Any],
    name: str,
) -> Serde:
    """A serde made of functions that pass None through themselves: the batch paths call them
    directly, one Python call per value instead of two (for serdes built on others, such as
    the windowed key formats)."""
    return _NullSafeSerde(to_bytes, from_bytes, name)


BUILTIN: dict[str, Serde] = {
    # bytes(b) is b for bytes and raises for None; str.encode and bytes.decode raise for
    # anything but str and bytes; orjson.loads raises for None; orjson.dumps without options
    # raises where the full function's OPT_NON_STR_KEYS is needed (a dict with non-str keys)
    # and writes everything else alike
    "bytes": _NullSafeSerde(_bytes_ser, _bytes_de, "bytes", c_from_bytes=bytes),
    "string": _NullSafeSerde(
        _string_ser, _string_de, "string", c_to_bytes=str.encode, c_from_bytes=bytes.decode
    ),
    "json": _NullSafeSerde(
        _json_ser, _json_de, "json", c_to_bytes=orjson.dumps, c_from_bytes=orjson.loads
    ),
    # `fixed`: the struct code and the exact classes `_fixed`'s check lets through as they are
    # (bool is refused there, so it is not among them)
    "integer": _NullSafeSerde(_int_ser, _int_de, "integer", fixed=("i", (int,))),
    "long": _NullSafeSerde(_long_ser, _long_de, "long", fixed=("q", (int,))),
    "double": _NullSafeSerde(_double_ser, _double_de, "double", fixed=("d", (float, int))),
    "float": _NullSafeSerde(_float_ser, _float_de, "float", fixed=("f", (float, int))),
    "boolean": Serde(_bool_ser, _bool_de, "boolean"),
    "uuid": Serde(_uuid_ser, _uuid_de, "uuid"),
}
BUILTIN["str"] = BUILTIN["string"]
BUILTIN["int"] = BUILTIN["integer"]

SerdeLike = str | Serde | tuple[Callable[[Any], bytes], Callable[[bytes], Any]] | None


def serde(spec: SerdeLike, **options: Any) -> Serde:
    """Resolve a serde given by name, object or `(serializer_fn, deserializer_fn)` pair.

    `None` means the default serde, bytes. The Schema Registry formats take their settings as
    keywords: `serde("avro", registry="http://registry:8081", schema=AVRO_SCHEMA)` (see
    `kstream.schema_registry.registry_serde`).
    """
    if isinstance(spec, str) and spec in REGISTRY_FORMATS:
        if "registry" not in options:
            raise SerdeError(
                f"serde {spec!r} reads its schemas from a Schema Registry: "
                f"serde({spec!r}, registry='http://host:8081', ...)"
            )
        return registry_serde(spec, **options)
    if options:
        raise SerdeError(f"serde {spec!r} takes no options, got {sorted(options)}")
    if spec is None:
        return BUILTIN["bytes"]
    if isinstance(spec, Serde):
        return spec
    if isinstance(spec, str):
        try:
            return BUILTIN[spec]
        except KeyError:
            names = ", ".join(sorted(k for k in BUILTIN if k not in ("str", "int")))
            raise SerdeError(f"unknown serde {spec!r}; built-in serdes are: {names}") from None
    if isinstance(spec, tuple) and len(spec) == 2 and all(callable(f) for f in spec):
        return Serde(spec[0], spec[1], "custom")
    if hasattr(spec, "serialize") and hasattr(spec, "deserialize"):
        return _duck(spec)
    raise SerdeError(
        f"cannot use {spec!r} as a serde: give a name, a Serde, or a "
        "(serializer_fn, deserializer_fn) pair"
    )


def _duck(obj: Any) -> Serde:
    class _Wrapped(ContextSerde):
        def serialize(self, value: Any, ctx: SerdeContext | None = None) -> bytes | None:
            if value is None:
                return None
            return bytes(obj.serialize(value, ctx or NO_CONTEXT))

        def deserialize(self, data: bytes | None, ctx: SerdeContext | None = None) -> Any:
            if data is None:
                return None
            return obj.deserialize(data, ctx or NO_CONTEXT)

    return _Wrapped(getattr(obj, "name", type(obj).__name__))


# --- "auto": the serde of internal stores and repartition topics when the user gives none ----
# Data only, never pickles (see kstream.auto_codec).

BUILTIN["auto"] = Serde(auto_codec.encode, auto_codec.decode, "auto")
