"""`run_processes`: one app over every core, from Python (`kstreamd run --processes N`).

One process runs one stream thread, which Python's interpreter lock holds to one core. This
starts N worker processes of the same app under a supervisor (`kstream.service.supervisor`):
they share the partitions as one consumer group, a worker that dies is restarted, and one HTTP
address serves health, merged metrics and store queries for all of them.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any, TextIO

from kstream.config import (
    DEFAULT_GUARANTEE,
    Config,
    validate_app_id,
    validate_bootstrap_servers,
    validate_guarantee,
)
from kstream.errors import KStreamError

__all__ = ["run_processes"]


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
    from kstream.service.supervisor import parse_processes, supervise
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
    code = supervise(topology_ref, settings, n, target=target, stop=stop, out=out)
    if code != 0:
        raise KStreamError(
            f"app {app_id!r}: a worker process did not close cleanly (its exit is logged)"
        )
