"""Global store checkpoints without a broker: memory stores restore fully, and a checkpoint
ahead of the log end (the topic was recreated) wipes the stores and reads from the start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.runtime import App, AppState
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
