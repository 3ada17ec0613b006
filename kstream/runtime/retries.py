"""The stream thread's retry budget: how many failed attempts in a row it allows, and how long
it backs off after each.

A failure while Kafka does not answer is no attempt: the outage is waited out instead
(kstream.runtime.outage). A commit that moves input offsets on ends the run of failures
(`progressed`). More than `failures.MAX_RETRIES` in a row and the failure is raised: retrying
cannot fix it. The task manager owns the budget; the thread only reads `backoff` to replace it
(broker-free tests retry without waiting, the simulator on its clock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kstream.runtime.failures import MAX_RETRIES
from kstream.runtime.outage import BrokerOutage

__all__ = ["Halt", "RetryBudget"]


class RetryBudget:
    """Counts failed attempts in a row; backs off after each, raises past the limit."""

    def __init__(self, outage: BrokerOutage, backoff: Callable[[float], None] = time.sleep):
        self.outage = outage
        # how the thread waits before retrying
        self.backoff = backoff
        self.failures = 0

    def wait_out(self, error: BaseException) -> bool:
        """If `error` is a client error and Kafka does not answer: wait until it does (or the
        app stops) and return True; else False at once."""
        return self.outage.wait_out(error)

    def failed_once(self, error: BaseException) -> None:
        """Count a failed attempt and back off; raise `error` when the retries are used up. A
        failure while Kafka does not answer is no attempt: the outage is waited out."""
        if self.outage.wait_out(error):
            return
        self.failures += 1
        if self.failures > MAX_RETRIES:
            raise error
        self.backoff(min(0.1 * self.failures, 2.0))

    def progressed(self) -> None:
        """A commit moved input offsets on: the run of failures is over."""
        self.failures = 0


class Halt:
    """The stream thread's stop and the error it stops on, shared by the parts of the task
    manager (task_manager.py and what it composes).

    A part that gives up inside a rebalance callback (whose errors the consumer swallows)
    records the error here and sets the stop; the thread raises the error at its next turn.
    State only: no part calls another back through it."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        """Give up on `error`: the thread raises it at its next turn."""
        self.error = error
        self.stop.set()
