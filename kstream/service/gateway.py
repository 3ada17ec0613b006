"""The one HTTP endpoint of `kstreamd run --processes N`, served by the supervisor.

`/health/live` and `/health/ready` answer for the whole app from the supervisor's view of its
workers. `/metrics` scrapes every live worker's own `/metrics` (each worker serves HTTP on a
loopback port of its own) and serves the union (`kstream.service.merge`) with the supervisor's
series. Every other GET (`/topology`, `/stores`, `/stores/{store}/keys/{key}`, ...) is passed
unchanged, `Authorization` header included, to a live worker: each worker is an instance in the
app's `<app_id>-instances` registry and already routes a key query to the instance that owns
the key, so any worker gives the owner's answer.

With a token configured every endpoint but `/health/*` needs it here too; the supervisor uses
the same token to scrape its workers.

Only origin-form request targets (`/path?query`) are served; any other (`@evil:80/x`,
`http://host/x`, `*`) is answered 400. A request passed on goes to the worker's own host and
port with the target's path and query re-quoted: the URL is built from those parts, never by
appending the raw target to the worker's address: `@host:port/x` appended to
`http://127.0.0.1:41001` made the gateway look up a host name of the client's choosing
(`127.0.0.1:41001@host`) and answer a misleading 503.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client.core import Metric

from kstream.service.background import BackgroundServer
from kstream.service.http import BACKLOG, JsonHandler
from kstream.service.merge import Scrape, merge_expositions

log = logging.getLogger("kstream.service")

__all__ = ["Fleet", "Gateway", "WorkerView"]

_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_SCRAPE_TIMEOUT_S = 5.0
_FORWARD_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class WorkerView:
    """One worker as the gateway sees it."""

    index: int
    instance_id: str
    url: str
    pid: int | None
    alive: bool
    ready: bool
    restarts: int

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "instance_id": self.instance_id,
            "pid": self.pid,
            "alive": self.alive,
            "ready": self.ready,
            "restarts": self.restarts,
        }


class Fleet(Protocol):
    """What the gateway needs from the supervisor."""

    app_id: str
    instance_id: str

    def workers(self) -> list[WorkerView]: ...

    def is_live(self) -> bool: ...

    def is_ready(self) -> bool: ...

    def own_metrics(self) -> list[Metric]: ...


class Gateway(BackgroundServer):
    """Serves `fleet` on `host:port` in a background thread (port 0: any free port)."""

    thread_name = "kstream-gateway"

    def __init__(self, fleet: Fleet, host: str, port: int, token: str | None = None) -> None:
        self.fleet = fleet
        handler = type("GatewayHandler", (_Handler,), {"gateway": self})
        super().__init__(_Server((host, port), handler), host, token)
        self._rotation = 0
        self._lock = threading.Lock()

    def metrics(self) -> bytes:
        """Every live worker's metrics, merged, then the supervisor's own series."""
        live = [w for w in self.fleet.workers() if w.alive]
        with ThreadPoolExecutor(max_workers=max(1, len(live))) as pool:
            texts = list(pool.map(self._scrape, live))
        scrapes = [
            Scrape({"app_id": self.fleet.app_id, "instance_id": w.instance_id}, text)
            for w, text in zip(live, texts, strict=True)
            if text is not None
        ]
        return merge_expositions(scrapes, self.fleet.own_metrics())

    def _scrape(self, worker: WorkerView) -> str | None:
        req = urllib.request.Request(worker.url + "/metrics")
        if self.token is not None:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=_SCRAPE_TIMEOUT_S) as resp:
                return str(resp.read().decode("utf-8"))
        except (urllib.error.URLError, OSError, ValueError) as e:
            # a worker that is starting (503) or going away has no metrics to add
            log.debug("scraping worker %s: %s", worker.instance_id, e)
            return None

    def candidates(self) -> Sequence[WorkerView]:
        """Live workers to pass a request to, ready ones first, in turn (spreads the load)."""
        live = [w for w in self.fleet.workers() if w.alive]
        with self._lock:
            self._rotation += 1
            turn = self._rotation
        if live:
            k = turn % len(live)
            live = live[k:] + live[:k]
        return [w for w in live if w.ready] + [w for w in live if not w.ready]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG


class _Handler(JsonHandler):
    gateway: Gateway

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("gateway %s: " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        if not self.path.startswith("/"):
            self._json(
                400,
                {
                    "error": "bad_target",
                    "message": "the request target must be a path starting with '/'",
                },
            )
            return
        try:
            self._route()
        except Exception as e:
            log.exception("gateway: %s failed", self.path)
            self._json(500, {"error": "internal", "message": f"{type(e).__name__}: {e}"})

    def _route(self) -> None:
        gw = self.gateway
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/health/live", "/health/ready"):
            fleet = gw.fleet
            ok = fleet.is_live() if path.endswith("live") else fleet.is_ready()
            workers = fleet.workers()
            self._json(
                200 if ok else 503,
                {
                    "status": "ok" if ok else "unavailable",
                    "state": _state(workers),
                    "workers": [w.to_json() for w in workers],
                },
            )
            return
        if not gw.authorized(self.headers.get("Authorization")):
            self._json(
                401,
                {"error": "unauthorized", "message": "missing or wrong bearer token"},
                {"WWW-Authenticate": 'Bearer realm="kstream"'},
            )
            return
        if path == "/metrics":
            self._send(200, gw.metrics(), _METRICS_TYPE)
            return
        self._pass_on()

    def _pass_on(self) -> None:
        """GET the same path and query from a live worker and answer what it answers."""
        tried = []
        for worker in self.gateway.candidates():
            req = urllib.request.Request(worker_url(worker.url, self.path), method="GET")
            auth = self.headers.get("Authorization")
            if auth:
                req.add_header("Authorization", auth)
            try:
                with urllib.request.urlopen(req, timeout=_FORWARD_TIMEOUT_S) as resp:
                    status, body, headers = resp.status, resp.read(), resp.headers
            except urllib.error.HTTPError as e:
                status, body, headers = e.code, e.read(), e.headers
            except (urllib.error.URLError, OSError) as e:
                tried.append(f"{worker.instance_id}: {e}")
                continue
            extra = {"X-Kstream-Worker": worker.instance_id}
            routed = headers.get("X-Kstream-Routed-To")
            if routed:
                extra["X-Kstream-Routed-To"] = routed
            self._send(status, body, headers.get("Content-Type", "application/json"), extra)
            return
        self._json(
            503,
            {
                "error": "no_worker",
                "message": "no worker process is answering"
                + (f" ({'; '.join(tried)})" if tried else " (all are starting)"),
            },
        )


_SAFE = "/%:@!$&'()*+,;=-._~"
"""Characters a path or query keeps as they are (RFC 3986's pchar plus '/' and '%', so escapes
stay escapes); anything else (spaces, control characters, non-ASCII) is percent-encoded."""


def worker_url(base: str, target: str) -> str:
    """`base` (the worker's `http://host:port`) with the path and query of `target`, an
    origin-form request target (starts with '/'; the gateway refuses any other).

    Built from parts, so nothing in `target` can change the scheme, host or port.
    """
    if not target.startswith("/"):
        raise ValueError(f"not an origin-form request target: {target!r}")
    path, sep, query = target.partition("?")
    path = path.partition("#")[0]
    query = query.partition("#")[0]
    scheme, netloc, _, _, _ = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(
        (
            scheme,
            netloc,
            urllib.parse.quote(path, safe=_SAFE),
            urllib.parse.quote(query, safe=_SAFE + "?") if sep else "",
            "",
        )
    )


def _state(workers: list[WorkerView]) -> str:
    """A one-word summary: RUNNING (every worker ready), STARTING or DEGRADED."""
    if workers and all(w.alive and w.ready for w in workers):
        return "RUNNING"
    if any(w.restarts for w in workers if not (w.alive and w.ready)):
        return "DEGRADED"
    return "STARTING"
