"""The uncaught exception handler: what an error that stops the stream thread leads to."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kstream.dsl import StreamBuilder
from kstream.errors import KStreamError, ProcessingError
from kstream.runtime import App, AppState
from kstream.runtime.failures import StreamThreadExceptionResponse, uncaught_response
from kstream.testing import MockCluster, MockProducer
from kstream.testing.supplier import MockClientSupplier

SRC, DST = "in", "out"
R = StreamThreadExceptionResponse


def _app(
    tmp_path: Path,
    fail_times: int,
    cluster: MockCluster | None = None,
    left: list[int] | None = None,
) -> tuple[App, MockCluster]:
    """An app whose map fails on "bad" the first `fail_times` times it sees it (`left`: a
    count of failures to come shared with other instances instead)."""
    if cluster is None:
        cluster = MockCluster()
        cluster.create_topic(SRC, 1)
        cluster.create_topic(DST, 1)
        p = MockProducer(cluster)
        for v in (b"a", b"bad", b"c"):
            p.produce(SRC, v, b"k")
        p.flush()
    left = [fail_times] if left is None else left

    def upper(v: str) -> str:
        if v == "bad" and left[0] > 0:
            left[0] -= 1
            raise RuntimeError("transient")
        return v.upper()

    b = StreamBuilder()
    b.stream(SRC, key_serde="string", value_serde="string").map_values(upper).to(
        DST, key_serde="string", value_serde="string"
    )
    app = App(
        b,
        "uncaught",
        "mock:9092",
        "exactly_once_v2",
        config={"state_dir": str(tmp_path), "commit_interval": 10},
        client_supplier=MockClientSupplier(cluster),
    )
    return app, cluster


def _outputs(cluster: MockCluster) -> list[bytes | None]:
    return [m.value() for m in cluster.messages(DST)]


def test_replace_thread_starts_a_new_thread_that_carries_on(tmp_path: Path) -> None:
    app, cluster = _app(tmp_path, fail_times=1)
    seen: list[BaseException] = []
    states: list[AppState] = []
    app.on_state_change(lambda new, old: states.append(new))

    def replace(e: BaseException) -> R:
        seen.append(e)
        return R.REPLACE_THREAD

    app.set_uncaught_exception_handler(replace)
    app.start()
    try:
        done = threading.Event()
        for _ in range(200):
            if _outputs(cluster) == [b"A", b"BAD", b"C"]:
                done.set()
                break
            app.wait_for(AppState.ERROR, timeout=0.05)
        assert done.is_set(), _outputs(cluster)
        assert app.state == AppState.RUNNING
    finally:
        app.close()
    (err,) = seen
    assert isinstance(err, ProcessingError) and "transient" in str(err)
    assert AppState.ERROR not in states
    assert app.error is None


@pytest.mark.parametrize("response", [R.SHUTDOWN_CLIENT, R.SHUTDOWN_APPLICATION, None])
def test_shutdown_client_ends_in_error(tmp_path: Path, response: R | None) -> None:
    app, cluster = _app(tmp_path, fail_times=1)
    if response is not None:
        app.set_uncaught_exception_handler(lambda e: response)
    app.start()
    try:
        assert app.wait_for(AppState.ERROR, timeout=30)
    finally:
        app.close()
    assert isinstance(app.error, ProcessingError)
    assert b"C" not in _outputs(cluster)


def test_a_thread_failing_again_is_replaced_again_until_the_handler_says_stop(
    tmp_path: Path,
) -> None:
    app, _ = _app(tmp_path, fail_times=10)
    answers = [R.REPLACE_THREAD, R.REPLACE_THREAD, R.SHUTDOWN_CLIENT]
    calls: list[int] = []

    def answer(e: BaseException) -> R:
        calls.append(1)
        return answers[len(calls) - 1]

    app.set_uncaught_exception_handler(answer)
    app.start()
    try:
        assert app.wait_for(AppState.ERROR, timeout=30)
    finally:
        app.close()
    assert len(calls) == 3


def test_shutdown_application_stops_every_instance_running_then(tmp_path: Path) -> None:
    once = [1]  # whichever instance sees "bad" first fails; the other may take over then
    # the records come once both instances run: an instance follows the shutdown requests
    # from where they end when it starts, so one started while a request is written may
    # miss it (docs/faults.md)
    cluster = MockCluster()
    cluster.create_topic(SRC, 1)
    cluster.create_topic(DST, 1)
    first, _ = _app(tmp_path / "1", 0, cluster=cluster, left=once)
    second, _ = _app(tmp_path / "2", 0, cluster=cluster, left=once)
    for app in (first, second):
        app.set_uncaught_exception_handler(lambda e: R.SHUTDOWN_APPLICATION)
        app.start()
    try:
        for app in (first, second):
            assert app.wait_for(AppState.RUNNING, timeout=30)
        p = MockProducer(cluster)
        for v in (b"a", b"bad", b"c"):
            p.produce(SRC, v, b"k")
        p.flush()
        for app in (first, second):
            assert app.wait_for(AppState.ERROR, timeout=30)
    finally:
        for app in (first, second):
            app.close()
    errors = sorted((first.error, second.error), key=lambda e: type(e).__name__)
    stopped, failed = errors  # the instance stopped by the request, the one that failed
    assert isinstance(stopped, KStreamError) and "shut the application down" in str(stopped)
    assert isinstance(failed, ProcessingError)
    # an instance started afterwards runs: the request is not replayed to it
    later, _ = _app(tmp_path / "3", fail_times=0, cluster=cluster)
    later.start()
    try:
        assert later.wait_for(AppState.RUNNING, timeout=30)
        assert not later.wait_for(AppState.ERROR, timeout=0.5)
    finally:
        later.close()


def test_a_failing_or_confused_handler_shuts_the_client_down() -> None:
    def broken(e: BaseException) -> R:
        raise ValueError("oops")

    assert uncaught_response(broken, RuntimeError()) is R.SHUTDOWN_CLIENT
    assert uncaught_response(lambda e: "replace", RuntimeError()) is R.SHUTDOWN_CLIENT  # type: ignore[arg-type,return-value]
    assert uncaught_response(None, RuntimeError()) is R.SHUTDOWN_CLIENT
    assert uncaught_response(lambda e: R.REPLACE_THREAD, RuntimeError()) is R.REPLACE_THREAD


def test_the_handler_is_set_before_start(tmp_path: Path) -> None:
    app, _ = _app(tmp_path, fail_times=0)
    app.start()
    try:
        with pytest.raises(KStreamError, match="set it before start"):
            app.set_uncaught_exception_handler(lambda e: R.SHUTDOWN_CLIENT)
    finally:
        app.close()
