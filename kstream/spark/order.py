"""Merging per-partition queues by the timestamp at their heads.

A Kafka Streams task picks its next record from the input partition whose head is oldest; a
Spark step that sees several partitions at once keeps the same order so its results (and what it
writes) are the ones the native runtime gives, and a replayed batch writes the same sequence.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def merge_by_head(queues: Sequence[list[T]], head_ts: Callable[[T], int]) -> list[T]:
    """Each queue (already in its own order) kept in order; the next item always taken from the
    queue whose head has the smallest `head_ts` (ties: the earlier queue)."""
    if len(queues) == 1:
        return queues[0]
    heads = [(head_ts(q[0]), n, 0) for n, q in enumerate(queues) if q]
    heapq.heapify(heads)
    out: list[T] = []
    while heads:
        _ts, n, i = heapq.heappop(heads)
        q = queues[n]
        out.append(q[i])
        if i + 1 < len(q):
            heapq.heappush(heads, (head_ts(q[i + 1]), n, i + 1))
    return out


def tp_order(tp: tuple[Any, Any]) -> tuple[str, int]:
    """The order of (topic, partition) queues, so ties go to the one that sorts first and a
    replayed batch, whose rows may arrive in another order, merges the same way."""
    return (tp[0] or "", tp[1] if tp[1] is not None else -1)
