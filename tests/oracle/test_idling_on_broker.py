"""Task idling against Kafka Streams on Apache Kafka: a stream-table join whose table lags.

One spec (orders LEFT JOIN prices on the key, the oracle's "pair" joiner: "order|price", a
missing price "null") runs as a real KafkaStreams app (the oracle harness, `Broker.java`, with
`max.task.idle.ms`) and as a kstream `App` (`max_task_idle_ms`), both exactly_once_v2, side by
side on the same input topics, each writing its own output topic. Both are RUNNING, and have
fetched both (empty) inputs, before the input is written; then both see the same timed input:
the orders first, the prices 3 s later with earlier timestamps (the table input lags).

- Idling on (5 s, above the lag): the task waits for the empty prices partition, takes both
  inputs in timestamp order once the prices arrive, and every order joins its price, in both.
- 0 (Kafka's default): the prices partition is empty with a fetched lag of 0 when the orders
  arrive, so neither waits (KIP-695: only a lag > 0 or an unknown one holds a task back); the
  orders find no price, in both.
- -1 (idling off): the orders are processed as they come and find no price (what
  docs/differences.md, "Task idling", says), as in Kafka with -1.

Each key's (value, timestamp) updates of the two output topics are compared exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e.support import create_topics, produce
from support.groups import fast_group

from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App, AppState
from oracle.harness import Oracle
from oracle.spec import Case, KstreamBuilder, Node
from oracle.test_on_broker import Update, drained, per_key, read_committed

T0 = 1_700_000_000_000
KEYS = ("a", "b", "c")
TABLE_LAG_S = 3.0  # the prices reach the broker this long after the orders
IDLE_MS = 5_000  # "idling on": above the lag
TIMEOUT_S = 60.0


@pytest.fixture(autouse=True)
def _kafka_only(kafka_broker: Any) -> None:
    if isinstance(kafka_broker, EmbeddedBroker):
        pytest.skip("Kafka Streams runs on Apache Kafka only")


def _case(orders: str, prices: str, out: str) -> Case:
    nodes: list[Node] = [
        {"id": 0, "op": "table", "vt": "string", "topic": prices, "store": "prices"},
        {"id": 1, "op": "stream", "vt": "string", "topic": orders},
        {"id": 2, "op": "leftJoin", "in": [1, 0], "vt": "string", "fn": "pair"},
        {"id": 3, "op": "to", "in": [2], "vt": "string", "topic": out},
    ]
    return Case(nodes, [])


ORDERS = [(k, f"order-{k}", T0 + 100 + i) for i, k in enumerate(KEYS)]
PRICES = [(k, f"price-{k}", T0 + i) for i, k in enumerate(KEYS)]  # earlier than the orders
JOINED = {k: [(f"{v}|price-{k}", ts)] for k, v, ts in ORDERS}
UNJOINED = {k: [(f"{v}|null", ts)] for k, v, ts in ORDERS}


def _wait(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _run(
    oracle: Oracle, bs: str, unique_name: Callable[[str], str], tmp: Path, idle_ms: int
) -> tuple[dict[Any, list[Update]], dict[Any, list[Update]]]:
    """Run the join in both with `idle_ms`; (kstream's, Kafka Streams') updates per key."""
    orders, prices = unique_name("orders"), unique_name("prices")
    out_mine, out_theirs = unique_name("joined-kstream"), unique_name("joined-kafka-streams")
    create_topics(bs, 1, orders, prices, out_mine, out_theirs)
    app_ks, app_mine = unique_name("idling-ks"), unique_name("idling-kstream")
    running = tmp / "kafka-streams-running"
    oracle.submit(
        _case(orders, prices, out_theirs),
        {
            "bootstrap": bs,
            "application_id": app_ks,
            "timeout_ms": int(TIMEOUT_S * 1000),
            "max_task_idle_ms": idle_ms,
            "input_records": len(ORDERS) + len(PRICES),
            "running_file": str(running),
        },
    )
    config = fast_group(
        {"state_dir": str(tmp / "kstream"), "commit_interval": 100, "max_task_idle_ms": idle_ms}
    )
    app = App(
        KstreamBuilder().build(_case(orders, prices, out_mine)),
        app_mine,
        bs,
        "exactly_once_v2",
        config,
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=TIMEOUT_S), f"kstream app: {app.state}"
        _wait("the Kafka Streams app to be RUNNING", running.exists)
        time.sleep(1.0)  # both have fetched the two empty partitions: their lags are known (0)
        produce(bs, orders, ORDERS, "string", "string")
        time.sleep(TABLE_LAG_S)
        produce(bs, prices, PRICES, "string", "string")
        answer = oracle.answer()  # once Kafka Streams has processed and committed all six
        assert "error" not in answer, answer["error"]
        _wait("kstream to consume its input", lambda: drained(bs, app_mine, [orders, prices]))
        assert app.state != AppState.ERROR, f"kstream app failed: {app.error}"
    finally:
        app.close()
    got = read_committed(bs, {out_mine: "string", out_theirs: "string"})
    return per_key(got[out_mine]), per_key(got[out_theirs])


@pytest.mark.parametrize(
    ("idle_ms", "expected"),
    [(IDLE_MS, JOINED), (0, UNJOINED), (-1, UNJOINED)],
    ids=["idling-5s", "default-0", "off"],
)
def test_lagging_table_same_as_kafka_streams(
    idle_ms: int,
    expected: dict[str, list[Update]],
    oracle: Oracle,
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    mine, theirs = _run(oracle, kafka_broker.bootstrap_servers, unique_name, tmp_path, idle_ms)
    print(f"max.task.idle.ms={idle_ms}: Kafka Streams {theirs}, kstream {mine}")
    assert theirs == expected, f"Kafka Streams with max.task.idle.ms={idle_ms} gave {theirs}"
    assert mine == theirs
