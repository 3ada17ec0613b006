"""The provenance header every record kstream produces carries.

See docs/architecture.md, "Exactly-once".

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


Mark = tuple[str, str, int]
"""(input topic, source topic, source partition): one stream of provenance ids."""


class HighMarks:
    """Drops repeats of records kstream wrote, keeping one high mark per stream of ids.

    kstream writers emit the outputs of one source partition in its offset order (a task reads
    each partition in order and its producer keeps order per partition), so on one input topic
    the ids from one source partition only grow, and a repeat (a batch shown again after an
    aborted transaction, or written again after an at-least-once retry) is at or below the
    highest id seen. A mark per (input topic, source partition) stays small where a set of
    every id would grow with the input and cost a changelog record per record.
    """

    __slots__ = ("changed", "dropped", "marks")

    def __init__(self, marks: dict[Mark, tuple[int, int, int]] | None = None) -> None:
        # mark -> (offset, output index, timestamp of the record that set it)
        self.marks: dict[Mark, tuple[int, int, int]] = dict(marks or {})
        self.changed: dict[Mark, Any] = {}
        self.dropped = 0

    def admit(self, input_topic: str, value: bytes | None, timestamp: int, cause: Any) -> bool:
        """False for a repeat; True otherwise (and the mark moves up, remembering `cause`)."""
        src = decode(value)
        if src is None:
            return True
        mark = (input_topic, src.topic, src.partition)
        last = self.marks.get(mark)
        if last is not None and (src.offset, src.output_index) <= last[:2]:
            self.dropped += 1
            return False
        self.marks[mark] = (src.offset, src.output_index, timestamp)
        self.changed[mark] = cause
        return True

    def expire(self, before: int) -> list[Mark]:
        """Forget marks last moved by a record older than `before`; the ones forgotten."""
        gone = [m for m, v in self.marks.items() if v[2] < before]
        for m in gone:
            del self.marks[m]
            self.changed.pop(m, None)
        return gone


def header_value(headers: Any) -> bytes | None:
    """The value of the last `kstream.src` header (None when there is none)."""
    found = None
    if headers:
        for k, v in headers:
            if k == HEADER:
                found = v
    return found
