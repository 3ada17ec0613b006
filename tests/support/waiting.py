"""Waiting on a running App in tests: poll a condition, fail at once if the app fails."""

from __future__ import annotations

import time
from collections.abc import Callable

from kstream.runtime import App, AppState


def wait_for_app(
    what: str, check: Callable[[], bool], app: App, timeout: float, poll: float = 0.05
) -> None:
    """Poll `check` until it holds; the app's error, or a timeout, fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if app.state == AppState.ERROR:
            raise AssertionError(f"app failed while waiting for {what}: {app.error}")
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}; state {app.state}")
