"""The process-level tests' failure hook: with `KSTREAM_TEST_ARTIFACTS=<dir>` set (the chaos
lane, tools/chaos.py), a failing test keeps its worker logs, its brokers' logs and a dump of
its topics (e2e.artifacts) before its fixtures (a broker cluster among them) are torn down."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from e2e import artifacts


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if not os.environ.get(artifacts.ENV):
        return
    report = outcome.get_result()  # type: ignore[attr-defined]
    # the call phase runs before any fixture's teardown; a setup failure (a worker that never
    # came up inside a fixture) is kept too
    if report.failed and report.when in ("setup", "call"):
        kept = artifacts.keep(item, report.when, str(report.longrepr))
        if kept is not None:
            report.sections.append(("artifacts", f"kept in {kept}"))
