"""From a key in a URL to a typed store key and back to JSON.

A URL carries text; a store holds typed keys. The store's key serde says which type is meant
(`long` -> int, `string` -> str, ...), so `/stores/counts/keys/42` means the int 42 for a
long-keyed store and the string "42" for a string-keyed one. Stores without a declared key type
(the internal `auto` serde, JSON) read the text as a string unless `?key_type=` says otherwise.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import uuid
from typing import Any

from kstream.serde import Serde

__all__ = ["KEY_TYPES", "BadKey", "jsonable", "key_type_of", "parse_key"]

KEY_TYPES = ("string", "int", "float", "bool", "json", "bytes", "uuid")

_BY_SERDE = {
    "string": "string",
    "str": "string",
    "integer": "int",
    "int": "int",
    "long": "int",
    "double": "float",
    "float": "float",
    "boolean": "bool",
    "uuid": "uuid",
    "bytes": "bytes",
    "json": "string",
    "auto": "string",
}

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class BadKey(ValueError):
    """The key text does not fit the store's key type."""


def key_type_of(key_serde: Serde) -> str:
    """The key type a serde implies; custom serdes take their keys as strings."""
    return _BY_SERDE.get(getattr(key_serde, "name", ""), "string")


def parse_key(text: str, key_type: str, serde_name: str = "") -> Any:
    """The typed key `text` stands for; BadKey with a reason when it cannot be one."""
    if key_type not in KEY_TYPES:
        raise BadKey(f"unknown key_type {key_type!r}; expected one of {', '.join(KEY_TYPES)}")
    if key_type == "string":
        return text
    if key_type == "bytes":
        return text.encode("utf-8")
    if key_type == "int":
        try:
            value = int(text, 10)
        except ValueError:
            raise BadKey(f"key {text!r} is not an integer") from None
        lo, hi = _INT32 if serde_name in ("integer", "int") else _INT64
        if not lo <= value <= hi:
            raise BadKey(f"key {text} is out of range for a {serde_name or 'long'} key")
        return value
    if key_type == "float":
        try:
            f = float(text)
        except ValueError:
            raise BadKey(f"key {text!r} is not a number") from None
        if math.isnan(f):
            raise BadKey("key NaN cannot be looked up")
        return f
    if key_type == "bool":
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        raise BadKey(f"key {text!r} is not a boolean (true or false)")
    if key_type == "uuid":
        try:
            return uuid.UUID(text)
        except ValueError:
            raise BadKey(f"key {text!r} is not a UUID") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise BadKey(f"key {text!r} is not JSON: {e}") from None


def jsonable(value: Any) -> Any:
    """`value` in a form `json.dumps` takes: bytes as text (or base64), objects as dicts."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, dict):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if hasattr(value, "_asdict"):
        return {k: jsonable(v) for k, v in value._asdict().items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return str(value)
