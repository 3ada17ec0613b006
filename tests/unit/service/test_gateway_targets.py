"""The `--processes` gateway and request targets that are not a path: a real gateway, a real
worker HTTP server behind it, and raw requests on a socket (http.client sends only paths)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client.core import Metric

from kstream.service.gateway import Gateway, WorkerView, worker_url


class _Recorder(ThreadingHTTPServer):
    """An HTTP server that answers 200 to any GET and records the targets it was sent."""

    daemon_threads = True

    def __init__(self) -> None:
        self.targets: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.targets.append(self.path)
                body = json.dumps({"target": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _OneWorker:
    """The supervisor as the gateway sees it (kstream.service.gateway.Fleet): one live worker."""

    app_id = "app"
    instance_id = "sup"

    def __init__(self, url: str) -> None:
        self.url = url

    def workers(self) -> list[WorkerView]:
        return [WorkerView(0, "sup-0", self.url, 1, True, True, 0)]

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return True

    def own_metrics(self) -> list[Metric]:
        return []


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[Gateway, _Recorder, _Recorder]]:
    worker, chosen = _Recorder(), _Recorder()
    gateway = Gateway(_OneWorker(f"http://{worker.address}"), "127.0.0.1", 0).start()
    try:
        yield gateway, worker, chosen
    finally:
        gateway.close()
        for s in (worker, chosen):
            s.shutdown()
            s.server_close()


@pytest.fixture
def servers(
    running: tuple[Gateway, _Recorder, _Recorder],
) -> tuple[Gateway, _Recorder, _Recorder]:
    """(gateway, its worker, a server of the client's choosing), all on loopback, with no
    request recorded yet."""
    for recorder in running[1:]:
        recorder.targets.clear()
    return running


def _raw_get(port: int, target: str) -> tuple[int, bytes]:
    """Send `GET <target> HTTP/1.1` as it is; the status and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize(
    "target", ["@{chosen}/x", "http://{chosen}/x", "{chosen}/x", "*", "stores?x=@{chosen}"]
)
def test_a_target_that_is_not_a_path_is_400_and_goes_nowhere(
    servers: tuple[Gateway, _Recorder, _Recorder], target: str
) -> None:
    gateway, worker, chosen = servers
    status, body = _raw_get(gateway.port, target.format(chosen=chosen.address))
    assert status == 400, body
    assert json.loads(body)["error"] == "bad_target"
    assert worker.targets == [] and chosen.targets == []


def test_a_path_is_passed_on_to_the_worker_with_its_query(
    servers: tuple[Gateway, _Recorder, _Recorder],
) -> None:
    gateway, worker, chosen = servers
    target = f"/stores/counts/keys/a%2Fb@{chosen.address}?type=string&x=%41"
    status, body = _raw_get(gateway.port, target)
    assert status == 200, body
    assert worker.targets == [target] and chosen.targets == []


def test_worker_urls_keep_the_workers_host_whatever_the_path() -> None:
    base = "http://127.0.0.1:41001"
    assert worker_url(base, "//evil:80/x") == f"{base}//evil:80/x"
    assert worker_url(base, "/a b\x7f?q=é#frag") == f"{base}/a%20b%7F?q=%C3%A9"
    with pytest.raises(ValueError, match="not an origin-form request target"):
        worker_url(base, "@evil:80/x")
