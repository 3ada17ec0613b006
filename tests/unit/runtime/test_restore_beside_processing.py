"""A new task restores beside the running ones (kstream.runtime.restorer), on the mock cluster.

The task manager is driven as the cooperative protocol drives it: partition 0 is revoked and
assigned again while partition 1's task keeps running. Meanwhile partition 0's changelog grew
(its records again: the same state, many more records), so with small restore batches the
restore spans many loop turns. Across them the kept task processes every record it is given,
the restoring task's partition is paused (nothing of it is processed or committed), and once
restored the task is created and its input resumes where it was committed: the counts are
exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from support.mock_runtime import SRC, cluster_with_input, running, send

from kstream.dsl import StreamBuilder
from kstream.runtime import restorer
from kstream.testing import MockCluster, MockProducer

WORDS = [f"w{i}" for i in range(40)]
CHANGELOG = "app-counts-changelog"


def _count_lines() -> StreamBuilder:
    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to("out", key_serde="string", value_serde="long")
    return b


def _grow_changelog(cluster: MockCluster, partition: int, times: int) -> int:
    """Write partition `partition`'s changelog records `times` more times (a later record of a
    key wins, and each is a copy: the state it restores to is the same); its new end."""
    records = [(m.key(), m.value()) for m in cluster.messages(CHANGELOG, partition)]
    producer = MockProducer(cluster)
    for _ in range(times):
        for key, value in records:
            producer.produce(CHANGELOG, value, key=key, partition=partition)
    producer.flush()
    return cluster.end_offset(CHANGELOG, partition)


def _input_of(cluster: MockCluster, partition: int) -> int:
    return cluster.end_offset(SRC, partition)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_a_kept_task_processes_while_a_new_task_restores(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restorer, "RESTORE_BATCH", 5)
    cluster = cluster_with_input(*WORDS, partitions=2)
    cluster.create_topic("out", 2)
    with running(
        cluster, tmp_path, guarantee, topology=_count_lines(), rebalance_protocol="cooperative"
    ) as r:
        r.turn(2)
        tm = r.thread.task_manager
        kept = tm.tasks[(0, 1)]
        tm.on_revoke([TopicPartition(SRC, 0)])
        end = _grow_changelog(cluster, 0, times=10)
        committed_0 = cluster.committed("app", SRC, 0)
        tm.on_assign([TopicPartition(SRC, 0)])
        assert tm.restoring and (0, 0) not in tm.tasks
        assert r.app.state == "REBALANCING"

        send(cluster, *WORDS)  # input for both tasks while task 0_0 restores
        fed_1 = _input_of(cluster, 1) - (cluster.committed("app", SRC, 1) or 0)
        turns = processed = 0
        while tm.restoring:
            before = r.thread.processed
            r.poll()
            r.commit()
            processed += r.thread.processed - before
            turns += 1
            if tm.restoring:
                # the restoring task's input is neither processed nor committed
                assert cluster.committed("app", SRC, 0) == committed_0
        assert turns > 5, "the restore spans many turns (batches of 5 records)"
        # the kept task went on all along: every record partition 1 got was processed
        assert processed == fed_1
        assert tm.tasks[(0, 1)] is kept
        assert tm.tasks[(0, 0)].restored_stores[0].checkpoint()
        assert r.app.state == "RUNNING"
        r.turn(3)
        assert cluster.committed("app", SRC, 0) == _input_of(cluster, 0)
    assert end > 0
    assert latest_counts(cluster) == {f"k{i}": 2 for i in range(len(WORDS))}  # send keys k<i>


def latest_counts(cluster: MockCluster) -> dict[str, int]:
    from kstream.serde import serde

    s = serde("long")
    out: dict[str, int] = {}
    for m in cluster.messages("out"):
        out[(m.key() or b"").decode()] = s.deserialize(m.value(), None)
    return out


def test_a_task_revoked_while_restoring_is_dropped_and_its_partition_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restorer, "RESTORE_BATCH", 5)
    cluster = cluster_with_input(*WORDS, partitions=2)
    cluster.create_topic("out", 2)
    with running(
        cluster,
        tmp_path,
        "exactly_once_v2",
        topology=_count_lines(),
        rebalance_protocol="cooperative",
    ) as r:
        r.turn(2)
        tm = r.thread.task_manager
        tm.on_revoke([TopicPartition(SRC, 0)])
        _grow_changelog(cluster, 0, times=10)
        tm.on_assign([TopicPartition(SRC, 0)])
        r.poll()
        assert tm.restoring
        tm.on_revoke([TopicPartition(SRC, 0)])
        assert not tm.restoring and set(tm.tasks) == {(0, 1)}
        assert r.thread.ctx.restoring == 0
        # given back: restored again (its stores were closed), then it runs
        tm.on_assign([TopicPartition(SRC, 0)])
        while tm.restoring:
            r.poll()
        send(cluster, *WORDS)
        r.turn(3)
        assert cluster.committed("app", SRC, 0) == _input_of(cluster, 0)
    assert latest_counts(cluster) == {f"k{i}": 2 for i in range(len(WORDS))}  # send keys k<i>
