"""The existing-dead-letter-topic case (issue 46) for both engines: input, topology, check.

Teams that turn off topic auto-creation create `dlq_topic` themselves, with whatever partition
count they like; Kafka Streams' dead-letter queue (KIP-1034) writes to it as it is. The input
is 50 good JSON records and one that is not JSON; the one dead letter carries the failed
record's key, so the default partitioner places it (`BAD_KEY`: partition 1 of 2, not forced
to 0). Everything is read back with a plain confluent-kafka read_committed consumer
(`support.committed_reader`), not with kstream.
"""

from __future__ import annotations

import json

from kstream.dsl import StreamBuilder
from kstream.kafka.partitioner import default_partition
from kstream.topology.topology import Topology
from support.committed_reader import partition_count, read_committed

T0 = 1_700_000_000_000
GOOD = 50
BAD_AT = 20  # the input's offset of the record that is not JSON
BAD_KEY = b"poison"  # on partition 1 of 2 under Kafka's default partitioner


def bad_input() -> list[tuple[bytes, bytes, int, list[tuple[str, bytes]]]]:
    """`GOOD` JSON records and, at offset `BAD_AT`, one that is not: (key, value, timestamp,
    headers), header `trace` = t<offset>."""
    good = [(f"k{i}".encode(), json.dumps({"n": i}).encode()) for i in range(GOOD)]
    rows = [*good[:BAD_AT], (BAD_KEY, b"{not json"), *good[BAD_AT:]]
    return [(k, v, T0 + i, [("trace", f"t{i}".encode())]) for i, (k, v) in enumerate(rows)]


def topology(inp: str, out: str) -> Topology:
    """`inp` (string keys, JSON values) -> 2 * n -> `out` (string keys, long values)."""
    b = StreamBuilder()
    b.stream(inp, key_serde="string", value_serde="json").map_values(lambda v: v["n"] * 2).to(
        out, key_serde="string", value_serde="long"
    )
    return b.build()


def check_outputs(bootstrap: str, out: str) -> None:
    """`out` holds each good record's output once."""
    got = sorted((r.key, r.value) for r in read_committed(bootstrap, out))
    want = sorted((f"k{i}".encode(), (2 * i).to_bytes(8, "big")) for i in range(GOOD))
    assert got == want


def check_dead_letter_topic(bootstrap: str, dlq: str, inp: str, partitions: int) -> None:
    """`dlq` has `partitions` partitions and holds the one dead letter, on its key's partition
    under the default partitioner, with the input's headers, kstream's `kstream.error.*` and
    Kafka's `__streams.errors.*` (KIP-1034) headers."""
    assert partition_count(bootstrap, dlq) == partitions
    (dead,) = read_committed(bootstrap, dlq)
    assert (dead.key, dead.value) == (BAD_KEY, b"{not json")
    assert dead.partition == default_partition(BAD_KEY, partitions)
    h = dead.headers
    assert h["trace"] == f"t{BAD_AT}".encode()
    assert h["kstream.error.exception"] == b"SerdeError"
    assert h["__streams.errors.exception"] == b"kstream.errors.SerdeError"
    assert b"invalid JSON" in (h["kstream.error.message"] or b"")
    assert h["kstream.error.topic"] == h["__streams.errors.topic"] == inp.encode()
    assert h["kstream.error.partition"] == h["__streams.errors.partition"] == b"0"
    assert h["kstream.error.offset"] == h["__streams.errors.offset"] == str(BAD_AT).encode()
