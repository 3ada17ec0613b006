"""Global stores checkpointed with their data: a restart reads only what is new in the global
topic; a checkpoint below the log start is wiped and restored from the beginning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import TopicPartition
from e2e.inprocess import running
from e2e.support import create_topics
from support.groups import fast_group

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.runtime import App


def _topology(orders: str, regions: str, out: str) -> StreamBuilder:
    b = StreamBuilder()
    table = b.global_table(regions, key_serde="string", value_serde="string", store="regions")
    b.stream(orders, key_serde="string", value_serde="string").join(
        table, lambda _k, v: v, lambda v, region: f"{v}@{region}"
    ).to(out, key_serde="string", value_serde="string")
    return b


def _produce(bs: str, topic: str, records: list[tuple[str, str | None]]) -> None:
    with Producer(bs) as p:
        for k, v in records:
            p.produce(topic, None if v is None else v.encode(), k.encode())
        p.flush()


def _restart(
    app_id: str, bs: str, topo: StreamBuilder, state_dir: Path
) -> tuple[int, dict[str, str]]:
    """Run the app until it is RUNNING; the records its bootstrap read and its table."""
    config = fast_group({"state_dir": str(state_dir), "default_backend": "lmdb"})
    app = App(topo, app_id, bs, config=config)
    with running(app):
        assert app._stream is not None and app._stream.globals is not None
        read = app._stream.globals.bootstrapped
        table = dict(app.store("regions").all())
    return read, table


def test_a_restart_reads_only_the_new_global_records(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    orders, regions, out = (unique_name(n) for n in ("orders", "regions", "out"))
    create_topics(bs, 1, orders, out)
    create_topics(bs, 2, regions)
    topo, app_id = _topology(orders, regions, out), unique_name("g")
    _produce(bs, regions, [(f"c{i}", "eu") for i in range(200)])

    read, table = _restart(app_id, bs, topo, tmp_path)
    assert read == 200 and len(table) == 200

    _produce(bs, regions, [("c1", "us"), ("c2", None), ("new", "apac")])
    read, table = _restart(app_id, bs, topo, tmp_path)
    assert read == 3  # only what is new
    assert len(table) == 200 and table["c1"] == "us" and "c2" not in table
    assert table["new"] == "apac"

    read, table = _restart(app_id, bs, topo, tmp_path)
    assert read == 0 and len(table) == 200

    # the log start moves past the checkpoint (DeleteRecords): wiped, read from the start
    _produce(bs, regions, [("late", "eu")])
    with Consumer(bs) as c:
        ends = {
            (regions, p): c.get_watermark_offsets(TopicPartition(regions, p), cached=False)[1]
            for p in range(2)
        }
    admin = Admin(bs)
    try:
        for future in admin.delete_records(ends).values():
            future.result(10)
    finally:
        admin.close()
    _produce(bs, regions, [("after", "us")])
    read, table = _restart(app_id, bs, topo, tmp_path)
    assert read == 1 and table == {"after": "us"}
