"""Where a Spark micro-batch's job spends its time, stage by stage, from Spark's status REST
API (the UI's `/api/v1`), for `bench/spark.py --stages`.

Spark's progress report (`durationMs`) says that nearly all of a batch is `addBatch`, the
batch's Spark job; this splits that job into its stages (the read, the tasks, the write slots)
and, per stage, its wall time (submission to completion: scheduling and the slowest task) and
the summed time of its tasks (`executorRunTime`: what the executors spent, Python workers
included). A query's jobs are told apart by their job group (Spark sets it to the query's run
id); a job's stages are numbered in stage-id order (the read first, the write slots last).
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any


def get(ui: str, path: str) -> Any:
    with urllib.request.urlopen(f"{ui}/api/v1/{path}", timeout=30) as r:
        return json.load(r)


def when(s: str | None) -> float | None:
    """Seconds since the epoch of one of the REST API's dates ("2026-12-05T13:58:06.123GMT")."""
    if not s:
        return None
    return datetime.strptime(s.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def fetch(ui: str) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The application's jobs and its stages by id (every attempt's last)."""
    app = get(ui, "applications")[0]["id"]
    jobs = get(ui, f"applications/{app}/jobs")
    stages = {s["stageId"]: s for s in get(ui, f"applications/{app}/stages")}
    return jobs, stages


def summarize(
    jobs: Sequence[Mapping[str, Any]],
    stages: Mapping[int, Mapping[str, Any]],
    groups: Sequence[str],
    after_job: int = -1,
) -> dict[str, dict[str, dict[str, float]]]:
    """Per query (`groups`: the queries' run ids, upstream first; reported as query0, query1)
    and per stage position in its batch jobs: the median over the batches after the query's
    first of the stage's wall ms, its tasks' summed run ms and CPU ms, and its task count.
    Only jobs above `after_job` count (those of earlier runs are left out). A stage Spark
    skipped (its output reused) is absent."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for qi, group in enumerate(groups):
        mine = sorted(
            (j for j in jobs if j.get("jobGroup") == group and j["jobId"] > after_job),
            key=lambda j: j["jobId"],
        )
        rows: dict[str, list[dict[str, float]]] = {}
        for job in mine[1:] or mine:
            for pos, sid in enumerate(sorted(job["stageIds"])):
                s = stages.get(sid)
                if s is None or s.get("status") != "COMPLETE":
                    continue
                start, end = when(s.get("submissionTime")), when(s.get("completionTime"))
                rows.setdefault(f"stage{pos}", []).append(
                    {
                        "wall_ms": 1000 * (end - start) if start and end else 0.0,
                        "run_ms": float(s.get("executorRunTime", 0)),
                        "cpu_ms": float(s.get("executorCpuTime", 0)) / 1e6,
                        "tasks": float(s.get("numTasks", 0)),
                    }
                )
        if rows:
            out[f"query{qi}"] = {
                pos: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
                for pos, rs in sorted(rows.items())
            }
    return out
