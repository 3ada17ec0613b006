"""Task idling (`max_task_idle_ms`, Kafka's `max.task.idle.ms`) on Apache Kafka.

A stream-table join whose table input lags: the stream records reach the broker first, the
table records seconds later but with earlier timestamps. With idling the task waits for the
table partition and processes both in timestamp order, so each stream record joins the table
value (Kafka Streams' result); with idling off (`max_task_idle_ms=-1`) the stream records are
processed at once and find no table value (docs/differences.md, "Task idling"). And with the
default (0), inputs written by a transactional producer (commit markers after the last record,
as on every repartition topic under exactly-once) do not hold a join back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.groups import fast_group

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App, AppState

T0 = 1_700_000_000_000
KEYS = ("a", "b", "c")


@pytest.fixture(autouse=True)
def _kafka_only(kafka_broker: Any) -> None:
    if isinstance(kafka_broker, EmbeddedBroker):
        pytest.xfail("Apache Kafka's fetch metadata: the Tansu lane has its own tests")


def _join(stream: str, table: str, out: str) -> StreamBuilder:
    """stream LEFT JOIN table on the key: "<stream value>|<table value or None>"."""
    b = StreamBuilder()
    t = b.table(table, key_serde="string", value_serde="string", store="prices")
    b.stream(stream, key_serde="string", value_serde="string").left_join(
        t, lambda v, tv: f"{v}|{tv}"
    ).to(out, key_serde="string", value_serde="string")
    return b


def _produce(p: Producer, topic: str, rows: list[tuple[str, str, int]]) -> None:
    for key, value, ts in rows:
        p.produce(topic, value.encode(), key.encode(), timestamp=ts)
    p.flush(10)


def _read(bs: str, topic: str, expected: int, timeout: float) -> dict[str, str]:
    """The first `expected` committed records of `topic` (one partition) by key."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            out += [m for m in c.consume(100, 0.2) if m.error() is None]
        return {m.key().decode(): m.value().decode() for m in out}
    finally:
        c.close()


def _run_lagging_table(
    bs: str, unique_name: Callable[[str], str], tmp: Path, idle_ms: int
) -> dict[str, str]:
    """Start the join, produce the stream records, then 3 s later the table records (with
    earlier timestamps); the join's output by key."""
    stream, table, out = unique_name("orders"), unique_name("prices"), unique_name("joined")
    admin = Admin(bs)
    for topic in (stream, table, out):
        admin.create_topic(topic, 1)
    app = App(
        _join(stream, table, out),
        unique_name("app"),
        bs,
        "at_least_once",
        config=fast_group({"state_dir": str(tmp), "max_task_idle_ms": idle_ms}),
    )
    p = Producer({"bootstrap.servers": bs})
    try:
        app.start()
        assert app.wait_for(AppState.RUNNING, timeout=30)
        time.sleep(1.0)  # the task has fetched both (empty) partitions: both lags are known
        _produce(p, stream, [(k, f"order-{k}", T0 + 100 + i) for i, k in enumerate(KEYS)])
        time.sleep(3.0)
        _produce(p, table, [(k, f"price-{k}", T0 + i) for i, k in enumerate(KEYS)])
        return _read(bs, out, len(KEYS), timeout=10)
    finally:
        app.close(timeout=30)


def test_lagging_table_joins_in_timestamp_order_with_idling(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    # the table arrives 3 s after the stream records, within the 5 s idle time; once its
    # partition is empty again the orders wait one more idle time (Kafka's rule), then join
    got = _run_lagging_table(kafka_broker.bootstrap_servers, unique_name, tmp_path, 5_000)
    assert got == {k: f"order-{k}|price-{k}" for k in KEYS}


def test_without_idling_the_stream_records_find_no_table_value(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    got = _run_lagging_table(kafka_broker.bootstrap_servers, unique_name, tmp_path, -1)
    assert got == {k: f"order-{k}|None" for k in KEYS}


def test_transactional_inputs_do_not_hold_the_join_back(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Default idling (0), inputs written in transactions: the commit marker after each
    input's last record is never delivered as a record, yet the partition counts as caught
    up, so the records are joined (and committed) without waiting."""
    bs = kafka_broker.bootstrap_servers
    stream, table, out = unique_name("orders"), unique_name("prices"), unique_name("joined")
    admin = Admin(bs)
    for topic in (stream, table, out):
        admin.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": bs, "transactional.id": unique_name("tx")})
    p.init_transactions(10)
    p.begin_transaction()
    for i, k in enumerate(KEYS):
        p.produce(table, f"price-{k}".encode(), k.encode(), timestamp=T0 + i)
    p.commit_transaction(10)
    p.begin_transaction()
    for i, k in enumerate(KEYS):
        p.produce(stream, f"order-{k}".encode(), k.encode(), timestamp=T0 + 100 + i)
    p.commit_transaction(10)
    app = App(
        _join(stream, table, out),
        unique_name("app"),
        bs,
        config=fast_group({"state_dir": str(tmp_path)}),
    )
    try:
        t0 = time.monotonic()
        app.start()
        got = _read(bs, out, len(KEYS), timeout=15)
        took = time.monotonic() - t0
    finally:
        app.close(timeout=30)
    assert got == {k: f"order-{k}|price-{k}" for k in KEYS}
    assert took < 10, f"the join waited {took:.1f} s"
