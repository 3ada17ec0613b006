"""Liveness tells the truth while the stream thread is stuck (kstream.runtime.watchdog).

A stream thread that sits in one call (before: a producer waiting for good in
`send_offsets_to_transaction`) left the state RUNNING and `/health/live` at 200 for minutes.
The loop's heartbeat makes `/health/live` answer 503, with a reason naming how long and where,
once the loop has not turned for the watchdog's bound, and 200 again once it turns; the
`kstream_stream_thread_stalled_seconds` gauge shows the same to Prometheus.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kstream.runtime.watchdog as watchdog
from kstream.dsl import StreamBuilder
from kstream.runtime import App, AppState
from kstream.service.http import HttpServer
from kstream.service.probe import attach
from kstream.service.query import AppService
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

pytestmark = pytest.mark.timeout(60)


def _status(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _until(what: str, done: Callable[[], bool], deadline_s: float = 30.0) -> None:
    """Wait for `done()` (a hang guard, not a measured bound)."""
    end = time.monotonic() + deadline_s
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_live_is_503_with_the_reason_while_the_loop_does_not_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watchdog, "STALL_S", 0.5)
    cluster = MockCluster()
    cluster.create_topic("in", 1)
    cluster.create_topic("out", 1)
    entered, release = threading.Event(), threading.Event()

    def hold_on_stuck(v: str) -> str:
        if v == "stuck":
            entered.set()
            release.wait(30)
        return v

    b = StreamBuilder()
    b.stream("in", key_serde="string", value_serde="string").map_values(hold_on_stuck).to(
        "out", key_serde="string", value_serde="string"
    )
    app = App(
        b,
        "stuck",
        "mock:9092",
        "exactly_once_v2",
        config={"state_dir": str(tmp_path), "commit_interval": 10},
        client_supplier=MockClientSupplier(cluster),
    )
    server = HttpServer(AppService(app, attach(app)), "127.0.0.1", 0).start()
    live = server.url + "/health/live"
    try:
        app.start()
        assert app.wait_for(AppState.RUNNING, timeout=30)
        assert _status(live)[0] == 200
        p = MockProducer(cluster)
        p.produce("in", b"stuck", b"k")
        p.flush()
        _until("the user function to be entered", entered.is_set)
        _until("liveness to turn 503", lambda: _status(live)[0] == 503)
        _, body = _status(live)
        assert body["state"] == "RUNNING"  # the state cannot tell
        assert "loop has not turned for" in body["reason"], body
        assert "hold_on_stuck" in body["reason"], body  # where the thread is
        metrics = server.url + "/metrics"
        with urllib.request.urlopen(metrics, timeout=5) as r:
            text = r.read().decode()
        stalled = [ln for ln in text.splitlines() if ln.startswith("kstream_stream_thread_stall")]
        assert stalled and float(stalled[0].rsplit(" ", 1)[1]) >= 0.5, stalled
        release.set()
        _until("liveness to come back", lambda: _status(live)[0] == 200)
        _until("the output", lambda: [m.value() for m in cluster.messages("out")] == [b"stuck"])
    finally:
        release.set()
        server.close()
        app.close(10)
