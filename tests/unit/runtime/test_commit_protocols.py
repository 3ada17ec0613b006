"""The three commit protocols on the mock cluster: commits, failed commits, rollback, restart.

Each test drives the real stream thread one loop turn at a time over `MockClientSupplier`
clients (no broker, no group joins): the outcome is exact, so a duplicate or a lost update
shows as a wrong count.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.mock_runtime import DST, SRC, cluster_with_input, counts, latest, running, send

from kstream.errors import ProduceError
from kstream.runtime.commit import AtLeastOnce, ExactlyOncePerTask, ExactlyOnceV2

GUARANTEES = ["at_least_once", "exactly_once", "exactly_once_v2"]
EXPECTED = {"a": 1, "b": 2, "c": 1}


@pytest.mark.parametrize(
    ("guarantee", "protocol"),
    [
        ("at_least_once", AtLeastOnce),
        ("exactly_once", ExactlyOncePerTask),
        ("exactly_once_v2", ExactlyOnceV2),
    ],
)
def test_each_guarantee_commits_outputs_and_input_offsets(
    tmp_path: Path, guarantee: str, protocol: type
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        assert type(r.thread.commits) is protocol
        r.turn(3)
        assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
        assert cluster.committed("app", SRC, 0) == 2


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_restart_restores_the_store_from_its_changelog(tmp_path: Path, guarantee: str) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path / "one", guarantee) as r:
        r.turn(3)
    send(cluster, "b a")
    # a new state directory: nothing local survives, the counts come from the changelog
    with running(cluster, tmp_path / "two", guarantee) as r:
        r.turn(3)
    assert latest(cluster) == {"a": 2, "b": 3, "c": 1}
    assert cluster.committed("app", SRC, 0) == 3


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_failed_transaction_commit_is_rolled_back_and_retried(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        cluster.fail_next_commit()
        r.turn(4)
        assert r.app.metrics.txn_aborted == 1
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    assert cluster.committed("app", SRC, 0) == 2


def test_at_least_once_a_failed_offset_commit_is_committed_without_new_input(
    tmp_path: Path,
) -> None:
    """The offsets of a failed offset commit are committed at the next commit even when no
    new input comes: they stayed behind until new input arrived, and a restart meanwhile
    replayed everything since the last good commit (simulator seeds 187, 368)."""
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, "at_least_once") as r:
        cluster.fail_next_commit()
        r.turn(1)
        assert cluster.committed("app", SRC, 0) is None
        r.turn(2)
        assert cluster.committed("app", SRC, 0) == 2
        # the outputs and store updates of the failed commit stood: nothing is counted twice
        send(cluster, "d")
        r.turn(3)
        assert r.thread.ctx.duplicates_dropped == 0
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1), ("d", 1)]
    assert cluster.committed("app", SRC, 0) == 3


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2"])
def test_a_timed_out_transaction_gets_a_new_producer_and_is_retried(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        r.poll()  # the input batch is processed: its transaction is open
        made = r.supplier.producers[:]
        cluster.time_out_transactions()
        r.turn(4)
        # the commit's outcome is unknown: a new producer settles it (exactly_once: one for
        # the settling, one for the revived task), and the task goes on with a new one
        assert len(r.supplier.producers) > len(made)
        assert all(p is not r.thread.tasks[(0, 0)].producer for p in made)
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_dropped_connection_is_retried_without_losing_or_repeating(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path, guarantee) as r:
        cluster.drop_connection(polls=2)
        r.turn(5)
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]


def test_exactly_once_v2_rolls_back_every_task_of_the_shared_transaction(
    tmp_path: Path,
) -> None:
    cluster = cluster_with_input("a b", "b c", "c d", "d e", partitions=2)
    with running(cluster, tmp_path, "exactly_once_v2") as r:
        r.poll()
        open_tasks = [rt for rt in r.thread.tasks.values() if rt.open]
        assert len(open_tasks) == 2
        rolled_back = r.thread.commits.rollback(open_tasks[0], list(r.thread.tasks.values()))
        assert set(rolled_back) == set(open_tasks)
        assert not any(rt.open for rt in r.thread.tasks.values())
        assert r.app.metrics.txn_aborted == 1


def test_exactly_once_per_task_rolls_back_the_failed_task_alone(tmp_path: Path) -> None:
    cluster = cluster_with_input("a b", "b c", "c d", "d e", partitions=2)
    with running(cluster, tmp_path, "exactly_once") as r:
        r.poll()
        open_tasks = [rt for rt in r.thread.tasks.values() if rt.open]
        assert len(open_tasks) == 2
        rolled_back = r.thread.commits.rollback(open_tasks[0], list(r.thread.tasks.values()))
        assert rolled_back == [open_tasks[0]]
        assert open_tasks[1].open


@pytest.mark.parametrize("compat", ["none", "tansu"])
def test_a_rebalance_restores_every_store_with_one_consumer_and_counts_what_it_applied(
    tmp_path: Path, compat: str
) -> None:
    """Every store of every task a rebalance assigns (their own, and their dedup marks when
    the broker-compatibility component keeps them) is read by one restore consumer, and the
    records applied are counted per store (`kstream_restore_records_total`)."""
    marks = compat == "tansu"
    ends = 0 if marks else 2
    cluster = cluster_with_input("a b", "b c")
    with running(cluster, tmp_path / "one", "exactly_once", broker_compat=compat) as r:
        r.turn(3)
        # the group's consumer, and one restore consumer for both tasks (0_0: its marks; 1_0:
        # the counts and its marks); on Apache Kafka two clients first ask the changelogs'
        # ends (kstream.runtime.task_restore.await_stable_changelogs)
        assert len(r.supplier.consumers) == 1 + 1 + ends
        # empty changelogs: every store's series, at zero
        expected = {"counts": 0}
        if marks:
            expected.update({"kstream-src-marks-0": 0, "kstream-src-marks-1": 0})
        assert r.app.metrics.restored_by_store == expected
    send(cluster, "c")
    with running(cluster, tmp_path / "two", "exactly_once", broker_compat=compat) as r:
        r.turn(3)
        assert len(r.supplier.consumers) == 1 + 1 + ends
        # the counts' changelog holds a, b and c once each (one commit wrote them); the marks
        # of sub-topology 1 one mark (the repartition partition's, whose records carry
        # provenance ids); sub-topology 0 reads what a plain producer wrote: no marks
        expected = {"counts": 3}
        if marks:
            expected.update({"kstream-src-marks-0": 0, "kstream-src-marks-1": 1})
        assert r.app.metrics.restored_by_store == expected
    assert latest(cluster) == {"a": 1, "b": 2, "c": 2}


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_the_protocol_gives_each_task_its_producer_and_closes_the_tasks_own(
    tmp_path: Path, guarantee: str
) -> None:
    """exactly_once: one transactional producer per task, named after it, so that a new
    owner fences the old one; the others: one producer the thread's tasks share (under
    exactly_once_v2 the thread's transactional one). Closing the tasks closes the per-task
    producers; a shared one lives until the thread closes."""
    cluster = cluster_with_input("a b", "c d", partitions=2)
    with running(cluster, tmp_path, guarantee) as r:
        r.turn(2)
        tasks = list(r.thread.tasks.values())
        names = sorted(str(rt.producer.transactional_id) for rt in tasks)
        if guarantee == "exactly_once":
            assert names == sorted(f"app-{rt.id}" for rt in tasks)
        else:
            assert {rt.producer for rt in tasks} == {r.thread.shared_producer()}
            want = r.thread.transactional_id if guarantee == "exactly_once_v2" else None
            assert names == [str(want)] * len(tasks)
        r.thread.task_manager.close_all()
        for rt in tasks:
            if guarantee == "exactly_once":
                with pytest.raises(ProduceError, match="closed"):
                    rt.producer.produce(DST, b"x")
            else:
                assert rt.producer is r.thread.shared_producer()


@pytest.mark.parametrize(
    ("guarantee", "transactional", "fences_per_task"),
    [
        ("at_least_once", False, False),
        ("exactly_once", True, True),
        ("exactly_once_v2", True, False),
    ],
)
def test_the_protocol_answers_for_its_guarantee(
    tmp_path: Path, guarantee: str, transactional: bool, fences_per_task: bool
) -> None:
    """The runtime asks the thread's protocol what the guarantee means (no other place tests
    the guarantee's name): its name, whether tasks write in transactions, and whether a new
    owner can fence the previous one task by task."""
    cluster = cluster_with_input("a")
    with running(cluster, tmp_path, guarantee) as r:
        commits = r.thread.commits
        assert (commits.guarantee, commits.transactional, commits.fences_per_task) == (
            guarantee,
            transactional,
            fences_per_task,
        )
