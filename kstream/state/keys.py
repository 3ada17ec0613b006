"""Byte encodings whose lexicographic order is the order users expect.

Timestamps are signed 64-bit: adding 2**63 and packing big-endian makes byte order equal to
numeric order. Keys inside composite keys are escaped (0x00 -> 0x00 0xFF) and terminated with
0x00 0x01, so no encoded key is a prefix of another and (key, time) sorts key first, then time,
even when one user key is a prefix of another.
"""

from __future__ import annotations

import struct

TS_MIN = -(1 << 63)
TS_MAX = (1 << 63) - 1
_OFF = 1 << 63
_Q = struct.Struct(">Q")
_I = struct.Struct(">I")
TERM = b"\x00\x01"


def ts8(t: int) -> bytes:
    return _Q.pack(t + _OFF)


def unts8(b: bytes, at: int = 0) -> int:
    return int(_Q.unpack_from(b, at)[0]) - _OFF


def seq4(n: int) -> bytes:
    return _I.pack(n & 0xFFFFFFFF)


def unseq4(b: bytes, at: int = 0) -> int:
    return int(_I.unpack_from(b, at)[0])


def esc(key: bytes) -> bytes:
    return key.replace(b"\x00", b"\x00\xff") + TERM


def unesc(b: bytes, at: int = 0) -> tuple[bytes, int]:
    """Decode an escaped key starting at `at`; returns (key, offset just past its terminator)."""
    end = b.find(TERM, at)
    if end < 0:
        raise ValueError(f"corrupt composite key (no terminator): {b[:80]!r}")
    return b[at:end].replace(b"\x00\xff", b"\x00"), end + 2


_LEN = struct.Struct(">i")


def blob(b: bytes | None) -> bytes:
    """`b` length-prefixed (4 bytes, big-endian; -1 for None), for packing several byte
    strings into one stored value (the buffers of suppress and of a join with grace)."""
    return _LEN.pack(-1) if b is None else _LEN.pack(len(b)) + b


def unblob(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """The byte string `blob` wrote at `pos` of `data`, and the position after it."""
    n = _LEN.unpack_from(data, pos)[0]
    pos += 4
    if n < 0:
        return None, pos
    return bytes(data[pos : pos + n]), pos + n
