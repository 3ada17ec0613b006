"""The offsets a producer's records got on some topics: the highest per partition, taken once.

A store's checkpoint is the next changelog offset to read on restore, so after a commit the
runtime takes the offsets its changelog records were delivered at (`Producer.take_offsets`).
An aborted transaction's records are not part of the changelog's committed history: the abort
drops what was tracked. The producer and its in-memory stand-in (kstream.testing) keep this
bookkeeping in this one class, so the two cannot disagree on it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DeliveredOffsets"]


class DeliveredOffsets:
    """The highest delivered offset per partition of `topics` since the last `take`."""

    __slots__ = ("_offsets", "topics")

    def __init__(self, topics: Iterable[str] | None) -> None:
        self.topics = frozenset(topics or ())
        self._offsets: dict[tuple[str, int], int] = {}

    def delivered(self, topic: str, partition: int, offset: int) -> None:
        """A record of a tracked topic was delivered at `offset` (the caller checks that
        `topic in self.topics`: on the delivery path of every record, that test is inline)."""
        tp = (topic, partition)
        if offset > self._offsets.get(tp, -1):
            self._offsets[tp] = offset

    def take(self) -> dict[tuple[str, int], int]:
        """The offsets since the last call (and forget them)."""
        out, self._offsets = self._offsets, {}
        return out

    def drop(self) -> None:
        """Forget the offsets since the last `take` (their transaction was aborted)."""
        self._offsets = {}
