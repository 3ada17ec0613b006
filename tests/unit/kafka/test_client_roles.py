"""Every Kafka client comes from the client supplier, asked for by its role (Kafka Streams'
KafkaClientSupplier): the app's stream thread, producers, admin client and changelog restore,
the HTTP instance registry, and the Spark source, sink and global-table reads. A supplier that
records each request sees them all, and the clients it hands out do the work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig
from kstream.runtime import App
from kstream.service.instances import InstanceRegistry
from kstream.spark import source
from kstream.spark.sink import committed_batches, marker_topic
from kstream.spark.tasks import _read_globals, build_task_plan
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

SRC, OUT, REGIONS = "orders", "totals", "regions"


class RecordingSupplier(MockClientSupplier):
    """Mock clients; `asked` lists every request as (role, config)."""

    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(cluster)
        self.asked: list[tuple[str, ClientConfig]] = []

    def roles(self) -> list[str]:
        return [role for role, _ in self.asked]

    def producer(self, config: ClientConfig) -> Producer:
        self.asked.append(("producer", config))
        return super().producer(config)

    def consumer(self, config: ClientConfig) -> Consumer:
        self.asked.append(("consumer", config))
        return super().consumer(config)

    def restore_consumer(self, config: ClientConfig) -> Consumer:
        self.asked.append(("restore_consumer", config))
        return MockClientSupplier.consumer(self, config)

    def global_consumer(self, config: ClientConfig) -> Consumer:
        self.asked.append(("global_consumer", config))
        return MockClientSupplier.consumer(self, config)

    def admin(self, config: ClientConfig) -> Admin:
        self.asked.append(("admin", config))
        return super().admin(config)

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        # Spark ships the supplier pickled; the "executors" here are this process
        _SHIPPED[id(self)] = self
        return (_shipped, (id(self),))


_SHIPPED: dict[int, RecordingSupplier] = {}


def _shipped(key: int) -> RecordingSupplier:
    return _SHIPPED[key]


def _cluster(*topics: str) -> MockCluster:
    cluster = MockCluster()
    for t in topics:
        cluster.create_topic(t, 1)
    return cluster


def _produce(cluster: MockCluster, topic: str, *pairs: tuple[bytes, bytes]) -> None:
    p = MockProducer(cluster)
    for k, v in pairs:
        p.produce(topic, v, k)
    p.flush()


def _one_turn(app: App) -> None:
    thread = app._new_stream_thread(app._create_topics())
    thread.open()
    try:
        thread.run_once()
        thread.commit()
    finally:
        thread.close()


def _counting() -> StreamBuilder:
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(OUT, key_serde="string", value_serde="long")
    return b


def test_an_app_asks_for_each_role_and_restores_through_the_restore_consumer(
    tmp_path: Path,
) -> None:
    cluster = _cluster(SRC, OUT)
    _produce(cluster, SRC, (b"anna", b"o1"), (b"anna", b"o2"))
    supplier = RecordingSupplier(cluster)
    config = {"state_dir": str(tmp_path), "commit_interval": 3_600_000}
    _one_turn(
        App(
            _counting(),
            "roles",
            "mock:9092",
            "exactly_once_v2",
            config=config,
            client_supplier=supplier,
        )
    )
    assert set(supplier.roles()) == {"admin", "consumer", "producer", "restore_consumer"}
    # the restore consumer reads the changelog to its end; before it, under exactly-once, two
    # restore-role clients ask the changelog's ends, one per isolation level
    # (kstream.runtime.task_restore.await_stable_changelogs)
    restores = [c for role, c in supplier.asked if role == "restore_consumer"]
    (restore,) = [c for c in restores if c.kafka.get("enable.partition.eof") is True]
    assert sorted(c.kafka.get("isolation.level") for c in restores if c is not restore) == [
        "read_committed",
        "read_uncommitted",
    ]
    # a second start of the app restores its store from the changelog it wrote
    _produce(cluster, SRC, (b"anna", b"o3"))
    supplier.asked.clear()
    restarted = tmp_path / "elsewhere"  # no local state: everything comes from the changelog
    _one_turn(
        App(
            _counting(),
            "roles",
            "mock:9092",
            "exactly_once_v2",
            config={**config, "state_dir": str(restarted)},
            client_supplier=supplier,
        )
    )
    assert "restore_consumer" in supplier.roles()
    assert [m.value() for m in cluster.messages(OUT)][-1] == (3).to_bytes(8, "big")


def test_an_app_with_a_global_table_asks_for_the_global_consumer(tmp_path: Path) -> None:
    cluster = _cluster(SRC, OUT, REGIONS)
    _produce(cluster, REGIONS, (b"anna", b"eu"))
    _produce(cluster, SRC, (b"anna", b"o1"))
    b = StreamBuilder()
    regions = b.global_table(REGIONS, key_serde="string", value_serde="string", store="regions")
    b.stream(SRC, key_serde="string", value_serde="string").join(
        regions, lambda k, _v: k, lambda v, region: f"{v}@{region}"
    ).to(OUT, key_serde="string", value_serde="string")
    supplier = RecordingSupplier(cluster)
    config = {"state_dir": str(tmp_path)}
    _one_turn(
        App(b, "globals", "mock:9092", "at_least_once", config=config, client_supplier=supplier)
    )
    assert [m.value() for m in cluster.messages(OUT)] == [b"o1@eu"]
    assert set(supplier.roles()) == {"admin", "consumer", "producer", "global_consumer"}


def test_the_instance_registry_gets_its_clients_from_the_supplier() -> None:
    cluster = MockCluster()
    supplier = RecordingSupplier(cluster)
    registry = InstanceRegistry(
        "app",
        "mock:9092",
        instance_id="one",
        endpoint="http://one:8080",
        kafka={"fetch.wait.max.ms": 500},
        client_supplier=supplier,
    )
    registry.start()
    try:
        assert registry.publish([(SRC, 0), (SRC, 1)])
        for _ in range(200):
            owner = registry.owner(SRC, 1)
            if owner is not None:
                break
            registry._stop.wait(0.01)
        assert owner is not None and owner.instance_id == "one"
    finally:
        registry.close()
    assert supplier.roles() == ["admin", "producer", "consumer"]
    follow = supplier.asked[2][1]
    assert follow.kafka["fetch.wait.max.ms"] == 100  # the follower's short fetch wait
    # the tombstone of close(): the instance withdrew through the supplier's producer
    assert [m.value() for m in cluster.messages("app-instances")][-1] is None


def test_the_spark_source_plans_and_reads_through_the_supplier() -> None:
    cluster = _cluster(SRC)
    _produce(cluster, SRC, *[(b"k%d" % i, b"v%d" % i) for i in range(5)])
    supplier = RecordingSupplier(cluster)
    reader = source.KafkaStreamReader(source.options("mock:9092", [SRC], client_supplier=supplier))
    try:
        assert reader.initialOffset() == {SRC: {"0": 0}}
        end = reader.latestOffset({SRC: {"0": 0}}, reader.getDefaultReadLimit())
        assert end == {SRC: {"0": 5}}
        (part,) = reader.partitions({SRC: {"0": 1}}, {SRC: {"0": 4}})
        rows = [r for batch in reader.read(part) for r in batch.to_pylist()]
    finally:
        reader.stop()
    assert [(r["offset"], r["value"]) for r in rows] == [(1, b"v1"), (2, b"v2"), (3, b"v3")]
    assert set(supplier.roles()) == {"consumer"}  # the planner and a reader, both plain


def test_the_spark_global_reads_and_sink_markers_come_from_the_supplier() -> None:
    cluster = _cluster(SRC, REGIONS, OUT, marker_topic("app"))
    _produce(cluster, REGIONS, (b"anna", b"eu"), (b"bob", b"us"))
    supplier = RecordingSupplier(cluster)
    b = StreamBuilder()
    regions = b.global_table(REGIONS, store="regions")
    b.stream(SRC).join(regions, lambda k, _v: k, lambda v, r: v + r).to(OUT)
    plan = build_task_plan(b.build(), "app")
    plan.bootstrap_servers, plan.client_supplier = "mock:9092", supplier
    offsets: dict[str, dict[int, int]] = {}
    got = _read_globals(plan, offsets)
    assert [[r.value for r in part] for part in got[REGIONS]] == [[b"eu", b"us"]]
    assert offsets == {REGIONS: {0: 2}}
    assert committed_batches("mock:9092", "app", client_supplier=supplier) == 0
    assert supplier.roles() == ["global_consumer", "consumer"]
    assert supplier.asked[1][1].group_id == "app-spark-sink"
