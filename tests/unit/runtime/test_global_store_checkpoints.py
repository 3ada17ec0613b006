"""Global store checkpoints without a broker: memory stores restore fully, and a checkpoint
ahead of the log end (the topic was recreated) wipes the stores and reads from the start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.errors import KafkaClientError
from kstream.runtime import App, AppState
from kstream.runtime.globals import GlobalStores
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

ORDERS, REGIONS, OUT = "orders", "regions", "out"


def _cluster(regions: list[tuple[bytes, bytes]]) -> MockCluster:
    cluster = MockCluster()
    for topic in (ORDERS, REGIONS, OUT):
        cluster.create_topic(topic, 1)
    p = MockProducer(cluster)
    for k, v in regions:
        p.produce(REGIONS, v, k)
    p.flush()
    return cluster


def _run(cluster: MockCluster, state_dir: Path, backend: str) -> tuple[int, dict[Any, Any]]:
    b = StreamBuilder()
    table = b.global_table(REGIONS, key_serde="string", value_serde="string", store="regions")
    b.stream(ORDERS, key_serde="string", value_serde="string").join(
        table, lambda _k, v: v, lambda v, r: f"{v}@{r}"
    ).to(OUT, key_serde="string", value_serde="string")
    app = App(
        b,
        "gcp",
        "mock:9092",
        config={"state_dir": str(state_dir), "default_backend": backend},
        client_supplier=MockClientSupplier(cluster),
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=30)
        assert app._stream is not None and app._stream.globals is not None
        return app._stream.globals.bootstrapped, dict(app.store("regions").all())
    finally:
        app.close()


def test_memory_global_stores_restore_fully(tmp_path: Path) -> None:
    cluster = _cluster([(f"c{i}".encode(), b"eu") for i in range(10)])
    assert _run(cluster, tmp_path, "memory")[0] == 10
    assert _run(cluster, tmp_path, "memory")[0] == 10


def test_lmdb_global_stores_read_from_the_checkpoint(tmp_path: Path) -> None:
    cluster = _cluster([(f"c{i}".encode(), b"eu") for i in range(10)])
    assert _run(cluster, tmp_path, "lmdb")[0] == 10
    p = MockProducer(cluster)
    p.produce(REGIONS, b"us", b"c3")
    p.flush()
    read, table = _run(cluster, tmp_path, "lmdb")
    assert read == 1 and len(table) == 10 and table["c3"] == "us"


def test_a_checkpoint_past_the_log_end_wipes_and_restores(tmp_path: Path) -> None:
    assert _run(_cluster([(f"c{i}".encode(), b"eu") for i in range(10)]), tmp_path, "lmdb")[0]
    # the global topic was recreated with fewer records than the checkpoint says were read
    read, table = _run(_cluster([(b"x", b"1"), (b"y", b"2")]), tmp_path, "lmdb")
    assert read == 2 and table == {"x": "1", "y": "2"}


def _global_stores(cluster: MockCluster, state_dir: Path) -> GlobalStores:
    b = StreamBuilder()
    table = b.global_table(REGIONS, key_serde="string", value_serde="string", store="regions")
    b.stream(ORDERS, key_serde="string", value_serde="string").join(
        table, lambda _k, v: v, lambda v, r: f"{v}@{r}"
    ).to(OUT, key_serde="string", value_serde="string")
    stores = GlobalStores(
        b.build().compile("gcp"),
        Config(state_dir=str(state_dir)),
        "gcp",
        "mock:9092",
        MockClientSupplier(cluster),
    )
    stores.bootstrap()
    return stores


def test_a_poll_that_raises_is_retried_from_what_was_applied(tmp_path: Path) -> None:
    """A client error in the global consumer's poll (a dropped connection, a partition error
    in the batch) does not end the stream thread: the poll logs it and returns nothing, and
    the next one applies what arrived, including records a failed batch had already taken
    from the consumer without returning them."""
    cluster = _cluster([(b"c1", b"eu")])
    stores = _global_stores(cluster, tmp_path)
    p = MockProducer(cluster)
    p.produce(REGIONS, b"us", b"c2")
    p.flush()
    cluster.drop_connection()
    assert stores.poll(0) == 0  # raised KafkaClientError (_TRANSPORT) before
    assert stores.poll(0) == 1
    p.produce(REGIONS, b"asia", b"c3")
    p.flush()
    consume = stores.consumer.consume_batch

    def taken_then_failed(max_records: int, timeout_s: float) -> list[Any]:
        consume(max_records, timeout_s)  # the consumer moves past the records...
        raise KafkaClientError("consuming: UNKNOWN_TOPIC_OR_PART (injected)", code="X")

    stores.consumer.consume_batch = taken_then_failed  # type: ignore[method-assign]
    assert stores.poll(0) == 0
    stores.consumer.consume_batch = consume  # type: ignore[method-assign]
    assert stores.poll(0) == 1  # ...and the next poll reads them again
    assert dict(stores.views["regions"].all()) == {"c1": "eu", "c2": "us", "c3": "asia"}
    stores.close()


def test_a_dropped_connection_while_reading_to_the_end_is_retried(tmp_path: Path) -> None:
    """The first read of the global stores (before processing starts) retries a client error
    instead of failing the stream thread's start."""
    cluster = _cluster([(f"c{i}".encode(), b"eu") for i in range(3)])
    cluster.drop_connection(2)
    stores = _global_stores(cluster, tmp_path)
    assert stores.bootstrapped == 3
    assert dict(stores.views["regions"].all()) == {f"c{i}": "eu" for i in range(3)}
    stores.close()
