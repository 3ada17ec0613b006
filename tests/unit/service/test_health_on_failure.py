"""Health tells the truth: ERROR (and /health/live 503) from the moment the stream thread fails.

The stream thread's rollback and close after a fatal error can take long (a store retrying a
server that is gone); health must not answer "RUNNING" during that time.
"""

from __future__ import annotations

import json
import threading
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.errors import StoreError
from kstream.runtime import App, AppState
from kstream.runtime.task_manager import TaskManager
from kstream.service.http import HttpServer
from kstream.service.probe import attach
from kstream.service.query import AppService
from kstream.testing import MockClientSupplier


def _topology() -> Any:
    b = StreamBuilder()
    b.stream("in", key_serde="string", value_serde="string").to("out")
    return b.build()


def _status(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def failing_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[tuple[App, Any]]:
    """An app whose stream thread fails at once and whose shutdown waits for `release`."""
    release = threading.Event()
    in_shutdown = threading.Event()
    original_close_all = TaskManager.close_all

    def slow_close_all(self: TaskManager) -> None:
        # the failed thread's shutdown closes its tasks: hold it there
        in_shutdown.set()
        release.wait(30)
        original_close_all(self)

    def fail(self: TaskManager, consumer: Any) -> None:
        raise StoreError("redis store 'counts' partition 0: get failed after 30s")

    monkeypatch.setattr(App, "_create_topics", lambda self: {"in": 1, "out": 1})
    monkeypatch.setattr(TaskManager, "subscribe", fail)
    monkeypatch.setattr(TaskManager, "close_all", slow_close_all)
    app = App(
        _topology(),
        "health-app",
        "127.0.0.1:1",
        config={"state_dir": str(tmp_path)},
        client_supplier=MockClientSupplier(),
    )
    yield app, types.SimpleNamespace(release=release, in_shutdown=in_shutdown)
    release.set()
    app.close(5)


def test_state_is_error_and_live_is_503_while_the_failed_thread_still_shuts_down(
    failing_app: tuple[App, Any],
) -> None:
    app, gates = failing_app
    server = HttpServer(AppService(app, attach(app)), "127.0.0.1", 0).start()
    try:
        app.start()
        assert gates.in_shutdown.wait(10), "the stream thread did not fail"
        # the thread is still rolling back and closing, and health already says so
        assert app.state == AppState.ERROR
        assert isinstance(app.error, StoreError)
        live = _status(server.url + "/health/live")
        ready = _status(server.url + "/health/ready")
        assert live == (503, {"state": "ERROR", "status": "unavailable"})
        assert ready == (503, {"state": "ERROR", "status": "unavailable"})
        gates.release.set()
        assert app.close(10)
        assert _status(server.url + "/health/live")[0] == 503
    finally:
        server.close()
