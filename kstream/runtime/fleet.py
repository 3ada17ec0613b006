"""Where `App(config={"processes": N})` finds the supervisor of its worker processes.

The supervisor (`kstream.service.supervisor`) sits above the runtime: it serves HTTP, spawns
worker processes that each run an App, and merges their metrics. The runtime must not import
it, so the App reaches it the other way round: the package registers the multi-process front
(`register_fleet`, done by `kstream/__init__.py`, which every import of `kstream.runtime` runs
first) and `WorkerProcesses` asks for one here (`new_fleet`). This module imports nothing
heavy: registering costs the package's import nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from kstream.runtime.app import App
    from kstream.runtime.state_lock import StateDirLock

__all__ = ["Fleet", "FleetFactory", "new_fleet", "register_fleet"]


class Fleet(Protocol):
    """What the App needs of the supervisor of its worker processes."""

    @property
    def stop(self) -> threading.Event:
        """Set to stop every worker the graceful way (`run` then returns)."""
        ...

    def run(self, out: TextIO) -> int:
        """Serve, run the workers until `stop`; 0 when every worker closed cleanly."""
        ...

    def is_ready(self) -> bool:
        """Every worker is running and ready."""
        ...


FleetFactory = Callable[["App", str, int, "StateDirLock | None"], Fleet]
"""`(app, topology reference, processes, state lock)` -> the fleet of the app's workers; the
lock on `<state_dir>/<app_id>` is the App's, which the fleet then holds for it."""

_factory: FleetFactory | None = None


def register_fleet(factory: FleetFactory) -> None:
    """Make `factory` the one that builds an App's fleet of worker processes."""
    global _factory
    _factory = factory


def new_fleet(app: App, reference: str, processes: int, state_lock: StateDirLock | None) -> Fleet:
    """The fleet of `processes` workers of `app`, from the registered front."""
    if _factory is None:
        from kstream.errors import KStreamError

        raise KStreamError(
            f"app {app.app_id!r}: no multi-process front is registered (import kstream)"
        )
    return _factory(app, reference, processes, state_lock)
