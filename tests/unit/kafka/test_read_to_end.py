"""`read_to_end`, the one loop that reads partitions from given offsets to their end
(kstream.kafka.read_to_end), over the mock consumer and over a scripted one whose end-of-
partition events lie past the last record, as a transaction's commit marker makes them."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING

from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end
from kstream.testing import MockCluster, MockConsumer, MockProducer


def _cluster(counts: dict[int, int]) -> MockCluster:
    cluster = MockCluster()
    cluster.create_topic("t", len(counts))
    p = MockProducer(cluster)
    for part, n in counts.items():
        for i in range(n):
            p.produce("t", f"v{i}".encode(), f"k{i}".encode(), partition=part)
    p.flush()
    return cluster


def test_reads_each_partition_from_its_start_to_its_end() -> None:
    c = MockConsumer(_cluster({0: 5, 1: 0, 2: 3}))
    starts = {("t", 0): 2, ("t", 1): 0, ("t", 2): OFFSET_BEGINNING}
    got: list[tuple[int, int]] = []
    ended: dict[tuple[str, int], int] = {}
    for batch in read_to_end(c, starts, max_records=2):
        got += [(m.partition(), m.offset()) for m in batch.messages]
        assert not ended.keys() & batch.ended.keys(), "a partition ends once"
        ended.update(batch.ended)
    assert sorted(got) == [(0, 2), (0, 3), (0, 4), (2, 0), (2, 1), (2, 2)]
    assert ended == {("t", 0): 5, ("t", 1): 0, ("t", 2): 3}


def test_nothing_to_read_ends_at_once() -> None:
    c = MockConsumer(_cluster({0: 0}))
    batches = list(read_to_end(c, {("t", 0): 0}))
    assert [(b.messages, b.ended) for b in batches] == [([], {("t", 0): 0})]
    assert list(read_to_end(c, {})) == []


class _Msg:
    def __init__(self, partition: int, offset: int) -> None:
        self._p, self._o = partition, offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


class _Scripted:
    """A consumer that returns `script`'s batches in turn (then nothing), each with the
    end-of-partition offsets it reports after that batch."""

    def __init__(self, script: list[tuple[list[_Msg], dict[int, int]]]) -> None:
        self.script = script
        self.eof: dict[int, int] = {}
        self.assigned: list[Any] = []

    def assign(self, partitions: Any) -> None:
        self.assigned = list(partitions)

    def consume_batch(self, max_records: int, timeout_s: float) -> list[Any]:
        if not self.script:
            return []
        msgs, eof = self.script.pop(0)
        self.eof.update(eof)
        return list(msgs)

    def eof_offset(self, topic: str, partition: int) -> int | None:
        return self.eof.get(partition)


def test_the_end_may_lie_past_the_last_record() -> None:
    # records 0..2, then a commit marker at 3: the end is 4, never delivered as a record
    c = _Scripted([([_Msg(0, 0), _Msg(0, 1)], {}), ([_Msg(0, 2)], {0: 4})])
    batches = list(read_to_end(c, {("t", 0): 0}))
    assert c.assigned == [("t", 0, 0)]
    assert [[m.offset() for m in b.messages] for b in batches] == [[0, 1], [2]]
    assert batches[-1].ended == {("t", 0): 4}


def test_an_end_behind_the_position_is_not_the_end() -> None:
    # the end as of the call: once a partition's EOF reaches its position, it is done
    c = _Scripted([([_Msg(0, 0)], {0: 1}), ([_Msg(0, 1), _Msg(0, 0)], {}), ([], {0: 2})])
    batches = list(read_to_end(c, {("t", 0): 0}))
    assert [([m.offset() for m in b.messages], b.ended) for b in batches] == [
        ([0], {("t", 0): 1}),
    ]
    # an EOF at 1 that came with record 1 (written after that fetch): read on to the next EOF
    c = _Scripted([([_Msg(0, 0)], {}), ([_Msg(0, 1), _Msg(0, 0)], {0: 1}), ([], {0: 2})])
    batches = list(read_to_end(c, {("t", 0): 0}))
    assert [([m.offset() for m in b.messages], b.ended) for b in batches] == [
        ([0], {}),
        ([1], {}),  # the repeated offset 0 is dropped: the position never goes back
        ([], {("t", 0): 2}),
    ]


def test_no_progress_raises_naming_the_open_partitions() -> None:
    c = _Scripted([([_Msg(1, 7)], {0: 3})])
    with pytest.raises(ReadToEndTimeout, match=r"t\[1\] at offset 8") as e:
        list(read_to_end(c, {("t", 0): 3, ("t", 1): 5}, poll_s=0, idle_timeout=0.05))
    assert e.value.positions == {("t", 1): 8}
    with pytest.raises(ReadToEndTimeout, match="no end reached in"):
        list(read_to_end(_Scripted([]), {("t", 0): 0}, idle_timeout=None, timeout=0.05))


def test_stop_ends_the_read_early() -> None:
    class Stop:
        def is_set(self) -> bool:
            return True

    assert list(read_to_end(_Scripted([([_Msg(0, 0)], {})]), {("t", 0): 0}, stop=Stop())) == []


def test_a_range_is_read_up_to_its_stop_offset() -> None:
    c = MockConsumer(_cluster({0: 6, 1: 4}))
    starts = {("t", 0): 1, ("t", 1): 0}
    got: list[tuple[int, int]] = []
    ended: dict[tuple[str, int], int] = {}
    for batch in read_to_end(c, starts, stops={("t", 0): 4}, max_records=2):
        got += [(m.partition(), m.offset()) for m in batch.messages]
        ended.update(batch.ended)
    # partition 0 stops before offset 4; partition 1, with no stop, is read to its end
    assert sorted(got) == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert ended == {("t", 0): 4, ("t", 1): 4}


def test_a_range_ends_at_an_end_event_past_its_stop_or_a_record_beyond_it() -> None:
    # records 0 and 1, then a commit marker at 2 and the end at 3: the range [0, 3) is done
    c = _Scripted([([_Msg(0, 0), _Msg(0, 1)], {}), ([], {0: 3})])
    batches = list(read_to_end(c, {("t", 0): 0}, stops={("t", 0): 3}))
    assert [([m.offset() for m in b.messages], b.ended) for b in batches] == [
        ([0, 1], {}),
        ([], {("t", 0): 3}),
    ]
    # an end event short of the stop is not the range's end; a record past the stop is
    c = _Scripted([([_Msg(0, 0)], {0: 1}), ([_Msg(0, 2), _Msg(0, 5)], {})])
    batches = list(read_to_end(c, {("t", 0): 0}, stops={("t", 0): 4}))
    assert [([m.offset() for m in b.messages], b.ended) for b in batches] == [
        ([0], {}),
        ([2], {("t", 0): 4}),
    ]
