"""`deduplicate` across a restart, and a global table that keeps up while the app runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from support.groups import fast_group

from e2e.inprocess import read_until, running
from e2e.support import create_topics, produce
from examples import orders_enriched, payments_dedup
from kstream.broker_compat.reader import TopicReader
from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App

MINUTE = 60_000
# an hour ago: the dedup store's changelog records carry the records' times, and the broker
# deletes them by time once past the store's retention plus a day, as Kafka's would
T0 = (int(time.time() * 1000) // MINUTE - 60) * MINUTE


def _payments(ids: range, ts: int) -> list[tuple[str, dict[str, object], int]]:
    return [("acct", {"idempotency_key": f"p{i}", "amount": i}, ts + i) for i in ids]


def test_upstream_duplicates_dropped_also_across_a_restart(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = unique_name("payments"), unique_name("deduped")
    create_topics(bs, 2, inp, out)
    app_id = unique_name("dedup")

    def app(n: int) -> App:
        topo = payments_dedup.build_topology(inp, out)
        return App(topo, app_id, bs, config=fast_group({"state_dir": str(tmp_path / f"s{n}")}))

    with TopicReader(bs, out, "string", "json") as reader:
        produce(bs, inp, _payments(range(20), T0), "string", "json")
        # retried 2 minutes later, before the restart
        produce(bs, inp, _payments(range(10), T0 + 2 * MINUTE), "string", "json")
        with running(app(1)) as a:
            first = read_until(reader, lambda rs: len(rs) >= 20, a)
        # retried 5 and 7 minutes later, then new ids
        produce(bs, inp, _payments(range(20), T0 + 5 * MINUTE), "string", "json")
        produce(bs, inp, _payments(range(5, 15), T0 + 7 * MINUTE), "string", "json")
        produce(bs, inp, _payments(range(20, 30), T0 + 8 * MINUTE), "string", "json")
        with running(app(2)) as a:
            second = read_until(reader, lambda rs: any(r.value["amount"] == 29 for r in rs), a)
    assert [r.value["idempotency_key"] for r in first] == [f"p{i}" for i in range(20)]
    assert [r.value["idempotency_key"] for r in second] == [f"p{i}" for i in range(20, 30)]


def test_global_table_bootstraps_and_keeps_up(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    orders, customers, products, out = (unique_name(n) for n in ("o", "c", "p", "out"))
    create_topics(bs, 2, orders, customers, out)
    create_topics(bs, 3, products)
    produce(bs, customers, [("c1", {"name": "Ann", "region": "eu"}, T0)], "string", "json")
    produce(
        bs,
        products,
        [(f"p{i}", {"name": f"n{i}", "price": 10}, T0) for i in range(30)],
        "string",
        "json",
    )
    topo = orders_enriched.build_topology(orders, customers, products, out)
    app = App(topo, unique_name("glob"), bs, config=fast_group({"state_dir": str(tmp_path)}))
    with running(app), TopicReader(bs, out, "string", "json") as reader:
        # bootstrapped before processing: every product is there once RUNNING
        assert [app.store("products").get(f"p{i}")["name"] for i in range(30)] == [
            f"n{i}" for i in range(30)
        ]
        produce(bs, products, [("late", {"name": "Late", "price": 3}, T0 + 1)], "string", "json")
        deadline = time.monotonic() + 120
        while app.store("products").get("late") is None:
            assert time.monotonic() < deadline, "the global table did not catch up"
            time.sleep(0.05)
        order = {"customer_id": "c1", "product_id": "late", "quantity": 2}
        produce(bs, orders, [("o1", order, T0 + 10)], "string", "json")
        (got,) = read_until(reader, lambda rs: len(rs) >= 1, app)
    assert got.key == "o1"
    assert got.value["product"] == "Late" and got.value["total"] == 6
    assert got.value["customer"] == "Ann"
