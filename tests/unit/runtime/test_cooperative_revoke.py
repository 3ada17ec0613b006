"""The task manager under the cooperative protocol, driven on the mock cluster: a revoke of
some partitions commits the open work and closes only their tasks; a loss discards the lost
tasks' work without a commit; the tasks that stay are the same objects throughout."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from support.mock_runtime import DST, SRC, cluster_with_input, running, send

from kstream.dsl import StreamBuilder
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
