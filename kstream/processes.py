"""The multi-process front: one app over every core, from Python.

One process runs one stream thread, which Python's interpreter lock holds to one core. The
supervisor (`kstream.service.supervisor`, built by its one entry point `new_supervisor`)
starts N worker processes of the same app: they share the partitions as one consumer group, a
worker that dies is restarted, and one HTTP address serves health, merged metrics and store
queries for all of them. Python reaches it two ways, both here: `run_processes`, and
`kstream.App(config={"processes": N})`, which builds an `AppProcesses` (the app over worker
processes, behind the surface of the one-process `kstream.runtime.App`). `kstreamd run
--processes` is the third way in.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from kstream.config import (
    Config,
    validate_app_id,
    validate_bootstrap_servers,
)
from kstream.errors import ConfigError, KStreamError
from kstream.guarantee import DEFAULT_GUARANTEE, parse_guarantee
from kstream.kafka.supplier import ClientSupplier
from kstream.runtime.app import App as RuntimeApp
from kstream.runtime.app_state import AppState, AppStates
from kstream.runtime.workers import split_processes, topology_reference

if TYPE_CHECKING:
    from kstream.service.supervisor import Supervisor

log = logging.getLogger("kstream.runtime")

__all__ = ["App", "AppProcesses", "run_processes"]


def run_processes(
    topology_ref: str,
    *,
    app_id: str,
    bootstrap_servers: str,
    processes: int | str = "auto",
    processing_guarantee: str = DEFAULT_GUARANTEE,
    config: Mapping[str, Any] | None = None,
    instance_id: str | None = None,
    stop: threading.Event | None = None,
    out: TextIO = sys.stdout,
) -> None:
    """Run `processes` worker processes of one app until SIGTERM/SIGINT (or `stop` is set).

    `topology_ref` is `"module:attr"`: each worker imports it (a Topology, a StreamBuilder or a
    function returning one), because a topology holds user functions that need not pickle.
    `processes` is a positive integer or `"auto"` (the cores this process may use). `config`
    takes the keys of `kstream.Config`; `config["http"]` is the supervisor's address (default
    127.0.0.1:8080), each worker serving its own on a port of the same host, and
    `config["state_dir"]` holds each worker's directory (`<state_dir>/<app_id>/processes/<n>`).
    Values must be plain data (numbers, strings, booleans, lists, tables): they are passed to
    the workers as JSON. Must be called from the main thread to receive signals.

    Everything is validated before any process starts (ConfigError naming the key). Returns
    when every worker has closed cleanly; raises KStreamError if one did not.
    """
    from kstream.service.settings import Settings
    from kstream.service.supervisor import new_supervisor, parse_processes
    from kstream.service.target import load_target

    n = parse_processes(processes)
    validate_app_id(app_id)
    parse_guarantee(processing_guarantee)
    validate_bootstrap_servers(bootstrap_servers)
    Config.from_mapping(config)
    target = load_target(topology_ref)
    if hasattr(target, "app_id") and hasattr(target, "start"):
        target = target.topology  # the arguments here say how to run it
    settings = Settings(
        app_id=app_id,
        bootstrap_servers=bootstrap_servers,
        processing_guarantee=processing_guarantee,
        instance_id=instance_id,
        config=dict(config or {}),
    )
    code = new_supervisor(topology_ref, settings, n, target=target, stop=stop).run(out)
    if code != 0:
        raise KStreamError(
            f"app {app_id!r}: a worker process did not close cleanly (its exit is logged)"
        )


class App(RuntimeApp):
    """`kstream.App`: a running instance of a topology; instances with one `app_id` share the
    partitions.

    Without `processes` in `config` it is the one-process app (kstream.runtime.App) itself.
    `config={"processes": N}` (a positive integer or "auto") builds an `AppProcesses`
    instead, which runs the app as N worker processes, one core each, as `kstreamd run
    --processes N` does, behind the same surface; the topology is then also accepted as a
    `"module:attr"` reference, which the workers import, and queries go to the supervisor's
    HTTP address (`config["http"]`), not to `store()`.
    """

    def __new__(
        cls,
        topology: Any,
        app_id: str,
        bootstrap_servers: str,
        processing_guarantee: str = DEFAULT_GUARANTEE,
        config: Mapping[str, Any] | Config | None = None,
        client_supplier: ClientSupplier | None = None,
    ) -> Any:
        rest, processes = split_processes(config)
        if processes > 1:
            return AppProcesses(
                topology,
                app_id,
                bootstrap_servers,
                processing_guarantee,
                rest,
                processes=processes,
                client_supplier=client_supplier,
            )
        return super().__new__(cls)


class AppProcesses:
    """An app run as N worker processes under one supervisor: `kstream.App(config=
    {"processes": N})`.

    `start()` runs the supervisor of `kstreamd run --processes N` on a background thread (or
    `run()` in this one): it starts N worker processes of the app, restarts those that die and
    serves one HTTP address (`config["http"]`, any free loopback port when unset). The state
    follows the fleet: RUNNING once every worker is ready, REBALANCING while one is not,
    NOT_RUNNING after a clean close, ERROR if a worker did not close cleanly.

    The one-process app that `app` holds checks the arguments, compiles the topology, locks
    the state directory and prepares the cluster before any worker starts (a worker's own
    start would fail the same way, once per restart); it never runs a stream thread.
    """

    def __init__(
        self,
        topology: Any,
        app_id: str,
        bootstrap_servers: str,
        processing_guarantee: str = DEFAULT_GUARANTEE,
        config: Mapping[str, Any] | Config | None = None,
        *,
        processes: int,
        client_supplier: ClientSupplier | None = None,
    ) -> None:
        if client_supplier is not None:
            raise ConfigError(
                f"config['processes']: worker processes use Kafka clients of their own; "
                f"a client_supplier cannot run in {processes} processes"
            )
        self.app = RuntimeApp(topology, app_id, bootstrap_servers, processing_guarantee, config)
        self.reference = topology_reference(topology, processes)
        self.processes = processes
        self.app_id = self.app.app_id
        self.topology = self.app.topology
        self.config = self.app.config
        self.metrics = self.app.metrics
        self._states = AppStates(app_id, lambda new: self.metrics.set_state(new.value))
        self._supervisor: Supervisor | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # --- state: the fleet's ------------------------------------------------------------------

    @property
    def state(self) -> AppState:
        return self._states.state

    def on_state_change(self, listener: Callable[[AppState, AppState], None]) -> None:
        """Call `listener(new, old)` on every state change (from the thread that changed it)."""
        self._states.on_change(listener)

    def wait_for(self, *states: AppState, timeout: float | None = None) -> bool:
        """Block until the state is one of `states` (True) or `timeout` passes (False)."""
        return self._states.wait_for(states, timeout)

    @property
    def ready(self) -> bool:
        """Every worker running and ready."""
        return self.state == AppState.RUNNING

    @property
    def live(self) -> bool:
        return self.state != AppState.ERROR

    def attach_registry(self, registry: object) -> bool:
        """False: each worker is an instance of its own (the caller publishes for the
        supervisor)."""
        return False

    def store(self, name: str, enable_stale_stores: bool = False) -> Any:
        raise KStreamError(
            f"app {self.app_id!r} runs in {self.processes} worker processes: query its "
            "stores through the supervisor's HTTP address (config['http'])"
        )

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the supervisor (and its workers) on a background thread; returns at once."""
        self._begin()
        self._thread = threading.Thread(
            target=self._supervise, name=f"kstream-{self.app_id}-supervisor", daemon=True
        )
        self._thread.start()

    def run(self) -> None:
        """Run the supervisor in this thread until SIGTERM/SIGINT (which reach it from the main
        thread) or a failure; raises the error that stopped a worker, if any."""
        if self.state == AppState.CREATED:
            self._begin()
            self._supervise()
        elif self._thread is not None:
            from kstream.runtime.signals import graceful_signals

            assert self._supervisor is not None
            with graceful_signals(self._supervisor.stop.set, f"app {self.app_id!r}"):
                while self._thread.is_alive():
                    self._thread.join(0.2)
        if self.error is not None:
            raise self.error

    def close(self, timeout: float | None = None) -> bool:
        """Stop every worker the graceful way; True if all closed within `timeout` (each may
        take shutdown_timeout to commit and close)."""
        if self.state == AppState.CREATED:
            self._states.move(AppState.PENDING_SHUTDOWN)
            self._states.move(AppState.NOT_RUNNING)
            self.app.close()
            return True
        if self.state not in (AppState.ERROR, AppState.NOT_RUNNING):
            self._states.move(AppState.PENDING_SHUTDOWN)
        if self._supervisor is not None:
            self._supervisor.stop.set()
        if self._thread is None:
            return True
        self._thread.join(self.config.shutdown_timeout / 1000 + 30 if timeout is None else timeout)
        return not self._thread.is_alive()

    def __enter__(self) -> AppProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _begin(self) -> None:
        """Lock the state directory, prepare the cluster and build the supervisor."""
        if self.state != AppState.CREATED:
            raise KStreamError(f"app {self.app_id!r}: start() in state {self.state.value}")
        try:
            self.app.lock_state_dir()
            self.app.prepare_cluster()
            self._supervisor = _supervisor_of(self)
        except BaseException:
            self._states.move(AppState.ERROR)
            self.app.close()
            raise
        self._states.move(AppState.REBALANCING)

    def _supervise(self) -> None:
        """Run the supervisor to its end, keeping the state in step with its readiness."""
        sup = self._supervisor
        assert sup is not None
        watcher = threading.Thread(
            target=self._follow_readiness,
            args=(sup,),
            name=f"kstream-{self.app_id}-fleet",
            daemon=True,
        )
        watcher.start()
        try:
            if sup.run(sys.stdout) != 0:
                self.error = KStreamError(
                    f"app {self.app_id!r}: a worker process did not close cleanly "
                    "(its exit is logged)"
                )
        except BaseException as e:
            self.error = e
            log.error("app %r: the supervisor failed: %s", self.app_id, e)
        finally:
            sup.stop.set()
            self.app.close()  # releases the state directory the supervisor held for it
            if self.error is not None:
                self._states.move(AppState.ERROR)  # as a stream thread's error leaves an App
            else:
                self._states.move(AppState.PENDING_SHUTDOWN)
                self._states.move(AppState.NOT_RUNNING)

    def _follow_readiness(self, sup: Supervisor) -> None:
        while not sup.stop.wait(_READY_POLL_S):
            ready = sup.is_ready()
            if ready and self.state == AppState.REBALANCING:
                self._states.move(AppState.RUNNING)
            elif not ready and self.state == AppState.RUNNING:
                self._states.move(AppState.REBALANCING)


_READY_POLL_S = 0.2


def _supervisor_of(fleet: AppProcesses) -> Supervisor:
    """The supervisor of `fleet`'s workers: the app's own settings, served on `config["http"]`
    or, unset, on any free loopback port (the library did not ask for a fixed address); it
    holds the app's lock on its state directory for it."""
    from kstream.service.settings import Settings
    from kstream.service.supervisor import config_mapping, new_supervisor

    app = fleet.app
    config = config_mapping(app.config)
    if not config.get("http"):
        config["http"] = "127.0.0.1:0"
    settings = Settings(
        app_id=app.app_id,
        bootstrap_servers=app.bootstrap_servers,
        processing_guarantee=app.processing_guarantee,
        config=config,
    )
    return new_supervisor(fleet.reference, settings, fleet.processes, state_lock=app.state_dir_lock)
