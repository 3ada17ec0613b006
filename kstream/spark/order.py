"""The order of a Spark step's per-partition queues, for `kstream.records.merge_by_head`.

A Kafka Streams task picks its next record from the input partition whose head is oldest; a
Spark step that sees several partitions at once merges them with the same function the native
runtime uses, its queues in the order below, so its results (and what it writes) are the ones
the native runtime gives, and a replayed batch writes the same sequence.
"""

from __future__ import annotations

from typing import Any


def tp_order(tp: tuple[Any, Any]) -> tuple[str, int]:
    """The order of (topic, partition) queues, so ties go to the one that sorts first and a
    replayed batch, whose rows may arrive in another order, merges the same way."""
    return (tp[0] or "", tp[1] if tp[1] is not None else -1)
