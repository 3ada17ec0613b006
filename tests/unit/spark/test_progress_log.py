"""`ProgressLog` logs every batch of a query once, in order, however often it is polled, and
asks Spark for the query's whole recent history only when more than one batch finished since
the last poll. No Spark runs here: the query is a stand-in with Spark's two properties."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from kstream.spark.progress import ProgressLog


def report(batch: int, records: int) -> dict[str, Any]:
    offsets = {"t": {"0": records * (batch + 1)}}
    start = {"t": {"0": records * batch}}
    return {
        "id": "q1",
        "name": "app",
        "batchId": batch,
        "durationMs": {"triggerExecution": 100},
        "sources": [
            {
                "startOffset": json.dumps(start),
                "endOffset": json.dumps(offsets),
                "latestOffset": json.dumps({"t": {"0": 1000}}),
            }
        ],
    }


class Query:
    """Spark keeps a query's recent reports; `lastProgress` is the newest."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.history_reads = 0

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self.reports[-1] if self.reports else None

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        self.history_reads += 1
        return list(self.reports)


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kstream.spark"]


def test_each_batch_is_logged_once_and_history_is_read_only_after_a_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kstream.spark")
    q, progress = Query(), ProgressLog()
    progress.poll(q)  # no batch yet
    q.reports.append(report(0, 10))
    progress.poll(q)
    progress.poll(q)
    q.reports.append(report(1, 10))
    progress.poll(q)
    assert q.history_reads == 0
    q.reports += [report(2, 10), report(3, 10)]  # two batches between polls
    progress.poll(q)
    assert q.history_reads == 1
    assert logged(caplog) == [
        f"query app batch {b}: 10 records in 100 ms (100 records/s), lag {1000 - 10 * (b + 1)}"
        for b in range(4)
    ]


def test_a_query_first_seen_after_some_batches_has_them_all_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kstream.spark")
    q = Query()
    q.reports += [report(b, 5) for b in range(3)]
    ProgressLog().poll(q)
    assert [m.split(":")[0] for m in logged(caplog)] == [f"query app batch {b}" for b in range(3)]
