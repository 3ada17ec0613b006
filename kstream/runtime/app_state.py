"""An app's state, Kafka Streams' `KafkaStreams.State`, and the one place that moves it.

Both ways an app runs keep their state here: `App` in this process (its stream thread moves
it) and `AppProcesses` over worker processes (its supervisor's readiness moves it), so both
allow the same transitions and call their listeners the same way.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("kstream.runtime")

__all__ = ["AppState", "AppStates"]


class AppState(enum.StrEnum):
    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"


ALLOWED: dict[AppState, set[AppState]] = {
    AppState.CREATED: {AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.ERROR},
    AppState.REBALANCING: {
        AppState.RUNNING,
        AppState.REBALANCING,
        AppState.PENDING_SHUTDOWN,
        AppState.ERROR,
    },
    AppState.RUNNING: {AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.ERROR},
    AppState.PENDING_SHUTDOWN: {AppState.NOT_RUNNING, AppState.ERROR},
    AppState.NOT_RUNNING: set(),
    AppState.ERROR: {AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING},
}
"""The transitions an app may make; any other is ignored (e.g. a late RUNNING after shutdown
began), as Kafka Streams' state machine ignores them."""

Listener = Callable[[AppState, AppState], None]


class AppStates:
    """The current state of one app, its listeners, and waiting for a state.

    `changed(new)` is the owner's own reaction (metrics, the slow-rebalance watch), called
    before the user's listeners, from the thread that moved the state. Reactions run in the
    order of the moves, one at a time: the stream thread's REBALANCING and a `close()` on
    another thread would otherwise react in either order, and a watch started after the
    close's NOT_RUNNING had stopped it would warn about a rebalance that ended. (The user's
    listeners run outside every lock, as Kafka Streams calls its state listener.)
    """

    def __init__(self, app_id: str, changed: Callable[[AppState], None]) -> None:
        self._app_id = app_id
        self._changed = changed
        self._state = AppState.CREATED
        self._lock = threading.Condition()
        self._reacting = threading.Lock()
        self._listeners: list[Listener] = []

    @property
    def state(self) -> AppState:
        return self._state

    def move(self, new: AppState | str) -> None:
        """Move to `new` if the current state allows it; else nothing happens."""
        new = AppState(new)
        with self._reacting:
            with self._lock:
                old = self._state
                if new == old or new not in ALLOWED[old]:
                    return
                self._state = new
                self._lock.notify_all()
            self._changed(new)
        log.info("app %r: %s -> %s", self._app_id, old.value, new.value)
        for listener in list(self._listeners):
            try:
                listener(new, old)
            except Exception as e:
                log.warning("state listener %r failed: %s", listener, e)

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def wait_for(self, states: tuple[AppState, ...], timeout: float | None) -> bool:
        """Block until the state is one of `states` (True) or `timeout` passes (False)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._state in states, timeout)
