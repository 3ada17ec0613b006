"""A task that moves to a new owner under exactly-once restores every transaction whose input
offsets it starts after, even when the group's committed offsets become readable before the
previous owner's last transaction's markers reach the changelog (kstream.runtime.task_restore,
`await_stable_changelogs`).

On Apache Kafka the group coordinator writes a transaction's offsets and the data partitions'
markers separately: for a moment the offsets read as committed while a changelog partition's
last stable offset is still before that transaction's records. The mock cluster here shows
the changelog so to read_committed readers until the markers "land" (after a few reads of the
partition's end), as the broker did in 2 transactions of 600 measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from support.mock_runtime import DST, SRC, running

from kstream.dsl import StreamBuilder
from kstream.kafka.consumer import Consumer
from kstream.kafka.supplier import ClientConfig
from kstream.runtime import task_restore
from kstream.serde import serde
from kstream.testing import MockCluster, MockProducer
from kstream.testing.mock_consumer import MockConsumer
from kstream.testing.supplier import MockClientSupplier

CHANGELOG = "app-counts-changelog"
KEYS = ("a", "b", "c")


class MarkersInFlight:
    """The mock cluster as read_committed readers see it while the markers of the last
    transaction on some partitions are not written yet: those partitions end at their last
    stable offset (`lso`) until their end has been asked for `lands_after` times."""

    def __init__(self, cluster: MockCluster, lso: dict[tuple[str, int], int], lands_after: int):
        self._cluster = cluster
        self.lso = dict(lso)
        self._asked = 0
        self._lands_after = lands_after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def messages(self, topic: str, partition: int | None = None) -> list[Any]:
        msgs = self._cluster.messages(topic, partition)
        if partition is not None and (topic, partition) in self.lso:
            return msgs[: self.lso[(topic, partition)]]
        return msgs

    def end_offset(self, topic: str, partition: int) -> int:
        if (topic, partition) in self.lso:
            self._asked += 1
            if self._asked > self._lands_after:
                self.lso.clear()  # the markers landed
            else:
                return self.lso[(topic, partition)]
        return self._cluster.end_offset(topic, partition)


class Supplier(MockClientSupplier):
    """Mock clients whose read_committed consumers read through `view` (when set)."""

    view: MarkersInFlight | None = None

    def consumer(self, config: ClientConfig) -> Consumer:
        if self.view is None or config.kafka.get("isolation.level") == "read_uncommitted":
            return super().consumer(config)
        c = MockConsumer(cast("MockCluster", self.view), group_id=config.group_id)
        self.consumers.append(c)
        return cast("Consumer", c)


def _count_by_key() -> StreamBuilder:
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(DST, key_serde="string", value_serde="long")
    return b


def _send(cluster: MockCluster, n: int) -> None:
    p = MockProducer(cluster)
    for i in range(n):
        p.produce(SRC, b"x", key=KEYS[i % len(KEYS)].encode())
    p.flush()


def _running_counts(cluster: MockCluster) -> dict[str, list[int]]:
    s = serde("long")
    out: dict[str, list[int]] = {}
    for m in cluster.messages(DST):
        out.setdefault((m.key() or b"").decode(), []).append(s.deserialize(m.value(), None))
    return out


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_new_owner_restores_the_last_transaction_whose_markers_are_late(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_restore, "_STABLE_POLL_S", 0.0)
    cluster = MockCluster()
    cluster.create_topic(SRC, 1)
    cluster.create_topic(DST, 1)
    _send(cluster, 9)
    # the previous owner: two commits, the second one its last before it gives the task up
    with running(
        cluster,
        tmp_path / "one",
        guarantee,
        topology=_count_by_key(),
        rebalance_protocol="consumer",
    ) as r:
        r.turn()
        before_last = cluster.end_offset(CHANGELOG, 0)
        _send(cluster, 9)
        r.turn()
        assert cluster.end_offset(CHANGELOG, 0) > before_last
        assert cluster.committed("app", SRC, 0) == 18
    # the new owner reads offsets 18 while the changelog reads as committed only up to the
    # second-last commit; the markers land after a few reads of its end
    supplier = Supplier(cluster)
    supplier.view = MarkersInFlight(cluster, {(CHANGELOG, 0): before_last}, lands_after=3)
    with running(
        cluster,
        tmp_path / "two",
        guarantee,
        topology=_count_by_key(),
        rebalance_protocol="consumer",
    ) as r2:
        r2.thread.ctx.client_supplier = supplier
        r2.turn()
        _send(cluster, 9)
        r2.turn(2)
        assert r2.thread.task_manager.tasks[(0, 0)].committed == {(SRC, 0): 27}
    # without the wait each key's counts went 1-6, then 4-6 again: 7-9 never
    got = _running_counts(cluster)
    assert got == {k: list(range(1, 10)) for k in KEYS}, got


def test_the_wait_ends_when_the_markers_land_or_at_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The wait reads each partition's high watermark once and its last stable offset until
    it gets there; a transaction still open at the bound (a previous owner's that never ends)
    does not hold the restore longer: it goes on, saying so."""
    monkeypatch.setattr(task_restore, "_STABLE_POLL_S", 0.0)
    cluster = MockCluster()
    cluster.create_topic(SRC, 1)
    cluster.create_topic(DST, 1)
    _send(cluster, 9)
    with running(
        cluster,
        tmp_path,
        "exactly_once_v2",
        topology=_count_by_key(),
        rebalance_protocol="consumer",
    ) as r:
        r.turn()
        end = cluster.end_offset(CHANGELOG, 0)
        assert end > 1
        ctx = r.thread.ctx
        supplier = Supplier(cluster)
        ctx.client_supplier = supplier
        tp = (CHANGELOG, 0)
        supplier.view = MarkersInFlight(cluster, {tp: end - 1}, lands_after=2)
        assert task_restore.await_stable_changelogs(ctx, [tp], wait_s=60) == {}
        assert supplier.view.lso == {}  # it asked until the markers landed
        supplier.view = MarkersInFlight(cluster, {tp: end - 1}, lands_after=10**9)
        assert task_restore.await_stable_changelogs(ctx, [tp], wait_s=0.05) == {tp: end}
        assert "still hold an open transaction" in caplog.text
