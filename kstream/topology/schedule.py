"""A punctuation scheduled by a processor (`ProcessorContext.schedule`).

Its own module so `topology/task.py`, which runs tasks, stays about running them; a task keeps
its schedules and fires them when stream time or the wall clock reaches them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kstream.topology.processor import PunctuationType

if TYPE_CHECKING:
    from kstream.topology.nodes import NodeContext


class Schedule:
    """A punctuation: `callback(time)` when the chosen clock reaches `due`."""

    __slots__ = ("callback", "cancelled", "ctx", "due", "interval", "type")

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

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Next due time on this schedule's grid after `now` (missed ones fire once, not many)."""
        missed = (now - self.due) // self.interval
        self.due += (missed + 1) * self.interval
