"""The second read of a new task's committed offsets, and the restore again it may lead to,
run only on a broker whose committed offsets can still move under a new owner
(`broker_compat="tansu"`, `BrokerCompat.committed_moves`), never on Apache Kafka's behaviour.

Tansu completes a rebalance before every member rejoined and accepts a departed member's
offsets until its producer is fenced, so a task's offsets read before its producer started may
be stale: they are read again once the producers are up, and a task whose offsets moved is
restored again from them (`TaskRecovery.restore_again_if_committed_moved`). Apache Kafka's
coordinator refuses an older generation's offsets, so there the first read stands. Driven on
the mock cluster: every read of the committed offsets is recorded, and a second read that
answers a moved offset stands for a departed owner's late commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.mock_runtime import SRC, cluster_with_input, counts, running

from kstream.runtime.partitions import TaskPartitions

EXACT = [("a", 1), ("b", 1), ("b", 2), ("c", 1)]


def _recording_reads(
    monkeypatch: pytest.MonkeyPatch, moved: dict[tuple[str, int], int] | None = None
) -> list[bool]:
    """Record the `fence` flag of every committed-offset read; a read with `fence=False` (the
    second one, with the tasks' producers up) answers `moved` on top of what was committed."""
    reads: list[bool] = []
    original = TaskPartitions.read_committed

    def read(self: TaskPartitions, keys: Any, tps: Any, fence: bool = True) -> dict[Any, int]:
        reads.append(fence)
        found = original(self, keys, tps, fence)
        if not fence and moved:
            found.update({tp: off for tp, off in moved.items() if tp in tps})
        return found

    monkeypatch.setattr(TaskPartitions, "read_committed", read)
    return reads


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_on_apache_kafka_a_new_task_s_offsets_are_read_once(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _recording_reads(monkeypatch, moved={(SRC, 0): 1})
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee, broker_compat="none") as r:
        tm = r.thread.task_manager
        r.poll()
        assert reads == [True]  # one read, before the tasks' producers started
        assert tm.tasks_created == 2  # the two sub-topologies' tasks, none restored again
        assert tm.tasks[(0, 0)].committed == {}  # as first read: nothing committed yet
        r.turn(4)
    assert sorted(counts(cluster)) == EXACT


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_with_broker_compat_a_task_whose_offsets_moved_is_restored_again(
    tmp_path: Path, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _recording_reads(monkeypatch, moved={(SRC, 0): 1})
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee, broker_compat="tansu") as r:
        tm = r.thread.task_manager
        r.poll()
        # read again with the producers up (no fencing then), and the moved task rebuilt
        assert reads == [True, False]
        assert tm.tasks_created == 3
        assert tm.tasks[(0, 0)].committed == {(SRC, 0): 1}


def test_with_broker_compat_unmoved_offsets_restore_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _recording_reads(monkeypatch)
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "exactly_once_v2", broker_compat="tansu") as r:
        r.turn(4)
        assert reads == [True, False]
        assert r.thread.task_manager.tasks_created == 2
    assert sorted(counts(cluster)) == EXACT


def test_at_least_once_reads_once_even_with_broker_compat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without transactions there is no producer whose start fences a previous owner: the
    read before the tasks start is the one they start from, on any broker."""
    reads = _recording_reads(monkeypatch)
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "at_least_once", broker_compat="tansu") as r:
        r.turn(4)
        assert reads == [True]
    assert sorted(counts(cluster)) == EXACT
