"""A commit whose answer is lost (a timeout, a call abandoned at its deadline) may have
committed: the tasks are revived from what the broker holds, never replayed from the offsets
they knew (which duplicated every output of the batch: simulator fault `commit_landed`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from support.mock_runtime import SRC, cluster_with_input, counts, running, send

from kstream.kafka.errors import ClientStuckError, FatalTransactionError
from kstream.testing import MockProducer

GUARANTEES = ["exactly_once_v2", "exactly_once"]


def _lose_next_commit_answer(
    monkeypatch: pytest.MonkeyPatch, landed: bool, error: type[Exception]
) -> list[int]:
    """The next transaction commit raises `error` after committing (`landed`) or before it
    reached the broker (not `landed`: the transaction stays open, as a commit that never got
    through leaves it, and is aborted by the producer that takes the id over)."""
    real = MockProducer.commit
    calls: list[int] = []

    def commit(self: MockProducer, timeout: float | None = None) -> None:
        if calls:
            real(self, timeout)
            return
        calls.append(1)
        if landed:
            real(self, timeout)
        raise error("committing a transaction: _TIMED_OUT (the answer was lost)")

    monkeypatch.setattr(MockProducer, "commit", commit)
    return calls


@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize("error", [FatalTransactionError, ClientStuckError])
@pytest.mark.parametrize("landed", [True, False], ids=["landed", "lost"])
def test_a_commit_with_a_lost_answer_is_settled_from_the_broker(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    guarantee: str,
    error: type[Exception],
    landed: bool,
) -> None:
    cluster = cluster_with_input("a b")
    with running(cluster, tmp_path, guarantee) as r:
        r.turn(3)
        send(cluster, "b c")
        r.poll()
        calls = _lose_next_commit_answer(monkeypatch, landed, error)
        r.commit()
        assert calls == [1]
        r.turn(4)
        send(cluster, "a")
        r.turn(3)
    assert sorted(counts(cluster)) == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("c", 1)]
    assert cluster.committed("app", SRC, 0) == 3


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_revoke_whose_commit_loses_its_answer_closes_the_revived_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    """The commit of a revoke revives the tasks; the revoke then gives up the revived ones
    (it gave up the replaced ones again before: their closed stores were suspended, and the
    task resumed from them failed with 'store is closed', simulator seed 169)."""
    cluster = cluster_with_input("a b", "b c", partitions=2)
    with running(cluster, tmp_path, guarantee) as r:
        r.poll()
        r.commit()
        r.poll()  # the count tasks (with stores) have the repartitioned words open
        tm = r.thread.task_manager
        assert [rt.id for rt in tm.tasks.values() if rt.open] in (["1_0"], ["1_1"], ["1_0", "1_1"])
        everything = [TopicPartition(t, p) for t, p in tm.task_of]
        _lose_next_commit_answer(monkeypatch, True, FatalTransactionError)
        tm.on_revoke(everything)
        assert tm.tasks == {}
        tm.on_assign(everything)
        r.turn(4)
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
