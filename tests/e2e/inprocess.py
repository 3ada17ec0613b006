"""Running an App inside the test process until its output satisfies a condition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kstream.broker_compat.reader import TopicReader
from kstream.records import Record
from kstream.runtime import App, AppState


@contextmanager
def running(app: App, timeout: float = 120.0) -> Iterator[App]:
    app.start()
    try:
        if not app.wait_for(AppState.RUNNING, AppState.ERROR, timeout=timeout):
            raise AssertionError(f"app did not reach RUNNING in {timeout:g}s: {app.state}")
        yield app
    finally:
        app.close()


def read_until(
    reader: TopicReader,
    done: Callable[[list[Record]], bool],
    app: App | None = None,
    deadline_s: float = 180.0,
) -> list[Record]:
    """Records of `reader` (each provenance id once) until `done(records)`; a hang guard only."""
    out: list[Record] = []
    end = time.monotonic() + deadline_s
    while not done(out):
        out += reader.poll(0.2)
        if app is not None and app.state == AppState.ERROR:
            raise AssertionError(f"app failed: {app.error}")
        if time.monotonic() > end:
            raise AssertionError(f"gave up after {deadline_s:g}s with {len(out)} records")
    return out


def per_key(records: list[Any]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for r in records:
        k, v = (r.key, r.value) if isinstance(r, Record) else r
        out.setdefault(k, []).append(v)
    return out
