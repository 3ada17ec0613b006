"""`kstreamd run`: one app instance with its HTTP server, until SIGTERM or SIGINT.

Start order: the lock on the app's state directory (kstream.runtime.state_lock), the HTTP
server (liveness answers while the app starts), then the instance registry, then the app.
Stop order is the reverse: the app finishes its batch and commits (and lets the directory
go), the instance withdraws from the registry, the server stops. The exit status is 0 after
a clean stop and 1 when the app stopped on an error.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from typing import Any, TextIO

from kstream.errors import ConfigError
from kstream.runtime.signals import graceful_signals
from kstream.service.settings import Settings

log = logging.getLogger("kstream.service")

__all__ = ["DEFAULT_HTTP", "build_app", "run_service"]

DEFAULT_HTTP = "127.0.0.1:8080"
_PUBLISH_EVERY_S = 0.25


def build_app(target: Any, settings: Settings) -> Any:
    """An App for `target` (a Topology, or an App used as it is)."""
    from kstream.runtime import App

    if hasattr(target, "app_id") and hasattr(target, "start"):
        return target
    if not settings.app_id:
        raise ConfigError(
            "app_id is required: pass --app-id, set KSTREAM_APP_ID or put app_id in the config file"
        )
    return App(
        target,
        app_id=settings.app_id,
        bootstrap_servers=settings.bootstrap_servers,
        processing_guarantee=settings.processing_guarantee,
        config=settings.config,
    )


def _split_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def run_service(target: Any, settings: Settings, out: TextIO = sys.stdout) -> int:
    from kstream.service.http import HttpServer
    from kstream.service.instances import InstanceRegistry
    from kstream.service.probe import assigned_partitions, attach
    from kstream.service.query import AppService

    app = build_app(target, settings)
    cfg = app.config
    lock_state_dir = getattr(app, "lock_state_dir", None)
    if lock_state_dir is not None:
        # before anything is served or registered: a second instance on this state
        # directory exits 2 here, naming the directory and the PID that holds it
        lock_state_dir()
    instance_id = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
    host, port = _split_hostport(cfg.http or DEFAULT_HTTP)
    probe = attach(app, instance_id=instance_id)
    registry: InstanceRegistry | None = None
    try:
        server = HttpServer(_Pending(app, instance_id), host, port, token=cfg.http_token)
    except OSError as e:
        app.close()  # lets the state directory go
        raise ConfigError(f"http: cannot listen on {host}:{port}: {e.strerror or e}") from None
    endpoint = settings.advertised_url or server.url
    stop = threading.Event()
    # the handlers stay in place until everything is closed: a second SIGTERM during the
    # close must not kill the process half-way (a third does)
    with graceful_signals(stop.set, f"kstreamd app {app.app_id!r}"):
        server.start()
        try:
            registry = InstanceRegistry(
                app.app_id,
                app.bootstrap_servers,
                instance_id=instance_id,
                endpoint=endpoint,
                kafka=cfg.kafka,
                connect_timeout=cfg.connect_timeout,
                client_supplier=getattr(app, "client_supplier", None),
            )
            registry.start()
            # an App publishes its active and standby tasks itself from its stream thread (and
            # places standby replicas by the registry); a supervisor of worker processes does
            # not, so this loop publishes for it
            attach_registry = getattr(app, "attach_registry", None)
            app_publishes = bool(attach_registry(registry)) if callable(attach_registry) else False
            server.served = AppService(app, probe, registry, instance_id)
            app.start()
            print(
                f"kstreamd: app {app.app_id!r} instance {instance_id!r} serving {endpoint} "
                f"({app.processing_guarantee})",
                file=out,
                flush=True,
            )
            while not stop.wait(_PUBLISH_EVERY_S):
                if str(getattr(app.state, "value", app.state)) in ("ERROR", "NOT_RUNNING"):
                    break
                if app_publishes:
                    continue
                try:
                    registry.publish(assigned_partitions(app))
                except Exception as e:
                    log.warning("publishing the assignment: %s", e)
        finally:
            stopped = app.close()
            if registry is not None:
                registry.close()
            server.close()
    error = getattr(app, "error", None)
    if error is not None:
        print(f"kstreamd run: error: the app stopped: {error}", file=sys.stderr, flush=True)
        return 1
    if not stopped:
        print("kstreamd run: error: the app did not stop in time", file=sys.stderr, flush=True)
        return 1
    print(f"kstreamd: app {app.app_id!r} stopped", file=out, flush=True)
    return 0


class _Pending:
    """Serves health (not ready) while the registry and the app are starting."""

    def __init__(self, app: Any, instance_id: str) -> None:
        self.app = app
        self.app_id = str(app.app_id)
        self.instance_id = instance_id

    @property
    def state(self) -> str:
        return str(getattr(self.app.state, "value", self.app.state))

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return False

    def _starting(self) -> Any:
        from kstream.service.http import Problem

        return Problem(503, "starting", "the app is starting")

    def metrics_text(self) -> bytes:
        raise self._starting()

    def topology(self, fmt: str) -> str:
        raise self._starting()

    def stores(self) -> list[dict[str, Any]]:
        raise self._starting()

    def locate(self, store: str, key_text: str, key_type: str | None = None) -> Any:
        raise self._starting()

    def get_local(
        self, loc: Any, any_partition: bool = False, stale: bool = False
    ) -> dict[str, Any]:
        raise self._starting()

    def peers(self) -> list[str]:
        return []
