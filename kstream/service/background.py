"""An HTTP server in a daemon thread, with bearer-token checks.

kstreamd's own endpoint (`http.HttpServer`) and the `--processes` gateway
(`gateway.Gateway`) serve different routes but start, stop, name their address and check tokens
the same way; this is that shared part.
"""

from __future__ import annotations

import hmac
import threading
from http.server import HTTPServer
from typing import Self


class BackgroundServer:
    """Runs `httpd` on a daemon thread; `token` (if any) is required as `Bearer <token>`."""

    thread_name = "kstream-http"

    def __init__(self, httpd: HTTPServer, host: str, token: str | None) -> None:
        self._httpd = httpd
        self.host = host
        self.port = int(httpd.server_address[1])
        self.token = token
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where a client on this machine reaches the server (a wildcard bind -> loopback)."""
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def authorized(self, header: str | None) -> bool:
        """Whether an `Authorization` header carries the token (compared in constant time)."""
        if self.token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        given = header[len("Bearer ") :].strip().encode()
        return hmac.compare_digest(given, self.token.encode())
