"""A punctuation scheduled by a processor (`ProcessorContext.schedule`).

Its own module so `topology/task.py`, which runs tasks, stays about running them; a task keeps
its schedules and fires them when stream time or the wall clock reaches them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from kstream.topology.processor import PunctuationType

if TYPE_CHECKING:
    from kstream.topology.nodes import NodeContext


# Kafka Streams keeps a task's punctuations in a priority queue by due time, and puts one back
# (with its next due time) after it fires; punctuations due at the same time fire in the order
# they were queued. `Schedule.seq` is that order.
_queued = itertools.count()


class Schedule:
    """A punctuation: `callback(time)` when the chosen clock reaches `due`.

    Due punctuations fire earliest `due` first, ties in the order they were scheduled or last
    fired (`order`), as Kafka Streams' punctuation queue does: when one punctuation forwards
    into a processor that punctuates too, the order decides what the second one emits.
    """

    __slots__ = ("callback", "cancelled", "ctx", "due", "interval", "seq", "type")

    def __init__(
        self,
        ctx: NodeContext,
        interval: int,
        type: PunctuationType,
        callback: Callable[[int], None],
        due: int,
    ) -> None:
        self.ctx = ctx
        self.interval = interval
        self.type = type
        self.callback = callback
        self.due = due
        self.cancelled = False
        self.seq = next(_queued)

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Next due time on this schedule's grid after `now` (missed ones fire once, not many)."""
        missed = (now - self.due) // self.interval
        self.due += (missed + 1) * self.interval
        self.seq = next(_queued)

    def order(self) -> tuple[int, int]:
        """The firing order among due punctuations: earliest due, then first queued."""
        return (self.due, self.seq)
