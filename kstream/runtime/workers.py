"""`App(..., config={"processes": N})`: one App object that runs as N worker processes.

One process runs one stream thread, which Python's interpreter lock holds to one core. With
`processes` above 1 the App does not run a stream thread itself: `start()` runs the supervisor
of `kstreamd run --processes N` on a background thread, which starts N worker processes of the
app, restarts those that die and serves one HTTP address (`config["http"]`, any free loopback
port when unset). The supervisor is above the runtime: the App gets it from the registered
multi-process front (kstream.runtime.fleet), and this module keeps the App's side only.
The App's state follows the fleet: RUNNING once every worker is ready, REBALANCING while one
is not, NOT_RUNNING after a clean close, ERROR if a worker did not close cleanly.

Workers import the topology themselves (a topology holds user functions that need not
pickle), so the App needs a `MODULE:ATTR` reference to it: given as the topology argument
(`App("myapp.pipeline:topology", ...)`), or found by looking the topology object up among the
attributes of imported modules. A topology built inside a function, or in the script run as
`__main__`, has no such reference: that is a ConfigError naming the key, raised by the
constructor before anything starts.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kstream.config import Config
from kstream.errors import ConfigError, KStreamError
from kstream.runtime.fleet import Fleet, new_fleet

if TYPE_CHECKING:
    from kstream.runtime.app import App
    from kstream.runtime.state_lock import StateDirLock

log = logging.getLogger("kstream.runtime")

__all__ = [
    "PROCESSES_KEY",
    "WorkerProcesses",
    "find_reference",
    "parse_processes",
    "split_processes",
]

PROCESSES_KEY = "processes"
_READY_POLL_S = 0.2


def split_processes(
    config: Mapping[str, Any] | Config | None,
) -> tuple[Mapping[str, Any] | Config | None, int]:
    """An App's config without `processes`, and the number of processes (1 when unset).

    `processes` is a positive integer or "auto" (the cores this process may use); anything
    else is a ConfigError that names the key.
    """
    if config is None or isinstance(config, Config) or PROCESSES_KEY not in config:
        return config, 1
    rest = dict(config)
    return rest, parse_processes(rest.pop(PROCESSES_KEY), key=f"config[{PROCESSES_KEY!r}]")


def parse_processes(value: int | str, key: str = "processes") -> int:
    """The number of worker processes: a positive integer, or "auto" for the usable cores."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on Linux
            return max(1, os.cpu_count() or 1)
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a positive integer or 'auto', got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a positive integer or 'auto', got {value!r}") from None
    if n < 1 or (isinstance(value, float) and value != n):
        raise ConfigError(f"{key}: expected a positive integer or 'auto', got {value!r}")
    return n


def find_reference(obj: Any) -> str | None:
    """A `MODULE:ATTR` that names `obj` in an imported module (not `__main__`), or None.

    Modules are searched in import order, so the module that defined the object usually wins
    over one that imported it by name.
    """
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        try:
            attrs = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in attrs:
            if value is obj and not attr.startswith("_"):
                return f"{name}:{attr}"
    return None


def topology_reference(given: Any, processes: int) -> str:
    """The reference the workers import, for a topology argument of App; ConfigError if none."""
    if isinstance(given, str):
        return given
    ref = find_reference(given)
    if ref is None:
        raise ConfigError(
            f"config[{PROCESSES_KEY!r}]: {processes} worker processes import the topology by "
            "reference, and this one is not an attribute of an importable module (a topology "
            "built inside a function or in the script run as __main__ has none): define it at "
            "the top level of a module, or pass App('module:attr', ...)"
        )
    return ref


class WorkerProcesses:
    """The supervisor of an App's worker processes (a `Fleet`), run on a background thread,
    with the App's state following it."""

    def __init__(
        self, app: App, reference: str, processes: int, state_lock: StateDirLock | None = None
    ) -> None:
        """`state_lock`: the App's lock on `<state_dir>/<app_id>`, which the supervisor then
        holds for the App instead of taking its own (one process cannot take it twice)."""
        self.app = app
        self.reference = reference
        self.supervisor: Fleet = new_fleet(app, reference, processes, state_lock)
        self.error: BaseException | None = None
        self.exit_code: int | None = None
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None

    @property
    def stop(self) -> threading.Event:
        return self.supervisor.stop

    def start(self) -> None:
        """Start the supervisor (and its workers) on a background thread; returns at once."""
        self._thread = threading.Thread(
            target=self._run, name=f"kstream-{self.app.app_id}-supervisor", daemon=True
        )
        self._thread.start()
        self._watcher = threading.Thread(
            target=self._watch, name=f"kstream-{self.app.app_id}-fleet", daemon=True
        )
        self._watcher.start()

    def run(self) -> None:
        """Run the supervisor in this thread (signals reach it from the main thread)."""
        self._watcher = threading.Thread(
            target=self._watch, name=f"kstream-{self.app.app_id}-fleet", daemon=True
        )
        self._watcher.start()
        self._run()

    def _run(self) -> None:
        try:
            self.exit_code = self.supervisor.run(sys.stdout)
            if self.exit_code != 0:
                self.error = KStreamError(
                    f"app {self.app.app_id!r}: a worker process did not close cleanly "
                    "(its exit is logged)"
                )
        except BaseException as e:
            self.error = e
            log.error("app %r: the supervisor failed: %s", self.app.app_id, e)
        finally:
            self.supervisor.stop.set()
            self._finished()

    def _finished(self) -> None:
        from kstream.runtime.app import AppState

        if self.error is not None:
            self.app._set_state(AppState.ERROR)  # as a stream thread's error leaves it
        else:
            self.app._set_state(AppState.PENDING_SHUTDOWN)
            self.app._set_state(AppState.NOT_RUNNING)

    def _watch(self) -> None:
        """Keep the App's state in step with the workers' readiness."""
        from kstream.runtime.app import AppState

        sup = self.supervisor
        while not sup.stop.wait(_READY_POLL_S):
            ready = sup.is_ready()
            if ready and self.app.state == AppState.REBALANCING:
                self.app._set_state(AppState.RUNNING)
            elif not ready and self.app.state == AppState.RUNNING:
                self.app._set_state(AppState.REBALANCING)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None) -> None:
        """Wait for the supervisor to return (after `stop`, a signal or a failure)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self, timeout: float | None) -> bool:
        """Stop every worker the graceful way; True if all closed within `timeout`."""
        self.supervisor.stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True
