"""The multi-process front: one app over every core, from Python.

One process runs one stream thread, which Python's interpreter lock holds to one core. The
supervisor (`kstream.service.supervisor`, built by its one entry point `new_supervisor`)
starts N worker processes of the same app: they share the partitions as one consumer group, a
worker that dies is restarted, and one HTTP address serves health, merged metrics and store
queries for all of them. Python reaches it two ways, both here: `run_processes`, and
`App(config={"processes": N})`, whose runtime (below the service) gets its supervisor from
`app_fleet`, which the package registers (kstream.runtime.fleet). `kstreamd run --processes`
is the third way in.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from kstream.config import (
    DEFAULT_GUARANTEE,
    Config,
    validate_app_id,
    validate_bootstrap_servers,
    validate_guarantee,
)
from kstream.errors import KStreamError

if TYPE_CHECKING:
    from kstream.runtime.app import App
    from kstream.runtime.fleet import Fleet
    from kstream.runtime.state_lock import StateDirLock

__all__ = ["app_fleet", "run_processes"]


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
    validate_guarantee(processing_guarantee)
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


def app_fleet(app: App, reference: str, processes: int, state_lock: StateDirLock | None) -> Fleet:
    """The supervisor of `App(config={"processes": N})`'s workers: the App's own settings,
    served on `config["http"]` or, unset, on any free loopback port (the library did not ask
    for a fixed address). `state_lock`: the App's lock, which the supervisor holds for it."""
    from kstream.service.settings import Settings
    from kstream.service.supervisor import config_mapping, new_supervisor

    config = config_mapping(app.config)
    if not config.get("http"):
        config["http"] = "127.0.0.1:0"
    settings = Settings(
        app_id=app.app_id,
        bootstrap_servers=app.bootstrap_servers,
        processing_guarantee=app.processing_guarantee,
        config=config,
    )
    return new_supervisor(reference, settings, processes, state_lock=state_lock)
