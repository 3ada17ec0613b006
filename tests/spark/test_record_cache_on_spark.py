"""The record cache (`cache_max_bytes`) on Spark (issue 46, item 1).

A micro-batch is the Spark engine's commit: with the cache on, a key's table updates within a
batch are forwarded once, at the batch's end, as `Change(latest, value before the batch)` with
the latest update's timestamp, or earlier when the task's budget is spent (as the native
runtime's cache does between two commits). On local[2] and the session broker, over 2
partitions: a count and a table re-grouped from it (whose subtractor needs the cache's old
values) give each key's count once per batch and the right totals; a budget of one byte
evicts at every write and forwards every update, as with the cache off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, final_values, produce, read_all

from kstream.dsl import StreamBuilder
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

T0 = 1_700_000_000_000
KEYS = 6
RECORDS = 60


def counted(src: str, counts: str, totals: str) -> Topology:
    b = StreamBuilder()
    c = b.stream(src, key_serde="string", value_serde="string").group_by_key().count()
    c.to_stream().to(counts, key_serde="string", value_serde="long")
    c.group_by(lambda _k, n: ("all", n), key_serde="string", value_serde="long").reduce(
        lambda a, v: a + v, lambda a, v: a - v
    ).to_stream().to(totals, key_serde="string", value_serde="long")
    return b.build()


@pytest.mark.parametrize(
    ("cache", "per_batch", "most"),
    [
        (1_000_000, None, 1),  # one batch: one update per key
        (1_000_000, 20, 3),  # 60 records in batches of 20: at most one per key and batch
        (1, None, RECORDS),  # a budget of one byte: every update, as with the cache off
    ],
    ids=["one-batch", "batches-of-20", "one-byte"],
)
def test_the_record_cache_forwards_a_keys_updates_once_per_batch(
    spark: Any,
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    cache: int,
    per_batch: int | None,
    most: int,
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    src, counts, totals = unique_name("in"), unique_name("counts"), unique_name("totals")
    create_topics(bs, {src: 2, counts: 2, totals: 1})
    records = [(f"k{i % KEYS}", "x", T0 + i) for i in range(RECORDS)]
    produce(bs, src, records, "string", "string")
    run(
        counted(src, counts, totals),
        unique_name("spark"),
        bs,
        str(tmp_path / "cp"),
        spark=spark,
        config={"cache_max_bytes": cache},
        max_records_per_batch=per_batch,
    )
    got = read_all(bs, counts, "string", "long")
    assert final_values(got) == {f"k{k}": RECORDS // KEYS for k in range(KEYS)}
    updates = Counter(r.key for r in got)
    if most == RECORDS:
        assert sum(updates.values()) == RECORDS
    else:
        assert max(updates.values()) <= most
    for k in updates:  # each forwarded update is the key's latest: its count, its timestamp
        mine = [(r.value, r.timestamp) for r in got if r.key == k]
        assert [v for v, _ in mine] == sorted({v for v, _ in mine})
        last = max(ts for key, _, ts in records if key == k)
        assert mine[-1] == (RECORDS // KEYS, last)
    total = read_all(bs, totals, "string", "long")
    assert final_values(total) == {"all": RECORDS}
    if most == 1:
        assert [r.value for r in total] == [RECORDS]
