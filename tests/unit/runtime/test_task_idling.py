"""Task idling: Kafka's readiness rule (`PartitionBuffers`) and what the runtime does with it
(records held back are not committed; a rollback drops them; single-input tasks never buffer).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Message
from support.mock_runtime import running

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError
from kstream.records import Record
from kstream.runtime.idling import LagOf, PartitionBuffers
from kstream.testing import MockCluster, MockProducer

S, T = ("s", 0), ("t", 0)


def _feed(buf: PartitionBuffers, tp: tuple[str, int], *stamps: tuple[int, int]) -> None:
    """Buffer records of `tp` with (offset, timestamp) `stamps`."""
    msgs = [
        Message(topic=tp[0], partition=tp[1], offset=o, key=b"k", value=b"v", timestamp=(1, ts))
        for o, ts in stamps
    ]
    buf.receive(tp, msgs)
    buf.add(
        tp, [Record(b"k", b"v", ts, topic=tp[0], partition=tp[1], offset=o) for o, ts in stamps]
    )


def _constant(lag: int | None) -> LagOf:
    """A consumer that reports `lag` for every partition."""
    return lambda _tp, _pos: lag


def test_all_partitions_buffered_is_ready_whatever_the_lags() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=10_000)
    _feed(buf, S, (0, 5))
    _feed(buf, T, (0, 9))
    assert buf.ready(0, lambda tp, pos: None)


def test_an_empty_partition_with_unknown_or_positive_lag_always_waits() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=0)
    _feed(buf, S, (0, 5))
    for lag in (None, 3):
        assert not buf.ready(10**12, _constant(lag))
        assert not buf.deadlines  # waiting for data, not idling


def test_a_caught_up_empty_partition_is_waited_for_max_task_idle_ms() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=1_000)
    _feed(buf, S, (0, 5))
    assert not buf.ready(5_000, lambda tp, pos: 0)  # the deadline starts now: 6_000
    assert not buf.ready(5_999, lambda tp, pos: 0)
    assert buf.ready(6_000, lambda tp, pos: 0)
    assert buf.enforced == 1


def test_idle_zero_goes_ahead_at_once_when_the_empty_partition_is_caught_up() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=0)
    _feed(buf, S, (0, 5))
    assert buf.ready(1, lambda tp, pos: 0)


def test_data_arriving_resets_the_deadline() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=1_000)
    _feed(buf, S, (0, 5))
    assert not buf.ready(0, lambda tp, pos: 0)
    _feed(buf, T, (0, 1))
    assert buf.ready(100, lambda tp, pos: 0)
    assert buf.deadlines == {}
    assert [r.topic for r in buf.take()] == ["t"]  # t@1 before s@5, then T ran dry
    assert not buf.ready(200, lambda tp, pos: 0)  # T's wait starts afresh: until 1_200
    assert buf.ready(1_200, lambda tp, pos: 0)


def test_nothing_buffered_is_never_ready() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=0)
    assert not buf.ready(10**12, lambda tp, pos: 0)


def test_take_merges_by_head_and_stops_where_a_partition_runs_dry() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=0)
    _feed(buf, S, (0, 10), (1, 30), (2, 50))
    _feed(buf, T, (0, 5), (1, 20))
    taken = buf.take()
    assert [(r.topic, r.offset) for r in taken] == [("t", 0), ("s", 0), ("t", 1)]
    assert buf.committable(T) == 2
    assert buf.committable(S) == 1  # s@1 and s@2 are still buffered: not committed
    # T is now empty: with data at the broker the rest waits; caught up, it goes on
    assert not buf.ready(0, lambda tp, pos: 4 if tp == T else None)
    assert buf.ready(0, lambda tp, pos: 0)
    assert [r.offset for r in buf.take()] == [1, 2]
    assert buf.committable(S) == 3


def test_lag_is_asked_from_the_next_offset_expected() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=0)
    buf.start = {T: 7}
    _feed(buf, S, (0, 1))
    asked: list[tuple[tuple[str, int], int | None]] = []

    def lag_of(tp: tuple[str, int], pos: int | None) -> int:
        asked.append((tp, pos))
        return 0

    buf.ready(0, lag_of)
    assert asked == [(T, 7)]
    _feed(buf, T, (7, 2), (8, 3))
    buf.take()
    buf.take()
    asked.clear()
    _feed(buf, S, (1, 4))
    buf.ready(0, lag_of)
    assert asked == [(T, 9)]


def test_reset_drops_the_buffers_and_restarts_from_the_committed_offsets() -> None:
    buf = PartitionBuffers([S, T], max_idle_ms=0)
    _feed(buf, S, (3, 1), (4, 2))
    buf.reset({S: 3})
    assert not buf.pending and buf.committable(S) is None and buf.position(S) == 3
    assert buf.find_raw(S, 3) is None


@pytest.mark.parametrize("value", [-2, 1.5, True, "5s"])
def test_max_task_idle_ms_is_validated(value: object) -> None:
    with pytest.raises(ConfigError, match="max_task_idle_ms"):
        Config(max_task_idle_ms=value)  # type: ignore[arg-type]


# --- the runtime on the mock cluster ----------------------------------------------------------


def _join() -> StreamBuilder:
    b = StreamBuilder()
    t = b.table("prices", key_serde="string", value_serde="string", store="p")
    b.stream("orders", key_serde="string", value_serde="string").left_join(
        t, lambda v, tv: f"{v}|{tv}"
    ).to("out", key_serde="string", value_serde="string")
    return b


def _cluster() -> MockCluster:
    cluster = MockCluster()
    for topic in ("orders", "prices", "out"):
        cluster.create_topic(topic, 1)
    return cluster


def _send(cluster: MockCluster, topic: str, *rows: tuple[str, str, int]) -> None:
    p = MockProducer(cluster)
    for key, value, ts in rows:
        p.produce(topic, value.encode(), key=key.encode(), timestamp=ts)
    p.flush()


def _out(cluster: MockCluster) -> list[tuple[str, str]]:
    return [
        ((m.key() or b"").decode(), (m.value() or b"").decode()) for m in cluster.messages("out")
    ]


IDLE_MS = 200


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_records_held_back_are_not_committed_and_join_when_the_table_arrives(
    tmp_path: Path, guarantee: str
) -> None:
    cluster = _cluster()
    _send(cluster, "orders", ("a", "o1", 100), ("b", "o2", 101))
    with running(cluster, tmp_path, guarantee, topology=_join(), max_task_idle_ms=IDLE_MS) as r:
        r.turn(3)  # within the idle time: the orders wait for the empty prices partition
        assert _out(cluster) == []
        assert cluster.committed("app", "orders", 0) in (None, 0)
        _send(cluster, "prices", ("a", "p1", 10), ("b", "p2", 11))
        r.turn(2)
        # the prices (earlier) are processed; then their partition is empty again and the
        # orders wait for it once more (Kafka's rule: each time a partition runs dry)
        assert _out(cluster) == []
        assert cluster.committed("app", "prices", 0) == 2
        assert cluster.committed("app", "orders", 0) in (None, 0)
        time.sleep(IDLE_MS / 1000 + 0.05)
        r.turn()
        assert _out(cluster) == [("a", "o1|p1"), ("b", "o2|p2")]
        assert cluster.committed("app", "orders", 0) == 2


def test_without_idling_the_stream_side_goes_first(tmp_path: Path) -> None:
    cluster = _cluster()
    _send(cluster, "orders", ("a", "o1", 100))
    with running(cluster, tmp_path, "at_least_once", topology=_join(), max_task_idle_ms=-1) as r:
        r.turn(2)
        _send(cluster, "prices", ("a", "p1", 10))
        r.turn(2)
        assert _out(cluster) == [("a", "o1|None")]
        assert r.thread.tasks[(0, 0)].buffers is None


def test_single_input_tasks_do_not_buffer(tmp_path: Path) -> None:
    b = StreamBuilder()
    b.stream("orders", key_serde="string", value_serde="string").map_values(str.upper).to(
        "out", key_serde="string", value_serde="string"
    )
    cluster = _cluster()
    _send(cluster, "orders", ("a", "x", 1))
    with running(cluster, tmp_path, "at_least_once", topology=b) as r:
        r.turn(2)
        assert all(rt.buffers is None for rt in r.thread.tasks.values())
        assert _out(cluster) == [("a", "X")]


def test_a_rollback_drops_the_buffered_records_and_reads_them_again(tmp_path: Path) -> None:
    cluster = _cluster()
    _send(cluster, "orders", ("a", "o1", 100))
    with running(
        cluster, tmp_path, "exactly_once_v2", topology=_join(), max_task_idle_ms=IDLE_MS
    ) as r:
        r.turn(2)
        rt = r.thread.tasks[(0, 0)]
        assert rt.buffers is not None and rt.buffers.pending
        r.thread.task_manager.seek_back(r.thread.task_manager.rollback(rt))
        assert not rt.buffers.pending
        _send(cluster, "prices", ("a", "p1", 10))
        r.turn(2)
        time.sleep(IDLE_MS / 1000 + 0.05)
        r.turn()
        assert _out(cluster) == [("a", "o1|p1")]
        assert cluster.committed("app", "orders", 0) == 1
