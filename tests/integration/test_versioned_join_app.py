"""A versioned table and a grace-period stream-table join on the native runtime, exactly-once,
across a restart that loses all local state.

The table's history (an out-of-order update included) and the join's buffered stream records
live only in their changelogs when the app comes back on an empty state directory: the
results after the restart are right only if the restore rebuilt both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.groups import fast_group
from support.waiting import wait_for_app

from kstream.broker_compat.reader import TopicReader
from kstream.dsl import StreamBuilder
from kstream.dsl.joined import Joined
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App
from kstream.serde import serde

STR = serde("str")
BASE = int(time.time() * 1000) // 1000 * 1000  # recent timestamps: no broker retention applies


def _topology(prices: str, orders: str, changes: str, out: str) -> StreamBuilder:
    b = StreamBuilder()
    table = b.table(prices, "str", "str", store="prices", versioned="1m")
    table.to_stream().to(changes, "str", "str")
    b.stream(orders, "str", "str").join(
        table, lambda o, p: f"{o}+{p}", joined=Joined("enrich", 5)
    ).to(out, "str", "str")
    return b


def _send(bs: str, topic: str, records: list[tuple[str, str, int]]) -> None:
    p = Producer(bs)
    for k, v, ts in records:
        p.produce(topic, STR.to_bytes(v), STR.to_bytes(k), partition=0, timestamp=BASE + ts)
    p.flush()
    p.close()


def test_versioned_join_survives_a_restart_on_empty_state(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    prices, orders = unique_name("prices"), unique_name("orders")
    changes, out, app_id = unique_name("changes"), unique_name("out"), unique_name("app")
    with Admin(bs) as admin:
        for t in (prices, orders, changes, out):
            admin.create_topic(t, 1)
    topology = _topology(prices, orders, changes, out)

    def app(state_dir: Path) -> App:
        config = {"state_dir": str(state_dir)}  # exactly-once (v2), the default
        return App(topology, app_id, bs, config=fast_group(config))

    first = app(tmp_path / "first")
    first.start()
    with TopicReader(bs, changes, "str", "str") as ch, TopicReader(bs, out, "str", "str") as rd:
        seen_changes: list[tuple[str, str]] = []
        results: list[tuple[str, int]] = []

        def changes_reach(n: int) -> Callable[[], bool]:
            def check() -> bool:
                seen_changes.extend((r.key, r.value) for r in ch.poll(0.1))
                return len(seen_changes) >= n

            return check

        def results_reach(n: int) -> Callable[[], bool]:
            def check() -> bool:
                results.extend((r.value, r.timestamp - BASE) for r in rd.poll(0.1))
                return len(results) >= n

            return check

        # k's price 1 at 10 and 2 at 20, then a late 1.5 at 15 (into the history; as in Kafka
        # 4.x, KIP-914, the source forwards it marked not-latest and to_stream emits it), then m
        _send(bs, prices, [("k", "p1", 10), ("k", "p2", 20), ("k", "late", 15), ("m", "x", 30)])
        wait_for_app("the price changes", changes_reach(4), first, 60)
        assert seen_changes == [("k", "p1"), ("k", "p2"), ("k", "late"), ("m", "x")]
        # grace 5: a@12 is released by b@17, b stays in the buffer
        _send(bs, orders, [("k", "a", 12), ("k", "b", 17)])
        wait_for_app("the first result", results_reach(1), first, 60)
        assert first.close(timeout=30)

        second = app(tmp_path / "second")  # empty: both stores come from their changelogs
        second.start()
        try:
            _send(bs, orders, [("k", "c", 25), ("k", "d", 40)])
            wait_for_app("the results after the restart", results_reach(3), second, 60)
        finally:
            assert second.close(timeout=30)
        results.extend((r.value, r.timestamp - BASE) for r in rd.poll(0.5))
    # b@17 joins the late price (as of 17), c@25 the price of 20; d@40 is still buffered
    assert results == [("a+p1", 12), ("b+late", 17), ("c+p2", 25)]
    with Admin(bs) as admin:
        config = admin.describe_topic(f"{app_id}-prices-changelog").config
    assert config.get("cleanup.policy") == "compact"
    assert config.get("min.compaction.lag.ms") == str(60_000 + 86_400_000)
