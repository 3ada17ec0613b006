"""The "auto" encoding: data, never code, for internal topics and stores without a serde.

Repartition topics, changelogs and stores (Redis included) hold the values of users who gave no
serde. Those bytes are readable and writable by anyone with access to the topic or the Redis
instance, so they must never be unpickled: a crafted value would run code in every instance. The
encoding therefore covers data only: scalars, containers of data, and a few standard types.
Anything else is refused with an error that says how to give a serde.

Store keys must sort the way users expect, so every value is a one-byte type tag followed by an
order-preserving body (tags sort None < bool < numbers < str < bytes < containers). Inside tuples
and lists each element is framed like FoundationDB's tuple layer: a 0x00 byte in an element is
escaped as 0x00 0xFF and each element ends with 0x00 0x01, so `("a",) < ("a", 1) < ("ab",)`
compares bytewise exactly as Python compares the tuples (for elements of one type). Dict and set
bodies are sorted by their encoded members, so equal values always give equal bytes (the Spark
runner groups by these bytes).
"""

from __future__ import annotations

import datetime
import decimal
import struct
import uuid
from collections.abc import Callable
from typing import Any

from kstream.errors import SerdeError
from kstream.records import Windowed

_SIGN = 1 << 63
_Q = struct.Struct(">Q")
_D = struct.Struct(">d")

NONE, FALSE, TRUE = 0x00, 0x01, 0x02
INT, FLOAT, BIG_INT = 0x10, 0x11, 0x12
STR, BYTES = 0x20, 0x30
TUPLE, LIST, DICT, SET, FROZENSET = 0x50, 0x51, 0x52, 0x53, 0x54
DECIMAL, DATETIME, DATE, UUID = 0x60, 0x61, 0x62, 0x63
WINDOWED = 0x70

_END = b"\x00\x01"


def _frame(body: bytes) -> bytes:
    return body.replace(b"\x00", b"\x00\xff") + _END


def _seq(tag: int, items: Any, enc: Callable[[Any], bytes]) -> bytes:
    return bytes((tag,)) + b"".join(_frame(enc(x)) for x in items)


def _encoder() -> Callable[[Any], bytes]:
    """The encoder; a type outside the data types is refused with a SerdeError naming it."""

    def enc(x: Any) -> bytes:
        if x is None:
            return b"\x00"
        if x is True:
            return b"\x02"
        if x is False:
            return b"\x01"
        t = type(x)
        if t is int:
            if -_SIGN <= x < _SIGN:
                return b"\x10" + _Q.pack(x + _SIGN)
            return b"\x12" + str(x).encode("ascii")
        if t is float:
            bits = _Q.unpack(_D.pack(x))[0]
            bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits & _SIGN else bits | _SIGN
            return b"\x11" + _Q.pack(bits)
        if t is str:
            return b"\x20" + bytes(x.encode("utf-8"))
        if t is bytes:
            return b"\x30" + bytes(x)
        if t is tuple:
            return _seq(TUPLE, x, enc)
        if t is list:
            return _seq(LIST, x, enc)
        if t is dict:
            pairs = sorted((enc(k), enc(val)) for k, val in x.items())
            return bytes((DICT,)) + b"".join(_frame(k) + _frame(val) for k, val in pairs)
        if t is set or t is frozenset:
            members = sorted(enc(m) for m in x)
            return bytes((SET if t is set else FROZENSET,)) + b"".join(map(_frame, members))
        if t is decimal.Decimal:
            return b"\x60" + str(x).encode("ascii")
        if t is datetime.datetime:
            return b"\x61" + str(x.isoformat()).encode("ascii")
        if t is datetime.date:
            return b"\x62" + str(x.isoformat()).encode("ascii")
        if t is uuid.UUID:
            return b"\x63" + bytes(x.bytes)
        if t is Windowed:
            return _seq(WINDOWED, x, enc)
        raise SerdeError(
            f"auto serde: cannot store a value of type {t.__module__}.{t.__qualname__} "
            "(internal topics and stores hold data, not code: None, bool, int, float, str, "
            "bytes, tuple, list, dict, set, Decimal, date, datetime, UUID, Windowed); give this "
            "step a serde, e.g. value_serde='json' or a (serialize, deserialize) pair of your own"
        )

    return enc


def _split(body: bytes, start: int) -> list[bytes]:
    """The framed members of a container body, unescaped."""
    out: list[bytes] = []
    cur = bytearray()
    i, n = start, len(body)
    while i < n:
        b = body[i]
        if b == 0:
            nxt = body[i + 1] if i + 1 < n else -1
            if nxt == 0xFF:
                cur.append(0)
                i += 2
                continue
            if nxt == 0x01:
                out.append(bytes(cur))
                cur = bytearray()
                i += 2
                continue
            raise SerdeError("auto serde: damaged container framing")
        cur.append(b)
        i += 1
    if cur:
        raise SerdeError("auto serde: container member without its end marker")
    return out


def _decoder() -> Callable[[bytes], Any]:
    """The decoder of what the encoder writes; any other tag is refused."""

    def dec(x: bytes) -> Any:
        tag = x[0]
        if tag == STR:
            return x[1:].decode("utf-8")
        if tag == INT:
            return _Q.unpack(x[1:])[0] - _SIGN
        if tag == BYTES:
            return bytes(x[1:])
        if tag == FLOAT:
            bits = _Q.unpack(x[1:])[0]
            bits = bits ^ _SIGN if bits & _SIGN else bits ^ 0xFFFFFFFFFFFFFFFF
            return _D.unpack(_Q.pack(bits))[0]
        if tag == TRUE:
            return True
        if tag == FALSE:
            return False
        if tag == NONE:
            return None
        if tag == TUPLE:
            return tuple(dec(m) for m in _split(x, 1))
        if tag == LIST:
            return [dec(m) for m in _split(x, 1)]
        if tag == DICT:
            members = _split(x, 1)
            return {dec(members[i]): dec(members[i + 1]) for i in range(0, len(members), 2)}
        if tag == SET:
            return {dec(m) for m in _split(x, 1)}
        if tag == FROZENSET:
            return frozenset(dec(m) for m in _split(x, 1))
        if tag == BIG_INT:
            return int(x[1:].decode("ascii"))
        if tag == DECIMAL:
            return decimal.Decimal(x[1:].decode("ascii"))
        if tag == DATETIME:
            return datetime.datetime.fromisoformat(x[1:].decode("ascii"))
        if tag == DATE:
            return datetime.date.fromisoformat(x[1:].decode("ascii"))
        if tag == UUID:
            return uuid.UUID(bytes=bytes(x[1:]))
        if tag == WINDOWED:
            key, start, end = (dec(m) for m in _split(x, 1))
            return Windowed(key, start, end)
        raise SerdeError(f"auto serde: unknown type tag 0x{tag:02x}")

    def top(x: bytes) -> Any:
        if not x:
            raise SerdeError("auto serde: empty value (a type tag is expected)")
        return dec(x)

    return top


encode: Callable[[Any], bytes] = _encoder()
decode: Callable[[bytes], Any] = _decoder()
