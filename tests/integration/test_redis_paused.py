"""A Redis that stops answering (SIGSTOP): readiness says so with the reason, liveness does not.

A paused server keeps its connections open and answers nothing: the store's call waits for its
socket timeout (10 s) and is retried for up to `retry_for` (30 s), the stream thread waiting in
it. /health/ready must turn 503 once a call has waited `STALL_S` seconds, naming the store and
the server, and stay 503 through the retries; /health/live stays 200 (the process is sound and
the server may come back). Once the server resumes, the app is ready again and the counts are
exact.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer
from support.waiting import wait_for_app

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App
from kstream.runtime.store_health import STALL_S
from kstream.service.http import HttpServer
from kstream.service.probe import attach
from kstream.service.query import AppService

pytestmark = pytest.mark.redis

KEYS = [f"k{i}" for i in range(4)]
PER_PHASE = 20
PAUSE_S = 12.0  # past the socket timeout (10 s): the wait goes on in the backend's retries


def _status(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _produce(bs: str, topic: str) -> None:
    p = Producer(bs)
    for i in range(PER_PHASE):
        for k in KEYS:
            p.produce(topic, b"v%d" % i, key=k.encode())
    p.flush()


def _await(what: str, check: Callable[[], bool], app: App, timeout: float = 30.0) -> None:
    wait_for_app(what, check, app, timeout, poll=0.1)


def _stored(url: str) -> list[int]:
    raw = redis.Redis.from_url(url)
    return [
        int.from_bytes(v[-8:], "big", signed=True)
        for key in raw.keys("*:counts:*:v")
        for v in raw.hvals(key)
    ]


def test_readiness_turns_503_with_the_reason_while_redis_is_paused(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    server: RedisServer,
    tmp_path: Path,
) -> None:
    bs = bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 1)
    admin.create_topic(dst, 1)
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(dst, key_serde="string", value_serde="long")
    config = {
        "state_dir": str(tmp_path),
        "default_backend": server.url + "?retry_for=30",
        "commit_interval": 50,
        "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    }
    app = App(b, app_id, bs, "exactly_once_v2", config)
    http = HttpServer(AppService(app, attach(app)), "127.0.0.1", 0).start()
    ready, live = http.url + "/health/ready", http.url + "/health/live"
    app.start()
    try:
        _produce(bs, src)
        _await("the first phase", lambda: sorted(_stored(server.url)) == [20] * 4, app)
        _await("readiness", lambda: _status(ready)[0] == 200, app)

        server.pause()
        paused = time.monotonic()
        _produce(bs, src)  # the stream thread reads the store, and waits
        _await("readiness to turn 503", lambda: _status(ready)[0] == 503, app, STALL_S + 10)
        took = time.monotonic() - paused
        code, body = _status(ready)
        assert code == 503 and body["state"] == "RUNNING", body
        assert "redis store 'counts'" in body["reason"], body
        assert f"127.0.0.1:{server.port}" in body["reason"], body
        assert "has not answered for" in body["reason"], body
        assert STALL_S <= took <= STALL_S + 5, took
        while time.monotonic() - paused < PAUSE_S:
            assert _status(live)[0] == 200
            assert _status(ready)[0] == 503
            time.sleep(0.5)
        server.resume()

        _await("readiness again", lambda: _status(ready)[0] == 200, app, 15)
        _await("the second phase", lambda: sorted(_stored(server.url)) == [40] * 4, app)
        assert _status(live)[0] == 200
    finally:
        app.close()
        http.close()
    assert app.error is None
