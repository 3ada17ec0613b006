"""The task manager under the cooperative protocol, driven on the mock cluster: a revoke of
some partitions commits the open work and closes only their tasks; a loss discards the lost
tasks' work without a commit; the tasks that stay are the same objects throughout."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from support.mock_runtime import DST, SRC, cluster_with_input, counts, running, send

from kstream.dsl import StreamBuilder
from kstream.errors import KafkaClientError
from kstream.runtime import partitions
from kstream.testing import MockCluster

WORDS = [f"w{i} x{i % 3}" for i in range(40)]


def _count_lines() -> StreamBuilder:
    """A count per key, read from one topic: the group the cooperative protocol runs for."""
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(DST, key_serde="string", value_serde="long")
    return b


def _committed(cluster: MockCluster, partition: int) -> int | None:
    return cluster.committed("app", SRC, partition)


def _ends(cluster: MockCluster) -> dict[int, int]:
    return {p: cluster.end_offset(SRC, p) for p in (0, 1)}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_a_partial_revoke_commits_then_closes_only_the_moved_task(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(
        cluster, tmp_path, guarantee, topology=_count_lines(), rebalance_protocol="cooperative"
    ) as r:
        assert r.thread.rebalance_protocol == "cooperative"
        r.turn(2)
        first = _ends(cluster)
        send(cluster, *WORDS)
        r.poll()  # processed, not committed (the commit interval is an hour)
        tm = r.thread.task_manager
        before = dict(tm.tasks)
        assert len(before) == 2
        assert all(_committed(cluster, p) == first[p] for p in (0, 1))
        tm.on_revoke([TopicPartition(SRC, 0)])
        # the open work of every task was committed before the partition was given up
        assert all(_committed(cluster, p) == n for p, n in _ends(cluster).items())
        assert _ends(cluster) != first
        assert set(tm.tasks) == {(0, 1)}
        assert all(tm.tasks[k] is rt for k, rt in before.items() if k != (0, 0))
        assert tm.tasks_closed == 1
        assert (SRC, 0) not in tm.task_of


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_lost_partition_s_work_is_discarded_without_a_commit(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(
        cluster, tmp_path, guarantee, topology=_count_lines(), rebalance_protocol="cooperative"
    ) as r:
        assert r.thread.rebalance_protocol == "cooperative"
        r.turn(2)
        first = _ends(cluster)
        send(cluster, *WORDS)
        r.poll()
        tm = r.thread.task_manager
        kept = tm.tasks[(0, 0)]
        tm.on_lost([TopicPartition(SRC, 1)])
        assert _committed(cluster, 1) == first[1]  # nothing of the lost task committed
        assert (0, 1) not in tm.tasks and tm.tasks[(0, 0)] is kept
        # the kept task goes on (from its committed offsets) and commits its own work
        r.turn(2)
        assert _committed(cluster, 0) == cluster.end_offset(SRC, 0) > first[0]
        assert _committed(cluster, 1) == first[1]


def _counts_by_key(cluster: MockCluster) -> dict[str, list[int]]:
    """Every count the output topic holds, per key, in the order written (the mock keeps only
    committed transactions' records, as a read_committed reader sees them)."""
    out: dict[str, list[int]] = {}
    for key, n in counts(cluster):
        out.setdefault(key, []).append(n)
    return out


def _keys_of(cluster: MockCluster, partition: int) -> set[str]:
    return {(m.key() or b"").decode() for m in cluster.messages(SRC, partition)}


def test_a_commit_failing_in_a_cooperative_revoke_rolls_back_the_kept_task_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exactly_once_v2: the revoke's commit fails (the group moved on, as librdkafka's TXNERR
    at send_offsets_to_transaction reports it). The one transaction held the kept task's work
    as well, so the kept task is rolled back with the moved one: its uncommitted store
    updates dropped, its partition sought back to the committed offset once the rebalance
    ends (its records skipped until then), and it reprocesses them: each count once."""
    at = {"generation": 1}
    monkeypatch.setattr(partitions, "generation", lambda _consumer: at["generation"])
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(
        cluster,
        tmp_path,
        "exactly_once_v2",
        topology=_count_lines(),
        rebalance_protocol="cooperative",
    ) as r:
        r.turn(2)
        first = _ends(cluster)
        send(cluster, *WORDS)
        r.poll()  # processed in the thread's one transaction, not committed
        tm = r.thread.task_manager
        kept = tm.tasks[(0, 1)]
        assert kept.open and tm.tasks[(0, 0)].open
        at["generation"] = 2  # the group's JoinGroup answered: a new generation
        cluster.fail_next_commit()
        tm.on_revoke([TopicPartition(SRC, 0)])
        assert all(_committed(cluster, p) == first[p] for p in (0, 1))  # nothing committed
        assert set(tm.tasks) == {(0, 1)} and tm.tasks[(0, 1)] is kept
        assert not kept.open  # rolled back with the moved task
        assert tm.rebalancing
        assert tm.awaiting_seek == {(SRC, 1): first[1]}
        send(cluster, *WORDS)
        r.poll()  # the kept partition's new records are skipped until it is sought back
        assert not kept.open
        assert tm.awaiting_seek == {(SRC, 1): first[1]}
        tm.on_assign([])  # the rebalance's last assignment: nothing added
        assert not tm.rebalancing
        r.turn(3)
        assert not tm.awaiting_seek
        assert _committed(cluster, 1) == cluster.end_offset(SRC, 1)
        assert _committed(cluster, 0) == first[0]  # its next owner starts there
    found = _counts_by_key(cluster)
    kept_keys, moved_keys = _keys_of(cluster, 1), _keys_of(cluster, 0)
    assert kept_keys and moved_keys
    assert all(found[k] == [1, 2, 3] for k in kept_keys)  # no count lost, none twice
    assert all(found[k] == [1] for k in moved_keys)  # the aborted counts never show


def test_a_refused_seek_back_stays_pending_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka refuses a seek while a partition is not fetching (between the rounds of a
    cooperative rebalance). A rolled-back partition whose seek was refused must not go on
    after the rolled-back records: it stays pending, its records are skipped, and the seek
    is tried again on the next loop turn."""
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(
        cluster,
        tmp_path,
        "exactly_once_v2",
        topology=_count_lines(),
        rebalance_protocol="cooperative",
    ) as r:
        r.turn(2)
        first = _ends(cluster)
        tm = r.thread.task_manager
        consumer = r.thread.consumer
        assert consumer is not None
        seek = consumer.seek
        refused: list[tuple[str, int, int]] = []

        def refuse_once(topic: str, partition: int, offset: int) -> None:
            if not refused:
                refused.append((topic, partition, offset))
                raise KafkaClientError("seeking: Local: Erroneous state", code="_STATE")
            seek(topic, partition, offset)

        monkeypatch.setattr(consumer, "seek", refuse_once)
        send(cluster, *WORDS)
        r.poll()
        cluster.fail_next_commit()
        r.commit()  # fails: both tasks rolled back; one of the two seeks is refused
        assert len(refused) == 1
        (topic, partition, offset) = refused[0]
        assert tm.awaiting_seek == {(topic, partition): offset} and offset == first[partition]
        r.turn(3)  # the seek is tried again, then the partition is reprocessed
        assert not tm.awaiting_seek
        assert all(_committed(cluster, p) == cluster.end_offset(SRC, p) for p in (0, 1))
    assert all(ns == [1, 2] for ns in _counts_by_key(cluster).values())


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_an_assigned_partition_starts_where_its_task_was_restored_for(
    tmp_path: Path, guarantee: str
) -> None:
    """The task manager reads the committed offsets, restores the stores for them, then hands
    the partitions to the client: each at that offset, not at one the client would read again
    itself (a late commit of the previous owner in between would otherwise leave the stores
    behind the position)."""
    cluster = cluster_with_input(*WORDS, partitions=2)
    with running(
        cluster, tmp_path, guarantee, topology=_count_lines(), rebalance_protocol="cooperative"
    ) as r:
        r.turn(2)
        tm = r.thread.task_manager
        tm.on_revoke([TopicPartition(SRC, 0)])
        restored_for = _committed(cluster, 0)
        assert restored_for

        class Client:
            """Stands in for the confluent-kafka consumer the task manager assigns through."""

            assigned: list[TopicPartition] = []

            def incremental_assign(self, parts: list[TopicPartition]) -> None:
                self.assigned += parts

        client = Client()
        consumer = tm.consumer
        consumer.raw = client  # type: ignore[union-attr]
        try:
            tm.on_assign([TopicPartition(SRC, 0)])
        finally:
            del consumer.raw  # type: ignore[union-attr]
        # the task of partition 1 runs on: the new one is restored beside it, then created
        while tm.restoring:
            tm.restore()
        assert tm.tasks[(0, 0)].committed == {(SRC, 0): restored_for}
        assert [(p.topic, p.partition, p.offset) for p in client.assigned] == [
            (SRC, 0, restored_for)
        ]
