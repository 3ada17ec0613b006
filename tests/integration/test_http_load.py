"""The HTTP server under load and against idle connections (loopback, no broker needed).

2,000 requests from 50 concurrent clients, each request on a new connection (the case a small
listen backlog punishes with 1-3 s SYN retransmits): every request must succeed; the latency
percentiles are printed, not asserted. Idle connections must not pin the server: they are
closed after the read timeout and requests keep being served meanwhile.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from kstream.service import http as http_mod

REQUESTS = 2000
CONCURRENCY = 50


SERVER = """
import sys
from kstream.service.http import HttpServer

class Served:
    app_id = "load"
    instance_id = "load-1"
    state = "RUNNING"
    def is_live(self): return True
    def is_ready(self): return True
    def metrics_text(self): return b"# HELP up 1\\nup 1\\n"
    def topology(self, fmt): return "topology"
    def stores(self): return []
    def peers(self): return []

server = HttpServer(Served(), "127.0.0.1", 0).start()
print(server.port, flush=True)
sys.stdin.read()  # until the test closes our stdin
server.close()
"""


@dataclass
class Server:
    port: int


@pytest.fixture
def server() -> Iterator[Server]:
    """The server in its own process, as it runs for real: clients do not share its GIL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).parents[2]),
    )
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"the server did not start: {line!r}"
    yield Server(int(line))
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _one_request(port: int, path: str) -> tuple[int, float]:
    """One GET on a new connection: (status, seconds). A plain socket rather than http.client,
    so that the figure is the server's and not the client threads' Python overhead."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: load\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    status_line = reply.split(b"\r\n", 1)[0]
    parts = status_line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, time.perf_counter() - t0


def test_2000_requests_at_50_concurrent_all_succeed(server: Server) -> None:
    paths = ["/health/live", "/health/ready", "/metrics"]
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        results = list(
            pool.map(lambda i: _one_request(server.port, paths[i % len(paths)]), range(REQUESTS))
        )
    statuses = [s for s, _ in results]
    assert statuses.count(200) == REQUESTS, {s: statuses.count(s) for s in set(statuses)}
    ms = sorted(t * 1000 for _, t in results)
    p50 = statistics.median(ms)
    p99 = ms[int(len(ms) * 0.99) - 1]
    print(
        f"\nHTTP load: {REQUESTS} requests, {CONCURRENCY} concurrent, new connection each: "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms"
    )


def test_idle_connections_are_closed_and_do_not_block_requests(server: Server) -> None:
    # more idle connections than workers; each would hold a worker forever without a timeout
    idle = [
        socket.create_connection(("127.0.0.1", server.port)) for _ in range(http_mod.WORKERS + 20)
    ]
    try:
        deadline = time.monotonic() + http_mod.READ_TIMEOUT_S * 4 + 10
        served = 0
        while served < 5 and time.monotonic() < deadline:
            status, _ = _one_request(server.port, "/health/live")
            assert status == 200
            served += 1
        assert served == 5
        # every idle connection is closed by the server after the read timeout
        for s in idle:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()


def test_connections_beyond_the_bound_get_503_busy_not_an_endless_queue(server: Server) -> None:
    held = [
        socket.create_connection(("127.0.0.1", server.port))
        for _ in range(http_mod.WORKERS + http_mod.WAITING)
    ]
    try:
        status, _ = _one_request(server.port, "/health/live")
        assert status == 503
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 30
    status = 0
    while status != 200 and time.monotonic() < deadline:
        status, _ = _one_request(server.port, "/health/live")
    assert status == 200
