"""Bad input for the error-policy tests on Spark (local and the standalone cluster).

The input is the native engine's (`tests/e2e/test_bad_input.py`): JSON values with a header
each, offset 3 not JSON (a deserialization error), offset 6 a division by zero (a processing
error). The topologies are built for every engine from the same functions, so their node
names, and with them the errors' words, are the same. This module imports kstream only: the
jobs submitted to the standalone cluster import it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.records import Record
from kstream.topology.processor import Processor
from kstream.topology.topology import Topology

T0 = 1_700_000_000_000
# offset: (key, raw value); offset 3 is not JSON, offset 6 divides by zero
INPUT = [
    (b"a", b'{"d": 1}'),
    (b"b", b'{"d": 2}'),
    (b"c", b'{"d": 4}'),
    (b"bad-json", b"{not json"),
    (b"d", b'{"d": 5}'),
    (b"e", b'{"d": 10}'),
    (b"zero", b'{"d": 0}'),
    (b"f", b'{"d": 20}'),
]
GOOD = {"a": 100, "b": 50, "c": 25, "d": 20, "e": 10, "f": 5}
BAD_JSON, ZERO = 3, 6


@dataclass(frozen=True)
class Topics:
    """An app's input topics (`a`, `b`: both get `INPUT`) and its own output topics."""

    a: str
    b: str
    out_a: str
    out_b: str


def input_records() -> list[tuple[bytes, bytes, int, list[tuple[str, bytes]]]]:
    """`INPUT` as (key, value, timestamp, headers): timestamp T0 + offset, header `trace` =
    t<offset>."""
    return [(k, v, T0 + i, [("trace", f"t{i}".encode())]) for i, (k, v) in enumerate(INPUT)]


def stateless(b: StreamBuilder, t: Topics) -> None:
    """The native bad-input test's topology: `a` -> 100 // d -> `out_a`."""
    b.stream(t.a, key_serde="string", value_serde="json").map_values(lambda v: 100 // v["d"]).to(
        t.out_a, key_serde="string", value_serde="long"
    )


def aggregate(b: StreamBuilder, t: Topics) -> None:
    """`b` -> the sum of 100 // d per key -> `out_b`."""
    b.stream(t.b, key_serde="string", value_serde="json").group_by_key().aggregate(
        lambda: 0, lambda _k, v, agg: agg + 100 // v["d"], value_serde="long"
    ).to_stream().to(t.out_b, key_serde="string", value_serde="long")


def only_stateless(t: Topics) -> Topology:
    """No state: on Spark, one query run inside the source's read tasks."""
    b = StreamBuilder()
    stateless(b, t)
    return b.build()


def only_aggregate(t: Topics) -> Topology:
    """One stateful sub-topology (no repartition: `group_by_key`), writing `out_b`."""
    b = StreamBuilder()
    aggregate(b, t)
    return b.build()


def stateless_and_aggregate(t: Topics) -> Topology:
    """Two sub-topologies: the stateless one in the source's read tasks, the aggregate in
    Spark state."""
    b = StreamBuilder()
    stateless(b, t)
    aggregate(b, t)
    return b.build()


class Divide(Processor):
    """100 // d in a user processor: Spark runs it in a task with Spark state."""

    def process(self, record: Record) -> None:
        self.ctx.forward(record.with_value(100 // record.value["d"]))


def user_processor(t: Topics) -> Topology:
    """`a` -> `Divide` -> `out_a`: a sub-topology whose tasks keep Spark state."""
    b = StreamBuilder()
    b.stream(t.a, key_serde="string", value_serde="json").process(Divide).to(
        t.out_a, key_serde="string", value_serde="long"
    )
    return b.build()


TopologyOf = Callable[[Topics], Topology]


Read = tuple[Any, Any, int, list[tuple[str, bytes | None]]]
"""A record read back: key, value, timestamp, headers (`spark_helpers.read_back`)."""


def by_origin(dead: list[Read]) -> list[Read]:
    """Dead letters in the order of the records they copy (topic, offset)."""

    def origin(rec: Read) -> tuple[bytes, int]:
        hdrs = dict(rec[3])
        return (hdrs["kstream.error.topic"] or b"", int(hdrs["kstream.error.offset"] or b"-1"))

    return sorted(dead, key=origin)


def check_dead_letter(rec: Read, topic: str, offset: int, exception: str, words: str) -> None:
    """`rec` is the dead letter of `INPUT[offset]` read from `topic`: the raw record, its own
    header, then Kafka's `__streams.errors.*` headers (KIP-1034) and kstream's own
    `kstream.error.*` ones (the message containing `words`)."""
    key, value = INPUT[offset]
    assert rec[:3] == (key, value, T0 + offset)
    names = [k for k, _ in rec[3]]
    assert names == [
        "trace",
        "__streams.errors.exception",
        "__streams.errors.message",
        "__streams.errors.stacktrace",
        "__streams.errors.topic",
        "__streams.errors.partition",
        "__streams.errors.offset",
        "kstream.error.exception",
        "kstream.error.message",
        "kstream.error.topic",
        "kstream.error.partition",
        "kstream.error.offset",
    ]
    hdrs = dict(rec[3])
    assert hdrs["trace"] == f"t{offset}".encode()
    assert hdrs["kstream.error.exception"] == exception.encode()
    assert words.encode() in (hdrs["kstream.error.message"] or b"")
    assert hdrs["kstream.error.topic"] == topic.encode()
    assert hdrs["kstream.error.partition"] == b"0"
    assert hdrs["kstream.error.offset"] == str(offset).encode()
    assert (hdrs["__streams.errors.exception"] or b"").endswith(b"." + exception.encode())
    assert hdrs["__streams.errors.offset"] == str(offset).encode()
    assert hdrs["__streams.errors.topic"] == topic.encode()
