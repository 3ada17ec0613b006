"""A foreign-key table-table join on the native runtime against the real broker, exactly-once.

Orders (2 partitions) are joined with customers (3 partitions) on the order's customer id:
the tables are not co-partitioned, so subscriptions go through a 3-partition subscription
topic and answers come back through a 2-partition response topic, to the partition each order
lives in. The app sees new rows on both sides, a changed foreign key, an order deleted and a
customer that arrives after the order that names it; then it is stopped and started again on
an empty state directory, so that its stores (the subscription store included) come back from
their changelogs: a customer update must then reach the orders subscribed to it, and only
those (not an order that moved to another customer before the restart).

Each expected record is the one Kafka Streams gives for the same input whatever the order in
which the app's tasks run: an order's first answer comes either from its subscription or from
its customer's arrival, never both, and the customers here are stamped later than the orders,
so either answer carries the customer's timestamp.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from e2e.dsl_apps import fk_join
from e2e.independent_reader import IndependentReader
from support.groups import fast_group
from support.waiting import wait_for_app

from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App

BASE = 1_700_000_000_000


def _produce(bs: str, topic: str, rows: list[tuple[str, str | None, int]]) -> None:
    with Producer(bs, idempotent=True) as p:
        for key, value, ts in rows:
            p.produce(topic, None if value is None else value.encode(), key.encode(), None, ts)
        p.flush()


def _wait(app: App, reader: IndependentReader, what: str, count: int) -> None:
    def check() -> bool:
        reader.poll(0.2)
        return len(reader.records[reader.topics[0]]) >= count

    wait_for_app(what, check, app, timeout=90)


def test_fk_join_across_partition_counts_and_a_restart(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    orders, customers, out = unique_name("orders"), unique_name("customers"), unique_name("out")
    with Admin(bs) as admin:
        admin.create_topic(orders, 2)
        admin.create_topic(customers, 3)
        admin.create_topic(out, 2)
    app_id = unique_name("app")

    def app(state: str) -> App:
        config = fast_group({"state_dir": str(tmp_path / state), "commit_interval": 50})
        return App(fk_join(orders, customers, out), app_id, bs, "exactly_once_v2", config)

    reader = IndependentReader(bs, [out], values="string")
    records = reader.records[out]
    try:
        first = app("run1")
        first.start()
        try:
            _produce(bs, orders, [("o1", "tea|c1", BASE), ("o2", "pen|c2", BASE + 1)])
            _produce(bs, orders, [("o3", "cup|c3", BASE + 2), ("o4", "ink|c9", BASE + 3)])
            _produce(
                bs,
                customers,
                [("c1", "Ann", BASE + 10), ("c2", "Bo", BASE + 11), ("c3", "Cy", BASE + 12)],
            )
            _wait(first, reader, "the first results", 3)
            assert sorted((r.key, r.value, r.timestamp) for r in records) == [
                ("o1", "tea|c1+Ann", BASE + 10),
                ("o2", "pen|c2+Bo", BASE + 11),
                ("o3", "cup|c3+Cy", BASE + 12),
            ]
            # o1 moves to c2; c3 changes; o2 is deleted; o4's customer arrives
            _produce(bs, orders, [("o1", "tea|c2", BASE + 20)])
            _produce(bs, customers, [("c3", "Cyd", BASE + 21)])
            _produce(bs, orders, [("o2", None, BASE + 22)])
            _produce(bs, customers, [("c9", "Di", BASE + 23)])
            _wait(first, reader, "the updates", 7)
        finally:
            assert first.close(timeout=30)
        assert first.error is None
        assert sorted((r.key, r.value, r.timestamp) for r in records[3:]) == [
            ("o1", "tea|c2+Bo", BASE + 20),
            ("o2", None, BASE + 22),
            ("o3", "cup|c3+Cyd", BASE + 21),
            ("o4", "ink|c9+Di", BASE + 23),
        ]

        # a new state dir: every store comes back from its changelog
        second = app("run2")
        second.start()
        try:
            _produce(bs, customers, [("c1", "Ann2", BASE + 30), ("c2", "Bo2", BASE + 31)])
            _wait(second, reader, "the answer after the restart", 8)
        finally:
            assert second.close(timeout=30)
        assert second.error is None
        reader.read_to_end()  # anything more (o1 still answering for c1, o2 back) shows up now
        assert [(r.key, r.value, r.timestamp) for r in records[7:]] == [
            ("o1", "tea|c2+Bo2", BASE + 31)
        ]
        assert reader.errors == []
    finally:
        reader.close()
