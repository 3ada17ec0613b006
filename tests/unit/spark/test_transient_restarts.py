"""`kstream.spark.run` restarts a query that failed to start a Python worker, from its
checkpoint, a bounded number of times; any other failure ends the run at once. No Spark runs
here: `start` is replaced by queries that fail as told."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.spark import runner
from kstream.topology.topology import Topology

CONNECT_BACK = "[STREAM_FAILED] Query [id = 1] terminated with exception: Python worker failed to connect back. SQLSTATE: XXKST"  # noqa: E501


class FakeQuery:
    def __init__(self, failure: Exception | None) -> None:
        self.failure = failure
        self.closed = False

    def wait(self) -> None:
        if self.failure is not None:
            raise self.failure

    def stop(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def run_with(
    monkeypatch: pytest.MonkeyPatch,
    failures: list[Exception | None],
    started: list[FakeQuery] | None = None,
) -> list[FakeQuery]:
    started = [] if started is None else started

    def start(*_a: Any, **_k: Any) -> FakeQuery:
        q = FakeQuery(failures[len(started)])
        started.append(q)
        return q

    monkeypatch.setattr(runner, "start", start)
    try:
        runner.run(Topology(), "app", "127.0.0.1:1")
    finally:
        assert all(q.closed for q in started)
    return started


def test_a_worker_that_missed_the_connect_back_gets_the_query_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = run_with(monkeypatch, [RuntimeError(CONNECT_BACK), RuntimeError(CONNECT_BACK), None])
    assert len(started) == 3


def test_restarts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    failures: list[Exception | None] = [RuntimeError(CONNECT_BACK)] * 10
    started: list[FakeQuery] = []
    with pytest.raises(RuntimeError, match="connect back"):
        run_with(monkeypatch, failures, started)
    assert len(started) == 1 + runner.TRANSIENT_RESTARTS == 4


def test_any_other_failure_ends_the_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[FakeQuery] = []
    with pytest.raises(ValueError, match="bad record"):
        run_with(monkeypatch, [ValueError("bad record at topic t partition 0 offset 5")], started)
    assert len(started) == 1
