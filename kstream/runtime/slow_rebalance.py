"""Say so while a rebalance lasts too long.

While the app is REBALANCING it processes nothing. A rebalance takes a second or two, plus the
restore of new tasks' stores; one that lasts minutes is waiting for something: a member that
does not poll (stuck in a long batch or a callback), which the group waits for up to that
member's `max.poll.interval.ms`; a restore of a large changelog; or, on the Tansu test broker,
a group whose members left mid-rebalance, which wedges there for good. Before this the app sat
in REBALANCING without a word. `RebalanceWatch` logs a WARNING naming the group and how long
it has lasted once a rebalance passes `slow_rebalance_warning`, and again every such interval
while it lasts, and counts the rebalance in `kstream_rebalances_slow_total`
(`kstream_rebalance_duration_seconds`, read at scrape time, says how long the current one
lasts).

The watch runs on a thread of its own, started when a rebalance starts and stopped when it
ends (none while the app runs): the stream thread cannot be the one to notice, since it may
be what is stuck, inside a rebalance callback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kstream.duration import format_ms
from kstream.metrics import Metrics

log = logging.getLogger("kstream.runtime")


class SlowRebalance:
    """When to warn about one rebalance, started at `started` (seconds on the caller's clock):
    at `started + bound`, then every `bound` after."""

    __slots__ = ("bound", "started", "warnings")

    def __init__(self, started: float, bound: float) -> None:
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound!r}")
        self.started = started
        self.bound = bound
        self.warnings = 0

    def next_due(self) -> float:
        """When the next warning is due."""
        return self.started + self.bound * (self.warnings + 1)

    def due(self, now: float) -> float | None:
        """How long the rebalance has lasted at `now` if a warning is due (the next then falls
        one bound later; warnings missed by a late call are not made up), else None."""
        if now < self.next_due():
            return None
        self.warnings = int((now - self.started) // self.bound)
        return now - self.started


class RebalanceWatch:
    """Watches the rebalances of one app's consumer group `group`.

    `bound_ms`: `slow_rebalance_warning` (0: off). `restoring()`: how many tasks are restoring
    their stores right now (part of a kstream rebalance, and the warning says so). `tansu`: the
    app runs on the Tansu test broker (`broker_compat="tansu"`), whose wedge the warning names.
    """

    def __init__(
        self,
        group: str,
        bound_ms: int,
        metrics: Metrics,
        restoring: Callable[[], int] = lambda: 0,
        tansu: bool = False,
    ) -> None:
        self.group = group
        self.bound_ms = bound_ms
        self.metrics = metrics
        self.restoring = restoring
        self.tansu = tansu
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None

    def state_changed(self, rebalancing: bool) -> None:
        """The app entered (True) or left (False) REBALANCING."""
        with self._lock:
            if rebalancing:
                if self._stop is None and self.bound_ms > 0:
                    self._stop = threading.Event()
                    slow = SlowRebalance(time.monotonic(), self.bound_ms / 1000)
                    threading.Thread(
                        target=self._watch,
                        args=(self._stop, slow),
                        name=f"kstream-rebalance-watch-{self.group}",
                        daemon=True,
                    ).start()
            elif self._stop is not None:
                self._stop.set()
                self._stop = None

    def _watch(self, stop: threading.Event, slow: SlowRebalance) -> None:
        counted = False
        while not stop.wait(max(0.0, slow.next_due() - time.monotonic())):
            lasted = slow.due(time.monotonic())
            if lasted is None:
                continue
            text = warning(self.group, lasted, self.bound_ms, self.restoring(), tansu=self.tansu)
            # Checked and said under the lock `state_changed` stops the watch under: once the
            # rebalance has ended, no warning about it comes after (`restoring()` is asked
            # outside the lock, so a stream thread that ends the rebalance never waits on it).
            with self._lock:
                if stop.is_set():
                    return
                if not counted:  # a slow rebalance counts once, however many warnings it takes
                    counted = True
                    self.metrics.slow_rebalance()
                log.warning(text)


def warning(
    group: str, lasted_s: float, bound_ms: int, restoring: int, *, tansu: bool = False
) -> str:
    """The log line for a rebalance of `group` that has lasted `lasted_s` seconds (`tansu`: on
    the Tansu test broker)."""
    if restoring:
        why = (
            f"{restoring} task(s) are restoring their stores from their changelogs "
            "(kstream_restoring_tasks, kstream_restore_records_total show the progress)"
        )
    else:
        why = (
            "the group is waiting for its members to join and sync: a member that does not "
            "poll (stuck in a long batch or callback) holds everyone up to its "
            "max.poll.interval.ms"
        )
        if tansu:
            why += (
                "; on the Tansu test broker a group whose members left mid-rebalance can stay "
                "wedged (README, 'The Tansu compatibility lane')"
            )
    return (
        f"consumer group {group!r} has been rebalancing for {format_ms(round(lasted_s * 1000))}, "
        f"longer than slow_rebalance_warning ({format_ms(bound_ms)}): no records are processed "
        f"meanwhile; {why}. Warned again every {format_ms(bound_ms)} while it lasts"
    )
