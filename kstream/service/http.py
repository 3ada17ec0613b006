"""The HTTP face of a running app: metrics, health, topology and store queries.

Standard library only (`ThreadingHTTPServer`): a scrape or a query never waits for another.
Errors are JSON `{"error": code, "message": text}` with a 4xx/5xx status, so scripts can act on
them. With a token configured every endpoint except `/health/*` needs `Authorization: Bearer
<token>`, compared in constant time; health stays open for orchestrators' probes.

A key query is answered by the instance that owns the key: any other instance forwards it
(with the caller's token and `local=true`, so it is never forwarded twice) and returns the
owner's answer unchanged.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

log = logging.getLogger("kstream.service")

__all__ = ["HttpServer", "Problem", "Served"]

_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_FORMATS = ("text", "mermaid", "dot")
_FORWARD_TIMEOUT = 10.0


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

    def get_local(self, loc: Any) -> dict[str, Any]: ...


class HttpServer:
    """Serves `served` on `host:port` (port 0: any free port) in a background thread."""

    def __init__(
        self, served: Served, host: str = "127.0.0.1", port: int = 0, token: str | None = None
    ) -> None:
        self.served = served
        self.token = token
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> HttpServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="kstream-http", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        given = header[len("Bearer ") :].strip().encode()
        return hmac.compare_digest(given, self.token.encode())


class _Handler(BaseHTTPRequestHandler):
    server_ref: HttpServer
    protocol_version = "HTTP/1.1"

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

    def _method_not_allowed(self) -> None:
        self._json(405, {"error": "method_not_allowed", "message": "only GET is supported"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _method_not_allowed

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
        elif len(parts) == 4 and parts[0] == "stores" and parts[2] in ("keys", "owner"):
            self._store(parts[1], parts[2], parts[3], query)
        elif parts and parts[0] == "stores":
            raise Problem(
                404,
                "not_found",
                "use /stores, /stores/{store}/keys/{key} or /stores/{store}/owner/{key}",
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
        self._json(
            200 if ok else 503, {"status": "ok" if ok else "unavailable", "state": served.state}
        )

    def _store(self, store: str, what: str, key: str, query: dict[str, list[str]]) -> None:
        served = self.server_ref.served
        if not key:
            raise Problem(400, "bad_key", "empty key")
        local_only = (_one(query, "local") or "false").lower()
        if local_only not in ("true", "false", "1", "0"):
            raise Problem(400, "bad_request", "local must be true or false")
        loc = served.locate(store, key, _one(query, "key_type"))
        if what == "owner":
            self._json(200, loc.to_json())
            return
        if loc.local or local_only in ("true", "1"):
            self._json(200, served.get_local(loc))
            return
        if loc.owner is None or not getattr(loc.owner, "endpoint", ""):
            raise Problem(
                503,
                "owner_unknown",
                f"no instance holds the partition of this key yet (state {served.state})",
            )
        self._forward(loc.owner.endpoint, query)

    def _forward(self, endpoint: str, query: dict[str, list[str]]) -> None:
        path = urllib.parse.urlsplit(self.path).path
        params = {k: v[-1] for k, v in query.items()}
        params["local"] = "true"
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
        self._send(status, body, ctype, {"X-Kstream-Routed-To": endpoint})

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, sort_keys=True).encode()
        self._send(status, data, "application/json", headers)

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


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None
