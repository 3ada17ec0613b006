"""`merge_by_head`, the one merge of a task's input partitions (native runtime and Spark), is
Kafka's rule: the next record comes from the partition whose head is oldest, ties to the
earlier partition, and a partition's own order is kept even when its timestamps go back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kstream.records import merge_by_head

Item = tuple[int, int, int]  # (timestamp, queue, position in the queue)


def _head_choice(queues: list[list[Item]]) -> list[Item]:
    """The rule written out: look at every head, take the oldest (first queue on a tie)."""
    pos = [0] * len(queues)
    out: list[Item] = []
    while True:
        heads = [(q[pos[n]][0], n) for n, q in enumerate(queues) if pos[n] < len(q)]
        if not heads:
            return out
        _ts, n = min(heads)
        out.append(queues[n][pos[n]])
        pos[n] += 1


def _queues(stamps: list[list[int]]) -> list[list[Item]]:
    return [[(ts, n, i) for i, ts in enumerate(q)] for n, q in enumerate(stamps)]


def test_an_out_of_order_record_waits_behind_its_partition_s_head() -> None:
    # partition 0 holds 5 then 1: the 1 is not taken before partition 1's 3, whose head is older
    queues = _queues([[5, 1], [3, 4]])
    assert [ts for ts, _, _ in merge_by_head(queues, lambda x: x[0])] == [3, 4, 5, 1]


def test_ties_go_to_the_earlier_queue() -> None:
    queues = _queues([[2, 2], [2], [1, 2]])
    assert [(ts, n) for ts, n, _ in merge_by_head(queues, lambda x: x[0])] == [
        (1, 2),
        (2, 0),
        (2, 0),
        (2, 1),
        (2, 2),
    ]


def test_one_queue_comes_back_as_it_is() -> None:
    queue = _queues([[9, 3, 7]])[0]
    assert merge_by_head([queue], lambda x: x[0]) == queue


@given(st.lists(st.lists(st.integers(0, 6), max_size=8), max_size=5))
def test_merge_by_head_is_the_head_choice(stamps: list[list[int]]) -> None:
    queues = _queues(stamps)
    merged = merge_by_head(queues, lambda x: x[0])
    assert merged == _head_choice(queues)
    for n, q in enumerate(queues):  # each partition's own order kept
        assert [x for x in merged if x[1] == n] == q
