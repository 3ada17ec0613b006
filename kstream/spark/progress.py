"""Per-batch progress of the Spark queries, logged at INFO.

Spark keeps each query's recent progress reports; `ProgressLog.poll` logs the ones not logged
yet: Kafka records read (offsets advanced), the batch's duration and the lag (records present
in Kafka and not yet read, from the source's reported latest offsets), so a running job says
what it does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("kstream.spark")


def source_lag(source: dict[str, Any]) -> int | None:
    """Records between the batch's end offsets and the latest offsets of one source's report."""
    try:
        end = _offsets(source.get("endOffset"))
        latest = _offsets(source.get("latestOffset"))
    except (TypeError, ValueError):
        return None
    if latest is None or end is None:
        return None
    lag = 0
    for topic, parts in latest.items():
        for p, off in parts.items():
            lag += max(int(off) - int(end.get(topic, {}).get(p, 0)), 0)
    return lag


def source_records(source: dict[str, Any]) -> int | None:
    """Kafka records one batch read from one source: how far its offsets advanced."""
    try:
        start = _offsets(source.get("startOffset")) or {}
        end = _offsets(source.get("endOffset"))
    except (TypeError, ValueError):
        return None
    if end is None:
        return None
    return sum(
        max(int(off) - int(start.get(topic, {}).get(p, 0)), 0)
        for topic, parts in end.items()
        for p, off in parts.items()
    )


def batch_records(data: dict[str, Any]) -> int:
    """Kafka records one batch (a progress report as a dict) read from all its sources.

    Not Spark's `numInputRows`: the task path's rows carry many records each
    (`kstream.spark.packing`). A source that is not kstream's counts the rows Spark read.
    """
    sources = data.get("sources") or []
    counted = [source_records(s) for s in sources]
    if not sources or None in counted:
        return int(data.get("numInputRows") or 0)
    return sum(x for x in counted if x is not None)


def _offsets(raw: Any) -> dict[str, dict[str, int]] | None:
    if raw is None:
        return None
    value = json.loads(raw) if isinstance(raw, str) else raw
    return value if isinstance(value, dict) else None


class ProgressLog:
    """Logs each query's new progress reports once (by query id and batch id)."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def poll(self, query: Any) -> None:
        """Log `query`'s batches not logged yet; only its last report is fetched unless more
        than one batch finished since the last poll (Spark keeps up to 100 reports)."""
        try:
            last = query.lastProgress
            if last is None:
                return
            data = last if isinstance(last, dict) else json.loads(last.json)
            qid, batch = str(data.get("id")), int(data.get("batchId", -1))
            if self._last.get(qid, -1) >= batch:
                return
            reports = [data] if self._last.get(qid, -1) == batch - 1 else query.recentProgress
        except Exception:  # a query being torn down
            return
        for report in reports:
            self.log(report)

    def log(self, report: Any) -> None:
        data = report if isinstance(report, dict) else json.loads(report.json)
        qid, batch = str(data.get("id")), int(data.get("batchId", -1))
        if self._last.get(qid, -1) >= batch:
            return
        self._last[qid] = batch
        sources = data.get("sources") or []
        records = batch_records(data)
        ms = int((data.get("durationMs") or {}).get("triggerExecution") or 0)
        lags = [source_lag(s) for s in sources]
        known = [x for x in lags if x is not None]
        lag = str(sum(known)) if known else "?"
        rate = f"{records * 1000 / ms:.0f}" if ms else "-"
        log.info(
            "query %s batch %d: %d records in %d ms (%s records/s), lag %s",
            data.get("name") or qid,
            batch,
            records,
            ms,
            rate,
            lag,
        )
