"""Fencing, the record error policies and provenance dedup, on the mock cluster (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.mock_runtime import (
    DST,
    SRC,
    cluster_with_input,
    counts,
    latest,
    running,
    send,
)

from kstream.dsl import StreamBuilder
from kstream.errors import ProcessingError
from kstream.state.provenance import HEADER, encode
from kstream.testing import MockCluster, MockProducer

DLQ = "dead-letters"


def test_a_zombie_is_fenced_by_the_new_owner_of_its_task(tmp_path: Path) -> None:
    """exactly_once: the new owner's task producer (same transactional id) fences the old
    one; the zombie cannot begin its next transaction, drops the batch and rejoins."""
    cluster = cluster_with_input("a b")
    with running(cluster, tmp_path / "zombie", "exactly_once") as zombie:
        zombie.turn(3)
        send(cluster, "b c")
        with running(cluster, tmp_path / "owner", "exactly_once") as owner:
            owner.poll()  # takes the tasks over: their producers fence the zombie's
            zombie.turn(1)  # cannot begin the transaction for "b c": fenced
            assert zombie.thread.rejoin_pending
            assert not any(rt.open for rt in zombie.thread.tasks.values())
            owner.turn(3)
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    assert cluster.committed("app", SRC, 0) == 2


def test_exactly_once_v2_a_fenced_thread_rejoins_with_a_new_producer_and_goes_on(
    tmp_path: Path,
) -> None:
    """The thread's producer is fenced mid-transaction (as the broker's abort of a transaction
    open past `transaction.timeout.ms` bumps its epoch): the open transaction is rolled back,
    the thread rejoins with a new producer (same transactional id) and processes the batch
    again, exactly once. Keeping the fenced producer failed every later `begin`, rejoining
    again and again for good (issue: 863 rejoins in three minutes, never committing)."""
    cluster = cluster_with_input("a b")
    with running(cluster, tmp_path, "exactly_once_v2") as r:
        r.turn(3)
        fenced = r.thread.shared_producer()
        send(cluster, "b c")
        r.poll()
        cluster.fence(r.thread.transactional_id)
        r.commit()
        assert r.thread.rejoin_pending
        assert not any(rt.open for rt in r.thread.tasks.values())
        r.turn(4)
        assert not r.thread.rejoin_pending
        assert r.thread.shared_producer() is not fenced
        assert not r.thread.shared_producer().fenced()
    assert sorted(counts(cluster)) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    assert cluster.committed("app", SRC, 0) == 2


def test_exactly_once_v2_fenced_again_after_each_rejoin_still_gets_through(
    tmp_path: Path,
) -> None:
    """Fenced at every one of several commits in a row (a user function slower than the
    transaction timeout, batch after batch): each time a new producer, and once the fencing
    stops the input is processed exactly once."""
    cluster = cluster_with_input("a b")
    with running(cluster, tmp_path, "exactly_once_v2") as r:
        for _ in range(3):
            r.poll()
            cluster.fence(r.thread.transactional_id)
            r.commit()
            assert r.thread.rejoin_pending
        r.turn(4)
        send(cluster, "a")
        r.turn(3)
    assert sorted(counts(cluster)) == [("a", 1), ("a", 2), ("b", 1)]
    assert cluster.committed("app", SRC, 0) == 2


def _upper_unless_bad() -> StreamBuilder:
    def upper(v: str) -> str:
        if v == "bad":
            raise ValueError("no bad values")
        return v.upper()

    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").map_values(upper).to(
        DST, key_serde="string", value_serde="string"
    )
    return b


def _values(cluster: MockCluster, topic: str) -> list[bytes | None]:
    return [m.value() for m in cluster.messages(topic)]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_processing_error_policy_fail_stops_before_committing(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("ok", "bad", "fine")
    with running(cluster, tmp_path, guarantee, topology=_upper_unless_bad()) as r:
        with pytest.raises(ProcessingError, match="no bad values") as failed:
            r.poll()
        r.thread.error = failed.value  # as `run` records it: closing rolls the batch back
    assert _values(cluster, DST) == []  # nothing of the failed batch reaches Kafka
    assert cluster.committed("app", SRC, 0) is None


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_processing_error_policy_skip_drops_the_record(tmp_path: Path, guarantee: str) -> None:
    cluster = cluster_with_input("ok", "bad", "fine")
    config = {"on_processing_error": "skip"}
    with running(cluster, tmp_path, guarantee, topology=_upper_unless_bad(), **config) as r:
        r.turn(2)
        assert r.thread.ctx.counts.skipped == {"deserialization": 0, "processing": 1}
    assert _values(cluster, DST) == [b"OK", b"FINE"]
    assert cluster.committed("app", SRC, 0) == 3


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_processing_error_policy_dlq_dead_letters_the_raw_record(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = cluster_with_input("ok", "bad", "fine")
    cluster.create_topic(DLQ, 1)
    config = {"on_processing_error": "dlq", "dlq_topic": DLQ}
    with running(cluster, tmp_path, guarantee, topology=_upper_unless_bad(), **config) as r:
        r.turn(2)
        assert r.thread.ctx.counts.dead_lettered == {"deserialization": 0, "processing": 1}
    assert _values(cluster, DST) == [b"OK", b"FINE"]
    [dead] = cluster.messages(DLQ)
    assert (dead.key(), dead.value()) == (b"k1", b"bad")
    headers = dict(dead.headers() or [])
    assert headers["kstream.error.exception"] == b"ValueError"
    assert headers["kstream.error.offset"] == b"1"
    assert cluster.committed("app", SRC, 0) == 3


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_records_repeated_upstream_are_counted_once(tmp_path: Path, guarantee: str) -> None:
    """A kstream upstream whose transaction was aborted but whose records a broker still
    shows writes them again: same provenance ids, dropped by the reading task when the
    broker-compatibility component is on (broker_compat="tansu"); on Apache Kafka such
    records never reach a read_committed reader, and a record is never dropped for its
    headers."""
    cluster = MockCluster()
    cluster.create_topic(SRC, 1)
    cluster.create_topic(DST, 1)
    upstream = MockProducer(cluster)
    for _attempt in range(2):
        for i, line in enumerate(["a b", "b c"]):
            hdrs = [(HEADER, encode("upstream-in", 0, i))]
            upstream.produce(SRC, line.encode(), f"k{i}".encode(), headers=hdrs)
    upstream.flush()
    with running(cluster, tmp_path, guarantee, broker_compat="tansu") as r:
        r.turn(3)
        assert r.thread.ctx.duplicates_dropped == 2
    assert latest(cluster) == {"a": 1, "b": 2, "c": 1}
    assert cluster.committed("app", SRC, 0) == 4
    with running(cluster, tmp_path / "kafka", guarantee, app_id="plain") as r:
        r.turn(3)
        assert r.thread.ctx.duplicates_dropped == 0
    assert cluster.committed("plain", SRC, 0) == 4
