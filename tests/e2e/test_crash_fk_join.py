"""Crash test of a foreign-key join (KIP-213) under exactly_once_v2: SIGKILLed mid-stream.

The app (e2e.dsl_apps.fk_join, run by e2e.dsl_worker) joins orders (2 partitions) with
customers (3 partitions) on each order's customer id. Every input value is unique (it carries
its position in the input), orders change customer often and customers change value; no row
is deleted. The worker is killed `KILLS` times while input is pending (asserted at each kill)
and restarted on the same state directory. The independent reader (e2e.independent_reader:
plain confluent-kafka, read_committed, no deduplication) then checks every output record:

- wrong: 0. A result `"<order value>+<customer value>"` joins a value the order had with a
  value of the customer that order value names, never the customer of another order value
  (the stale-answer check) and never anything made up;
- duplicated: 0. No result is read twice (with unique inputs each (order value, customer
  value) pair is answered once; an aborted transaction's copy is never read);
- missing: 0. Each order's last result is its last value joined with its customer's last
  value.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from e2e.dsl_apps import customer_of
from e2e.independent_reader import IndependentReader, committed_offsets
from e2e.support import create_topics, dsl_worker, produce, require_kafka, wait_reading

ORDER_PARTITIONS, CUSTOMER_PARTITIONS = 2, 3
ORDERS, CUSTOMERS = 16, 6
UPDATES = 640  # after one first value per customer: a quarter customers, the rest orders
KILLS = 3
DELAY = 0.05  # seconds of work per order update: a kill lands with input pending
BASE = 1_700_000_000_000

Row = tuple[str, str, str, int]  # topic, key, value, timestamp


def _rows(orders: str, customers: str) -> list[Row]:
    """One first value per customer, then updates: every fourth a customer's, the others an
    order's, each naming a customer drawn at random (a seeded draw: the same input each run)."""
    rng = random.Random(213)
    rows: list[Row] = [(customers, f"c{c}", f"c{c}#{c}", BASE + c) for c in range(CUSTOMERS)]
    for n in range(CUSTOMERS, CUSTOMERS + UPDATES):
        ts = BASE + 10 * n
        if n % 4 == 0:
            c = n // 4 % CUSTOMERS
            rows.append((customers, f"c{c}", f"c{c}#{n}", ts))
        else:
            o = n % ORDERS
            rows.append((orders, f"o{o}", f"o{o}#{n}|c{rng.randrange(CUSTOMERS)}", ts))
    return rows


def _produce(bs: str, rows: Sequence[Row]) -> None:
    """`rows` in their order per topic."""
    for topic in dict.fromkeys(t for t, *_ in rows):
        produce(bs, topic, [(k, v, ts) for t, k, v, ts in rows if t == topic], "string", "string")


def _latest(reader: IndependentReader, topic: str) -> dict[str, Any]:
    return {str(r.key): r.value for r in reader.records[topic]}


@pytest.mark.timeout(300)
def test_sigkill_keeps_the_fk_join_exact(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    require_kafka(kafka_broker)
    bs = kafka_broker.bootstrap_servers
    orders, customers, out = unique_name("orders"), unique_name("customers"), unique_name("out")
    app_id = unique_name("fk-crash")
    create_topics(bs, ORDER_PARTITIONS, orders, out)
    create_topics(bs, CUSTOMER_PARTITIONS, customers)
    rows = _rows(orders, customers)
    final_values = {key: value for _t, key, value, _ts in rows}
    expected = {
        key: f"{value}+{final_values[customer_of(value)]}"
        for key, value in final_values.items()
        if key.startswith("o")
    }

    def consumed() -> int:
        """The input records the app has committed as done, on both inputs."""
        return committed_offsets(bs, app_id, orders, ORDER_PARTITIONS) + committed_offsets(
            bs, app_id, customers, CUSTOMER_PARTITIONS
        )

    chunk = len(rows) // (KILLS + 1)
    reader = IndependentReader(bs, [out], values="string")
    topics = {"orders": orders, "customers": customers, "out": out}
    w = dsl_worker(tmp_path, "fk", bs, app_id, delay=DELAY, **topics)
    try:
        w.start()
        for k in range(KILLS):
            lo, mid, hi = k * chunk, k * chunk + chunk // 2, (k + 1) * chunk
            _produce(bs, rows[lo:mid])
            want = lo + chunk // 4
            # on the group's committed input offsets: a read_committed reader can stall behind
            # the killed worker's open transaction until the broker aborts it
            wait_reading(reader, f"{want} inputs done", lambda w_=want: consumed() >= w_, 180, w)
            # the rest of the chunk goes in just before the kill: it lands mid-stream
            _produce(bs, rows[mid:hi])
            assert consumed() < hi
            w.kill()
            w.start()
        _produce(bs, rows[KILLS * chunk :])
        wait_reading(reader, "every final result", lambda: _latest(reader, out) == expected, 180, w)
        assert w.stop() == 0, w.tail()
        reader.read_to_end()
    finally:
        if w.alive():
            w.kill()
        reader.close()

    produced: dict[str, set[str]] = {}
    for _t, key, value, _ts in rows:
        produced.setdefault(key, set()).add(value)
    records = reader.records[out]
    wrong = []
    for r in records:
        if r.value is None:
            continue  # an order that moved to a customer not yet read has no result for now
        order_value, _, customer_value = str(r.value).partition("+")
        customer = customer_of(order_value)
        if (
            order_value not in produced.get(str(r.key), ())
            or customer_value not in produced[customer]
        ):
            wrong.append(r)
    duplicated = [
        pair for pair, n in Counter((r.key, r.value) for r in records if r.value).items() if n > 1
    ]
    missing = {k: v for k, v in expected.items() if _latest(reader, out).get(k) != v}
    assert (wrong, duplicated, missing) == ([], [], {})
    assert reader.errors == []
