"""Foreign-key table joins on Spark (issue 46, item 1).

Orders re-keyed by order id from a stream (a repartition topic upstream of the join), joined on
the customer id their value names with a customers table, an inner and a left join; the left
join's results re-grouped and counted per customer (a repartition downstream). The join's two
sides feed each other, subscriptions one way and responses the other, so under availableNow
their queries take turns until a round writes nothing (kstream.spark.runner.TaskQueries). On
local[2] and the broker, in micro-batches of 10 records, with customers changing and orders
moving to other customers or going away: each output ends at the table the native runtime's
ends at, and the test driver's (a foreign-key join's intermediate results depend on when the
answers come back, on Kafka Streams as here: a count the driver saw rise early and fall back
to 0 may never have risen here). Under a processingTime trigger the queries run side by side
and end at the driver's tables too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import (
    create_topics,
    driver_in_time_order,
    final_table,
    final_values,
    finish_native,
    produce,
    read_all,
    start_native,
)

from kstream.dsl import StreamBuilder
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

T0 = 1_700_000_000_000


def fk_topology(raw: str, customers: str, inner: str, left: str, per_customer: str) -> Topology:
    b = StreamBuilder()
    # "order-id customer qty" (None: the order is gone), keyed by order id after a repartition
    orders = (
        b.stream(raw, key_serde="string", value_serde="string")
        .group_by(lambda _k, v: v.split()[0], key_serde="string", value_serde="string")
        .reduce(lambda _a, v: v)
        .map_values(lambda v: None if v.endswith(" gone") else v)
    )
    names = b.table(customers, key_serde="string", value_serde="string")
    orders.join(names, lambda v: v.split()[1], lambda o, c: f"{o} -> {c}").to_stream().to(
        inner, key_serde="string", value_serde="string"
    )
    lefts = orders.left_join(names, lambda v: v.split()[1], lambda o, c: f"{o} -> {c}")
    lefts.to_stream().to(left, key_serde="string", value_serde="string")
    lefts.group_by(
        lambda _k, v: (v.split()[1], v), key_serde="string", value_serde="string"
    ).count().to_stream().to(per_customer, key_serde="string", value_serde="long")
    return b.build()


Inputs = tuple[str, str, list[tuple[Any, Any, int]], list[tuple[Any, Any, int]]]


def fk_inputs(bs: str, unique_name: Callable[[str], str], outputs: list[str]) -> Inputs:
    """The customers table and the orders stream on the broker (and `outputs` created):
    customers changing and one leaving, orders moving to other customers, to one that does not
    exist, or going away."""
    rng = random.Random(5)
    raw, customers = unique_name("raw"), unique_name("customers")
    create_topics(bs, {raw: 2, customers: 2, **{t: 2 for t in outputs}})
    people = [f"c{i}" for i in range(6)]
    names = [(c, f"name-{c}-{v}", T0 + 10 * i + v) for v in range(3) for i, c in enumerate(people)]
    names += [("c5", None, T0 + 500)]  # a customer leaves
    produce(bs, customers, names, "string", "string")
    orders = []
    for i in range(40):
        order = f"o{i % 15}"
        who = rng.choice([*people, "c9"])  # c9: no such customer
        gone = " gone" if i > 30 and i % 4 == 0 else ""
        # keyed by order id, an order's changes stay in one partition, in order
        orders.append((order, f"{order} {who} {i}{gone}", T0 + 20 * i))
    produce(bs, raw, orders, "string", "string")
    return raw, customers, names, orders


def expected(inputs: Inputs, outs: list[str]) -> dict[str, dict[Any, Any]]:
    """Each output's final table as the test driver ends it (the per-customer counts without
    the zeros: a count that an answer the driver got early raised, and took back, may never
    have risen on a broker)."""
    raw, customers, names, orders = inputs
    ref = driver_in_time_order(
        fk_topology(raw, customers, *outs),
        {customers: ("string", "string", names), raw: ("string", "string", orders)},
        {t: ("string", "long" if t == outs[2] else "string") for t in outs},
    )
    want = {t: final_table(ref[t]) for t in outs}
    want[outs[2]] = {k: n for k, n in want[outs[2]].items() if n}
    return want


def ended_at(bs: str, outs: list[str]) -> dict[str, dict[Any, Any]]:
    """Each output's final table as written (the per-customer counts without the zeros)."""
    got = {
        t: final_values(read_all(bs, t, "string", "long" if t == outs[2] else "string"))
        for t in outs
    }
    got[outs[2]] = {k: n for k, n in got[outs[2]].items() if n}
    return got


def test_foreign_key_joins_on_spark_end_where_native_and_the_driver_end(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """availableNow: the join's two queries take turns, in micro-batches of 10 records."""
    from kstream.spark import run

    bs = bootstrap_servers
    outs = {side: [unique_name(f"{side}-{t}") for t in ("inner", "left", "per")] for side in "sn"}
    inputs = fk_inputs(bs, unique_name, [*outs["s"], *outs["n"]])
    raw, customers = inputs[:2]
    app = start_native(fk_topology(raw, customers, *outs["n"]), unique_name("n"), bs, str(tmp_path))
    run(
        fk_topology(raw, customers, *outs["s"]),
        unique_name("spark"),
        bs,
        str(tmp_path / "spark"),
        spark=spark,
        max_records_per_batch=10,
    )
    finish_native(app, bs)
    got, native = ended_at(bs, outs["s"]), ended_at(bs, outs["n"])
    want = expected(inputs, outs["s"])
    for mine, theirs in zip(outs["s"], outs["n"], strict=True):
        assert got[mine] == native[theirs], mine
        assert got[mine] == want[mine], mine
        assert len(got[mine]) > 3, mine


@pytest.mark.timeout(600)
def test_foreign_key_joins_under_a_processing_time_trigger_end_where_the_driver_ends(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """processingTime: every query runs side by side, each batch reading what the others have
    committed, so subscriptions and responses flow between the join's two queries as between
    Kafka Streams' tasks. The test waits for the outputs to reach the driver's tables, then
    stops the queries."""
    from kstream.spark import start

    bs = bootstrap_servers
    outs = [unique_name(f"p-{t}") for t in ("inner", "left", "per")]
    inputs = fk_inputs(bs, unique_name, outs)
    raw, customers = inputs[:2]
    want = expected(inputs, outs)
    queries = start(
        fk_topology(raw, customers, *outs),
        unique_name("spark-p"),
        bs,
        str(tmp_path / "spark"),
        trigger="processingTime=200ms",
        spark=spark,
        max_records_per_batch=10,
    )
    try:
        deadline = time.monotonic() + 400
        while (got := ended_at(bs, outs)) != want:
            for q in queries.queries:
                assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, f"the outputs stopped at {got}, not {want}"
            time.sleep(2)
    finally:
        queries.stop()
        queries.close()
    assert all(len(got[t]) > 3 for t in outs)
