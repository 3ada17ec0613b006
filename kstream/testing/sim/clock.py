"""The simulation's virtual clock, and the patch that makes the runtime read it.

The runtime reads time through the `time` module (`time.monotonic()` for its intervals and
deadlines, `time.time()` for wall-clock punctuation and record timestamps, `time.sleep` for
back-offs, and user functions that sleep). Patching those module attributes for the length of
one simulated run puts every such read on the virtual clock without a seam in the product's hot
path: a run then takes no real time for its waits, and replays to the same outcome from its
seed. `threading` keeps the real clock (it bound `time.monotonic` at import), which the
simulator never relies on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["VirtualClock", "patched_time"]

#: the wall clock the simulated world starts at (2023-11-14), in ms since the epoch
WALL_START_MS = 1_700_000_000_000


class VirtualClock:
    """Seconds since the run began; moves only when something waits or the scheduler says.

    `listeners` run after every move, with the new time: the simulated broker expires open
    transactions and silent group members there, so a wait inside any client call (a
    committed-offset read held by pending offsets, a user function sleeping) sees the broker
    act meanwhile, as a real wait would.
    """

    def __init__(self, wall_start_ms: int = WALL_START_MS) -> None:
        self.now = 0.0
        self.wall_start_ms = wall_start_ms
        self.listeners: list[Callable[[float], None]] = []
        self._moving = False

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall_start_ms / 1000 + self.now

    def time_ns(self) -> int:
        return self.wall_start_ms * 1_000_000 + round(self.now * 1e9)

    def monotonic_ns(self) -> int:
        return round(self.now * 1e9)

    def wall_ms(self) -> int:
        return self.wall_start_ms + round(self.now * 1000)

    def sleep(self, seconds: float) -> None:
        """A wait: the clock moves by `seconds` (a negative wait is none)."""
        self.advance(max(0.0, float(seconds)))

    def advance(self, seconds: float) -> None:
        """Move the clock on by `seconds` and let the listeners act on the new time. A move
        made by a listener itself only moves the clock (no re-entry)."""
        self.now += seconds
        if self._moving:
            return
        self._moving = True
        try:
            for listener in self.listeners:
                listener(self.now)
        finally:
            self._moving = False


@contextmanager
def patched_time(clock: VirtualClock) -> Iterator[VirtualClock]:
    """Point the `time` module's clocks and sleep at `clock` until the block ends, for the
    thread that runs the simulation alone (it runs every call of the run: the task manager's
    pool runs inline, kstream.testing.sim.patches). Every other thread keeps the real clock:
    a thread left running in the same process (another test's clients or watchdog, under
    pytest-xdist) would otherwise move the virtual clock with its sleeps, and a run's
    outcome would depend on what else the process did."""
    names = ("time", "monotonic", "time_ns", "monotonic_ns", "sleep")
    saved: dict[str, Callable[..., Any]] = {name: getattr(time, name) for name in names}
    owner = threading.get_ident()

    def routed(name: str, virtual: Callable[..., Any]) -> Callable[..., Any]:
        real = saved[name]

        def read(*args: Any) -> Any:
            return virtual(*args) if threading.get_ident() == owner else real(*args)

        return read

    time.time = routed("time", clock.time)
    time.monotonic = routed("monotonic", clock.monotonic)
    time.time_ns = routed("time_ns", clock.time_ns)
    time.monotonic_ns = routed("monotonic_ns", clock.monotonic_ns)
    time.sleep = routed("sleep", clock.sleep)
    try:
        yield clock
    finally:
        for name, fn in saved.items():
            setattr(time, name, fn)
