"""The HTTP face of a running app: metrics, health, topology and store queries.

Standard library only. Connections are served by a bounded pool of worker threads with a
listen backlog sized for bursts (`BACKLOG`) and a read timeout per connection (`READ_TIMEOUT_S`),
so neither a burst of clients nor idle connections can stall the server or pin its threads for
good.
Errors are JSON `{"error": code, "message": text}` with a 4xx/5xx status, so scripts can act on
them. With a token configured every endpoint except `/health/*` needs `Authorization: Bearer
<token>`, compared in constant time; health stays open for orchestrators' probes.

A key query is answered by the instance that owns the key: any other instance forwards it
(with the caller's token and `local=true`, so it is never forwarded twice) and returns the
owner's answer unchanged. The owner is predicted from the key with murmur2, the partitioner of
Kafka's Java clients and of kstream; a key written by a producer with another partitioner (e.g.
librdkafka's default `consistent_random`) may sit elsewhere, so a key the predicted owner does
not have is asked of every instance (`local=true&anywhere=true`) before the answer is 404.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from socket import socket
from typing import Any, Protocol

from kstream.service.background import BackgroundServer

log = logging.getLogger("kstream.service")

__all__ = ["HttpServer", "JsonHandler", "Problem", "Served"]

_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_FORMATS = ("text", "mermaid", "dot")
_STORE_PATHS = ("keys", "versions", "owner")
_FORWARD_TIMEOUT = 10.0
BACKLOG = 512
"""Pending connections the kernel queues (capped by net.core.somaxconn); a small backlog makes
clients of a burst wait out a SYN retransmit (1-3 s)."""
READ_TIMEOUT_S = 5.0
"""How long a connection may stay silent (a request being read, or an idle keep-alive) before
it is closed, freeing its worker."""
WORKERS = 32
"""Connections served at once."""
WAITING = 4 * WORKERS
"""Accepted connections that may wait for a worker; beyond that a connection is answered 503
at once (and closed) rather than queued without bound."""
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 65\r\n\r\n"
    b'{"error": "busy", "message": "too many connections; retry later"}'
)


class Problem(Exception):
    """An HTTP error answer: status, a stable machine-readable code, a human message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Located(Protocol):
    local: bool
    owner: Any

    def to_json(self) -> dict[str, Any]: ...


class Served(Protocol):
    """What the server needs from an app (implemented by `kstream.service.query.AppService`)."""

    app_id: str
    instance_id: str

    @property
    def state(self) -> str: ...

    def is_live(self) -> bool: ...

    def is_ready(self) -> bool: ...

    def metrics_text(self) -> bytes: ...

    def topology(self, fmt: str) -> str: ...

    def stores(self) -> list[dict[str, Any]]: ...

    def locate(self, store: str, key_text: str, key_type: str | None = None) -> Any: ...

    def get_local(
        self, loc: Any, any_partition: bool = False, stale: bool = False
    ) -> dict[str, Any]: ...

    def peers(self) -> list[str]: ...


class _PooledHTTPServer(HTTPServer):
    """An HTTPServer serving each connection on a bounded pool of worker threads."""

    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="kstream-http")
        self._slots = threading.BoundedSemaphore(WORKERS + WAITING)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            self._pool.submit(self._serve, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is closing
            self._slots.release()
            self.shutdown_request(request)

    def _refuse(self, request: socket) -> None:
        try:
            request.settimeout(0.5)
            request.sendall(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def _serve(self, request: socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class HttpServer(BackgroundServer):
    """Serves `served` on `host:port` (port 0: any free port) in a background thread."""

    def __init__(
        self, served: Served, host: str = "127.0.0.1", port: int = 0, token: str | None = None
    ) -> None:
        self.served = served
        handler = type("Handler", (_Handler,), {"server_ref": self})
        super().__init__(_PooledHTTPServer((host, port), handler), host, token)


class JsonHandler(BaseHTTPRequestHandler):
    """What the app's server and the supervisor's gateway answer alike: keep-alive HTTP/1.1
    with a read timeout, GET only (other methods 405), and JSON or raw bodies with their
    length."""

    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S
    # headers and body go out in two writes: with Nagle's algorithm the body waits for the
    # client's delayed ACK of the headers (about 40 ms on Linux)
    disable_nagle_algorithm = True

    def _method_not_allowed(self) -> None:
        self._json(405, {"error": "method_not_allowed", "message": "only GET is supported"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _method_not_allowed

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body, sort_keys=True).encode(), "application/json", headers)

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


class _Handler(JsonHandler):
    server_ref: HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s: " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        try:
            self._route()
        except Problem as p:
            self._json(p.status, {"error": p.code, "message": p.message})
        except Exception as e:
            log.exception("http: %s failed", self.path)
            self._json(500, {"error": "internal", "message": f"{type(e).__name__}: {e}"})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol errors (bad request line, headers too long, ...) as JSON too."""
        self.close_connection = True
        try:
            self._json(code, {"error": "bad_request", "message": message or "malformed request"})
        except OSError:
            pass

    def _route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        try:
            query = urllib.parse.parse_qs(url.query, strict_parsing=False, max_num_fields=20)
        except ValueError as e:
            raise Problem(400, "bad_request", f"malformed query string: {e}") from None
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        srv, served = self.server_ref, self.server_ref.served
        if parts[:1] == ["health"] and len(parts) == 2:
            self._health(parts[1])
            return
        if not srv.authorized(self.headers.get("Authorization")):
            self._json(
                401,
                {"error": "unauthorized", "message": "missing or wrong bearer token"},
                {"WWW-Authenticate": 'Bearer realm="kstream"'},
            )
            return
        if parts == ["metrics"]:
            self._send(200, served.metrics_text(), _METRICS_TYPE)
        elif parts == ["topology"]:
            fmt = _one(query, "format") or "text"
            if fmt not in _FORMATS:
                raise Problem(400, "bad_format", f"format must be one of {', '.join(_FORMATS)}")
            self._send(200, served.topology(fmt).encode(), "text/plain; charset=utf-8")
        elif parts == ["stores"]:
            self._json(200, {"app_id": served.app_id, "stores": served.stores()})
        elif len(parts) == 4 and parts[0] == "stores" and parts[2] in _STORE_PATHS:
            self._store(parts[1], parts[2], parts[3], query)
        elif parts and parts[0] == "stores":
            raise Problem(
                404,
                "not_found",
                "use /stores, /stores/{store}/keys/{key}, /stores/{store}/versions/{key} or "
                "/stores/{store}/owner/{key}",
            )
        else:
            raise Problem(404, "not_found", f"no endpoint {url.path!r}")

    def _health(self, what: str) -> None:
        served = self.server_ref.served
        if what == "live":
            ok = served.is_live()
        elif what == "ready":
            ok = served.is_ready()
        else:
            raise Problem(404, "not_found", "use /health/live or /health/ready")
        body: dict[str, Any] = {"status": "ok" if ok else "unavailable", "state": served.state}
        # optional in `Served`: why not ready, or not live (a stream thread whose loop has not
        # turned for the watchdog's bound, while the state still says RUNNING)
        why = getattr(served, f"not_{what}_reason", None)
        if not ok and callable(why):
            reason = why()
            if reason:
                body["reason"] = reason
        self._json(200 if ok else 503, body)

    def _store(self, store: str, what: str, key: str, query: dict[str, list[str]]) -> None:
        served = self.server_ref.served
        if not key:
            raise Problem(400, "bad_key", "empty key")
        local_only = (_one(query, "local") or "false").lower()
        if local_only not in ("true", "false", "1", "0"):
            raise Problem(400, "bad_request", "local must be true or false")
        anywhere = (_one(query, "anywhere") or "false").lower() in ("true", "1")
        # stale reads (Kafka's enableStaleStores): a standby copy may answer
        stale_text = _one(query, "stale")
        if stale_text is not None and stale_text.lower() not in ("true", "false", "1", "0"):
            raise Problem(400, "bad_request", "stale must be true or false")
        stale = (
            stale_text.lower() in ("true", "1")
            if stale_text is not None
            else bool(getattr(served, "stale_by_default", False))
        )
        loc = served.locate(store, key, _one(query, "key_type"))
        # a versioned store's as_of or /versions query (KIP-960/968) rides on the location
        # (imported here: kstream.service.versioned_query builds on this module's Problem)
        from kstream.service.versioned_query import with_version_query

        loc = with_version_query(loc, what, query)
        if what == "owner":
            self._json(200, loc.to_json())
            return
        if local_only in ("true", "1"):
            if stale:
                self._json(200, served.get_local(loc, any_partition=anywhere, stale=True))
            else:
                self._json(200, served.get_local(loc, any_partition=anywhere))
            return
        if stale and not loc.local and getattr(loc, "standby_local", False):
            # this instance keeps a standby of the key's partition: answer here, no hop
            self._json(200, served.get_local(loc, stale=True))
            return
        if loc.local:
            try:
                self._json(200, served.get_local(loc))
                return
            except Problem as p:
                if p.code != "key_not_found":
                    raise
            self._ask_everyone(loc, query)
            return
        if loc.owner is None or not getattr(loc.owner, "endpoint", ""):
            raise Problem(
                503,
                "owner_unknown",
                f"no instance holds the partition of this key yet (state {served.state})",
            )
        status, body, ctype = self._forward(loc.owner.endpoint, query)
        if status == 404 and _error_code(body) == "key_not_found":
            self._ask_everyone(loc, query)
            return
        self._send(status, body, ctype, {"X-Kstream-Routed-To": loc.owner.endpoint})

    def _ask_everyone(self, loc: Any, query: dict[str, list[str]]) -> None:
        """The predicted owner lacks the key: look in every partition of every instance (the
        key may have been written with another partitioner), then answer 404."""
        served = self.server_ref.served
        try:
            self._json(200, served.get_local(loc, any_partition=True))
            return
        except Problem as p:
            if p.code not in ("key_not_found", "not_available"):
                raise
        others = served.peers()
        for endpoint in others:
            try:
                status, body, ctype = self._forward(endpoint, query, anywhere=True)
            except Problem:
                continue  # an instance that does not answer cannot hold the answer we need
            if status == 200:
                self._send(status, body, ctype, {"X-Kstream-Routed-To": endpoint})
                return
        raise Problem(
            404,
            "key_not_found",
            f"key {loc.key!r} has no value in store {loc.store!r}: not at its predicted owner "
            f"(partition {loc.partition} by murmur2) nor anywhere on {len(others) + 1} "
            "instance(s)",
        )

    def _forward(
        self, endpoint: str, query: dict[str, list[str]], anywhere: bool = False
    ) -> tuple[int, bytes, str]:
        """GET this request's path from `endpoint` with `local=true`: (status, body, type)."""
        path = urllib.parse.urlsplit(self.path).path
        params = {k: v[-1] for k, v in query.items()}
        params["local"] = "true"
        if anywhere:
            params["anywhere"] = "true"
        url = endpoint.rstrip("/") + path + "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, method="GET")
        auth = self.headers.get("Authorization")
        if auth:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=_FORWARD_TIMEOUT) as resp:
                status, body = resp.status, resp.read()
                ctype = resp.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
            ctype = e.headers.get("Content-Type", "application/json")
        except (urllib.error.URLError, OSError) as e:
            raise Problem(
                502, "owner_unreachable", f"the owning instance at {endpoint} did not answer: {e}"
            ) from None
        return status, body, ctype


def _error_code(body: bytes) -> str | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed.get("error") if isinstance(parsed, dict) else None


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None
