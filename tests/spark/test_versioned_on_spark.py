"""Versioned tables and stream-table joins with a grace period on Spark (issue 46, item 1).

A versioned table (history of 2 s) fed out-of-order updates, its changes written out, and a
stream joined with it behind a grace period of 300 ms, so each order meets the price valid at
its own time, even one that arrives after the order, on local[2] over 2 partitions:

- in micro-batches of 7 records, the history crossing many batches (and the restarts of their
  tasks), the table's changes are the native runtime's, key for key;
- the join's results are the test driver's for each partition with both topics read in Kafka
  Streams' order (merged by timestamp): in one micro-batch, as a batch merges its topics by
  timestamp and a cap on a batch cuts the topics by offsets, not by time (docs/spark.md). The
  grace buffer's release across batches is tested on a task alone
  (tests/spark/test_tasks.py, test_a_versioned_tables_batches_read_what_they_touch).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import (
    create_topics,
    driver_in_time_order,
    finish_native,
    produce,
    read_all,
    start_native,
)

from kstream.dsl import StreamBuilder
from kstream.dsl.joined import Joined
from kstream.kafka.partitioner import default_partition
from kstream.serde import serde
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

T0 = 1_700_000_000_000
KEYS = [f"p{i}" for i in range(5)]


def changes(prices: str, out: str) -> Topology:
    b = StreamBuilder()
    table = b.table(prices, key_serde="string", value_serde="long", versioned=2000)
    table.to_stream().to(out, key_serde="string", value_serde="long")
    return b.build()


def joined(prices: str, orders: str, out: str) -> Topology:
    b = StreamBuilder()
    table = b.table(prices, key_serde="string", value_serde="long", versioned=2000)
    b.stream(orders, key_serde="string", value_serde="long").join(
        table, lambda qty, price: qty * price, joined=Joined.with_grace_period(300)
    ).to(out, key_serde="string", value_serde="long")
    return b.build()


def per_key(records: list[Any]) -> dict[Any, list[tuple[Any, int]]]:
    out: dict[Any, list[tuple[Any, int]]] = {}
    for r in records:
        out.setdefault(r.key, []).append((r.value, r.timestamp))
    return out


def inputs(seed: int) -> tuple[list[Any], list[Any]]:
    """Price updates up to 400 ms out of order, and orders up to 150 ms out of order."""
    rng = random.Random(seed)
    updates = [
        (rng.choice(KEYS), rng.randint(1, 50), T0 + i * 100 + rng.randint(-400, 400))
        for i in range(60)
    ]
    bought = [
        (rng.choice(KEYS), rng.randint(1, 4), T0 + 500 + i * 70 + rng.randint(-150, 150))
        for i in range(80)
    ]
    return updates, bought


def test_a_versioned_tables_changes_across_batches_as_on_native(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    prices, mine, theirs = unique_name("prices"), unique_name("changes"), unique_name("native")
    create_topics(bs, {prices: 2, mine: 2, theirs: 2})
    updates, _ = inputs(11)
    produce(bs, prices, updates, "string", "long")
    app = start_native(changes(prices, theirs), unique_name("native"), bs, str(tmp_path))
    run(
        changes(prices, mine),
        unique_name("spark"),
        bs,
        str(tmp_path / "spark"),
        spark=spark,
        max_records_per_batch=7,
    )
    finish_native(app, bs)
    got = per_key(read_all(bs, mine, "string", "long"))
    assert got == per_key(read_all(bs, theirs, "string", "long"))
    assert sum(len(v) for v in got.values()) > 20


def test_a_grace_join_meets_the_price_of_its_time_as_kafka_streams_orders_it(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    prices, orders, out = unique_name("prices"), unique_name("orders"), unique_name("out")
    create_topics(bs, {prices: 2, orders: 2, out: 2})
    updates, bought = inputs(12)
    produce(bs, prices, updates, "string", "long")
    produce(bs, orders, bought, "string", "long")
    run(joined(prices, orders, out), unique_name("spark"), bs, str(tmp_path), spark=spark)
    got = per_key(read_all(bs, out, "string", "long"))

    keys = serde("string")

    def part(rows: list[Any], p: int) -> list[Any]:
        return [r for r in rows if default_partition(keys.to_bytes(r[0]) or b"", 2) == p]

    want: dict[Any, list[tuple[Any, int]]] = {}
    for p in (0, 1):
        ref = driver_in_time_order(
            joined(prices, orders, out),
            {
                prices: ("string", "long", part(updates, p)),
                orders: ("string", "long", part(bought, p)),
            },
            {out: ("string", "long")},
        )
        for k, v in ref[out]:
            want.setdefault(k, []).append(v)
    assert {k: [v for v, _ in u] for k, u in got.items()} == want
    assert sum(len(v) for v in want.values()) > 40
