"""bench/spark_stages.py's summary of Spark's REST job and stage lists: a query's jobs found by
its job group (the query's run id), its first batch and earlier runs' jobs left out, each
stage's wall time from its dates and its tasks' times, by position in the job. The lists are
written as Spark's `/api/v1` returns them (the fields the summary reads)."""

from __future__ import annotations

import os
import sys
from typing import Any

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from spark_stages import summarize, when  # noqa: E402


def stage(sid: int, start: str, end: str, run_ms: int, cpu_ns: int, tasks: int) -> dict[str, Any]:
    return {
        "stageId": sid,
        "status": "COMPLETE",
        "submissionTime": f"2026-12-05T14:00:{start}GMT",
        "completionTime": f"2026-12-05T14:00:{end}GMT",
        "executorRunTime": run_ms,
        "executorCpuTime": cpu_ns,
        "numTasks": tasks,
    }


def test_when_reads_the_rest_api_dates() -> None:
    assert when("2026-12-05T14:00:01.500GMT") - when("2026-12-05T14:00:00.250GMT") == 1.25  # type: ignore[operator]
    assert when(None) is None


def test_summary_by_query_and_stage_position() -> None:
    jobs = [
        {"jobId": 0, "jobGroup": "run-a", "stageIds": [0, 1]},  # an earlier run's
        {"jobId": 1, "jobGroup": "run-b", "stageIds": [2, 3]},  # query 0's first batch
        {"jobId": 2, "jobGroup": "run-b", "stageIds": [5, 4]},
        {"jobId": 3, "jobGroup": "run-b", "stageIds": [6, 7]},
        {"jobId": 4, "jobGroup": "run-c", "stageIds": [8]},  # query 1's only batch
        {"jobId": 5, "jobGroup": None, "stageIds": [9]},  # no query's
    ]
    stages = {
        2: stage(2, "00.000", "09.000", 9000, 0, 2),
        3: stage(3, "09.000", "10.000", 1000, 0, 2),
        4: stage(4, "10.000", "10.400", 700, 500_000_000, 2),
        5: stage(5, "10.400", "10.500", 150, 100_000_000, 2),
        6: stage(6, "11.000", "11.600", 1100, 700_000_000, 2),
        7: stage(7, "11.600", "11.900", 250, 200_000_000, 2),
        8: stage(8, "12.000", "12.200", 300, 0, 1),
        9: stage(9, "13.000", "14.000", 1, 0, 1),
    }
    got = summarize(jobs, stages, ["run-b", "run-c"], after_job=0)
    assert got == {
        "query0": {
            "stage0": {"wall_ms": 500.0, "run_ms": 900.0, "cpu_ms": 600.0, "tasks": 2.0},
            "stage1": {"wall_ms": 200.0, "run_ms": 200.0, "cpu_ms": 150.0, "tasks": 2.0},
        },
        "query1": {
            "stage0": {"wall_ms": 200.0, "run_ms": 300.0, "cpu_ms": 0.0, "tasks": 1.0},
        },
    }


def test_skipped_stages_are_absent() -> None:
    jobs = [{"jobId": 1, "jobGroup": "g", "stageIds": [1, 2]}]
    stages = {1: {**stage(1, "00.000", "01.000", 1, 0, 1), "status": "SKIPPED"}}
    stages[2] = stage(2, "01.000", "01.100", 90, 0, 1)
    got = summarize(jobs, stages, ["g"])
    assert got == {
        "query0": {"stage1": {"wall_ms": 100.0, "run_ms": 90.0, "cpu_ms": 0.0, "tasks": 1.0}}
    }
