"""The lane's rerun of a failed batch spec by spec (lane.run_on_spark): a failure a spec accounts
for is that spec's result; a batch that failed while each of its specs runs alone is reported
(once such a failure was a worker refusing its own socket, and the rerun hid it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lane
import pytest
from lane import Spec, prepare, run_on_spark, unexplained
from test_spark_oracle import generated

import kstream.spark


def batch_of(n: int) -> list[Spec]:
    specs = [s for s in prepare(generated(40), "rr") if s.skip is None]
    assert len(specs) >= n
    return specs[:n]


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lane, "create_and_fill", lambda bootstrap, specs: None)
    monkeypatch.setattr(lane, "read_outputs", lambda bootstrap, topics: {t: [] for t in topics})


def runs(monkeypatch: pytest.MonkeyPatch, fails: Any) -> list[str]:
    """Stand in for `kstream.spark.run`: `fails(app_id)` says whether that run fails."""
    seen: list[str] = []

    def run(topology: Any, app_id: str, *args: Any, **kwargs: Any) -> None:
        seen.append(app_id)
        if fails(app_id):
            raise RuntimeError(f"worker lost in {app_id}")

    monkeypatch.setattr(kstream.spark, "run", run)
    return seen


@pytest.mark.usefixtures("no_broker")
def test_a_batch_that_fails_while_its_specs_run_alone_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    specs = batch_of(3)
    seen = runs(monkeypatch, lambda app_id: app_id == "b00")
    error = run_on_spark(None, "bootstrap", specs, "b00", tmp_path)
    assert seen == ["b00", *(f"b00-{s.index}" for s in specs)]
    assert all(s.error is None and s.got is not None for s in specs)
    assert error is not None and "worker lost in b00" in error
    line = unexplained("b00", error)
    assert line.startswith("batch b00 failed, its specs each ran alone: ")
    assert line.endswith("RuntimeError: worker lost in b00")
    report = lane.report(specs, 1.0, 1.0, 1, [line])
    assert line in report


@pytest.mark.usefixtures("no_broker")
def test_a_batch_whose_failure_a_spec_accounts_for_is_that_specs_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    specs = batch_of(3)
    culprit = f"b01-{specs[1].index}"
    runs(monkeypatch, lambda app_id: app_id in ("b01", culprit))
    assert run_on_spark(None, "bootstrap", specs, "b01", tmp_path) is None
    assert specs[1].error is not None and f"worker lost in {culprit}" in specs[1].error
    assert specs[0].error is None and specs[2].error is None
