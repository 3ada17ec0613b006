"""Drive the real runtime on the mock cluster, one loop turn at a time (no broker, no waits)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.runtime import App
from kstream.runtime.thread import StreamThread
from kstream.serde import serde
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

SRC, DST = "words", "counts"


def word_count() -> StreamBuilder:
    """Counts words through a repartition topic: two sub-topologies, one store."""
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").flat_map_values(str.split).group_by(
        lambda _k, w: w, key_serde="string"
    ).count(store="counts").to_stream().to(DST, key_serde="string", value_serde="long")
    return b


class Runner:
    """One app's stream thread on a mock cluster. `poll()` is one loop turn without a commit
    (the commit interval is an hour), `turn()` one loop turn and a commit."""

    def __init__(
        self,
        cluster: MockCluster,
        state_dir: Path,
        guarantee: str,
        topology: Any = None,
        app_id: str = "app",
        **config: Any,
    ) -> None:
        self.supplier = MockClientSupplier(cluster)
        # Apache Kafka's behaviour unless a test asks for the compensations, in either lane
        conf = {
            "state_dir": str(state_dir),
            "commit_interval": 3_600_000,
            "broker_compat": "none",
            **config,
        }
        self.app = App(
            topology if topology is not None else word_count(),
            app_id,
            "mock:9092",
            guarantee,
            config=conf,
            client_supplier=self.supplier,
        )
        self.thread: StreamThread = self.app._new_stream_thread(self.app._create_topics())
        self.thread.backoff = lambda _s: None
        self.thread.open()

    def poll(self) -> None:
        self.thread.run_once()

    def commit(self) -> None:
        self.thread.commit()

    def turn(self, n: int = 1) -> None:
        for _ in range(n):
            self.thread.run_once()
            self.thread.commit()

    def close(self) -> None:
        """Close the thread, then the app: a test that leaves the app REBALANCING (a revoke
        with no assignment after it) would otherwise leave its slow-rebalance watch running,
        warning about a group nobody runs any more."""
        try:
            self.thread.close()
        finally:
            self.app.close()


@contextmanager
def running(
    cluster: MockCluster, state_dir: Path, guarantee: str, **kwargs: Any
) -> Iterator[Runner]:
    r = Runner(cluster, state_dir, guarantee, **kwargs)
    try:
        yield r
    finally:
        r.close()


def cluster_with_input(*lines: str, partitions: int = 1) -> MockCluster:
    cluster = MockCluster()
    cluster.create_topic(SRC, partitions)
    cluster.create_topic(DST, partitions)
    send(cluster, *lines)
    return cluster


def send(cluster: MockCluster, *lines: str) -> None:
    p = MockProducer(cluster)
    for i, line in enumerate(lines):
        p.produce(SRC, line.encode(), key=f"k{i}".encode())
    p.flush()


def counts(cluster: MockCluster) -> list[tuple[str, int]]:
    """Every (word, count) record in the output topic, in offset order per partition."""
    s = serde("long")
    return [
        ((m.key() or b"").decode(), s.deserialize(m.value(), None)) for m in cluster.messages(DST)
    ]


def latest(cluster: MockCluster) -> dict[str, int]:
    return dict(counts(cluster))
