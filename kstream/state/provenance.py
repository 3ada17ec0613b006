"""The provenance header kstream stamps on what it produces when `broker_compat` asks for it.

Part of the broker-compatibility component (kstream.broker_compat, docs/architecture.md,
"Exactly-once"): on Apache Kafka no header is written.

`kstream.src` = the source topic, partition and offset of the input record that caused the
output, plus the output's index among that input's outputs. It is deterministic, so a retry of
the same input produces the same ids. Restore uses it to skip changelog records whose source
offset was never committed (records of aborted transactions that a broker still shows).

Binary form: version byte 0x01, partition (int32), offset (int64), index (int32), all
big-endian, then the topic in UTF-8 (the rest of the value).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

HEADER = "kstream.src"
_V1 = 1
NO_SOURCE = b"\x00"
"""The header value of a changelog record no input record caused (a punctuation's write, an
expiry): with every changelog record stamped, one without a header was not written by kstream
(restore refuses it, kstream.state.restore_check.provenance_problem). `decode` reads it as None."""
_FMT = struct.Struct(">BiqI")


class Provenance(NamedTuple):
    topic: str
    partition: int
    offset: int
    output_index: int = 0


def encode(topic: str, partition: int, offset: int, index: int = 0) -> bytes:
    return _FMT.pack(_V1, partition, offset, index) + topic.encode("utf-8")


def encoder(topic: str, partition: int) -> Callable[[int, int, bytes], bytes]:
    """`encode` for one source partition, for writers that stamp every output record.

    Returns `enc` and, with `tb = topic.encode("utf-8")`, `enc(offset, index, tb)` equals
    `encode(topic, partition, offset, index)`. The topic is encoded once and the header is
    packed in one C call (topic included) instead of a pack, an encode and a concatenation
    per record. The caller keeps `tb` beside `enc`.
    """
    size = len(topic.encode("utf-8"))
    return partial(struct.Struct(f">BiqI{size}s").pack, _V1, partition)


def decode(value: bytes | None) -> Provenance | None:
    """The provenance in a header value, or None when absent or not in a known form."""
    if value is None or len(value) < _FMT.size or value[0] != _V1:
        return None
    _, partition, offset, index = _FMT.unpack_from(value)
    try:
        topic = value[_FMT.size :].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return Provenance(topic, partition, offset, index)


def from_headers(headers: list[tuple[str, bytes | None]] | None) -> Provenance | None:
    """The last `kstream.src` header of a message (None if it has none)."""
    if not headers:
        return None
    found = None
    for k, v in headers:
        if k == HEADER:
            found = v
    return decode(found)


def header_value(headers: Any) -> bytes | None:
    """The value of the last `kstream.src` header (None when there is none)."""
    found = None
    if headers:
        for k, v in headers:
            if k == HEADER:
                found = v
    return found
