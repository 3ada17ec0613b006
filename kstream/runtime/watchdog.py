"""The stream thread's heartbeat, and what liveness makes of it.

The state says what the app means to do, not whether its stream thread still does anything: a
thread stuck in a call that never returns left the state RUNNING and `/health/live` at 200 for
minutes (a transactional producer waiting for good in `send_offsets_to_transaction`). So the
loop beats once per turn (a clock read and a store, nothing per record) and liveness compares
the last beat with the clock when asked: once the loop has not turned for `STALL_S`, the app
is not live, with a reason that says for how long and where the thread is (its innermost
frames), and a watcher thread logs the same once per `STALL_S` while it lasts.

The client calls that can block for good have deadlines of their own (kstream.kafka.deadline),
after which the thread replaces the client and turns again; the watchdog catches what nothing
bounds (a user function or a store call that never returns) and makes it visible, so that an
orchestrator restarts the process. `STALL_S` is longer than every bounded wait of one turn: a
transactional call's 30 s timeout and its deadline's grace, a rollback's abort and a new
producer's start (10 s check, 30 s `init_transactions`), a remote store's retries. A restore
(run inside the rebalance callback, which can take long for big stores) does not count as a
stall; waiting out a broker outage beats (kstream.runtime.outage).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

__all__ = ["STALL_S", "Watchdog"]

log = logging.getLogger("kstream.runtime")

STALL_S = 120.0
"""How long the stream thread's loop may go without a turn before the app is not live."""

_FRAMES = 3
"""Innermost frames of the stuck thread named in the reason."""


class Watchdog:
    """The heartbeat of one stream thread: `beat` from the loop, `problem` from health checks.

    `excused()` says whether a long turn is expected right now (stores being restored)."""

    def __init__(
        self,
        stall_s: float | None = None,
        excused: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stall_s = STALL_S if stall_s is None else stall_s
        self._excused = excused
        self._clock = clock
        self.last = clock()
        self._ident: int | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def beat(self) -> None:
        """The loop turned (or a long wait is making progress)."""
        self.last = self._clock()

    def running_on(self, thread: threading.Thread) -> None:
        """The loop runs on `thread` (whose frames a stall names), from now: the clock starts."""
        self._ident = thread.ident
        self.beat()

    def stalled_for(self) -> float:
        """Seconds since the last beat."""
        return max(0.0, self._clock() - self.last)

    def problem(self) -> str | None:
        """Why the stream thread is not live (its loop has not turned for `stall_s`), or None."""
        stalled = self.stalled_for()
        if stalled < self.stall_s or self._excused():
            return None
        where = self.where()
        return (
            f"the stream thread's loop has not turned for {stalled:.0f}s (bound "
            f"{self.stall_s:g}s)" + (f"; it is in {where}" if where else "")
        )

    def where(self) -> str:
        """The stream thread's innermost frames, innermost last ("" when unknown)."""
        if self._ident is None:
            return ""
        frame = sys._current_frames().get(self._ident)
        if frame is None:
            return ""
        stack = traceback.extract_stack(frame)[-_FRAMES:]
        return " < ".join(
            f"{f.name} ({'/'.join(f.filename.split('/')[-2:])}:{f.lineno})" for f in reversed(stack)
        )

    # --- the watcher: a log line while the loop is stalled -------------------------------------

    def watch(self, name: str) -> None:
        """Log a WARNING once per `stall_s` while the loop is stalled, from a thread of its own
        (it wakes every quarter of `stall_s`); `stop_watching` ends it."""
        if self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._watch, name=name, daemon=True)
        self._watcher.start()

    def stop_watching(self) -> None:
        self._stop.set()
        self._watcher = None

    def _watch(self) -> None:
        logged = 0.0
        while not self._stop.wait(self.stall_s / 4):
            why = self.problem()
            now = self._clock()
            if why is not None and now - logged >= self.stall_s:
                logged = now
                log.warning("%s", why)
