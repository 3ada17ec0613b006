"""`App.query(store, key, as_of=T)` and `App.store(name).versions(key, ...)` on a running app
(no broker): Kafka's IQv2 `VersionedKeyQuery` and `MultiVersionedKeyQuery` (KIP-960/968) over
a versioned table's store, its out-of-order update kept in history."""

from __future__ import annotations

import time
from pathlib import Path

from kstream.dsl import StreamBuilder
from kstream.runtime import App, AppState
from kstream.state.versioned import VersionedRecord
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

PRICES = "prices"


def test_app_answers_as_of_and_range_queries(tmp_path: Path) -> None:
    cluster = MockCluster()
    cluster.create_topic(PRICES, 2)
    producer = MockProducer(cluster)
    for value, ts in [(b"v1", 1_000), (b"v3", 3_000), (b"v2", 2_000)]:  # v2 out of order
        producer.produce(PRICES, value, b"apple", timestamp=ts)
    producer.flush()
    b = StreamBuilder()
    b.table(PRICES, "string", "string", store="prices", versioned="1h")
    app = App(
        b,
        "versioned-queries",
        "mock:9092",
        config={"state_dir": str(tmp_path)},
        client_supplier=MockClientSupplier(cluster),
    )
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=30)
        deadline = time.monotonic() + 30
        while len(app.store("prices").versions("apple")) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        v1, v2, v3 = (
            VersionedRecord("v1", 1_000, 2_000),
            VersionedRecord("v2", 2_000, 3_000),
            VersionedRecord("v3", 3_000, None),
        )
        assert app.query("prices", "apple") == v3
        assert app.query("prices", "apple", as_of=2_500) == v2
        assert app.query("prices", "apple", as_of=999) is None
        assert app.store("prices").versions("apple") == [v3, v2, v1]
        assert app.store("prices").versions("apple", 1_500, 2_000, ascending=True) == [v1, v2]
        assert app.store("prices").versions("pear") == []
    finally:
        app.close()
