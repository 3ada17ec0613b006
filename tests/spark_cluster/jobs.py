"""Following the jobs the cluster tests submit: their end, their progress, their log."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

Names = Callable[[str], str]
Submit = Callable[..., subprocess.Popen[bytes]]


def finish(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 300.0) -> None:
    """Wait for a submitted job to end by itself; its log in the failure message."""
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the job did not finish: {log.read_text(errors='replace')[-3000:]}")
    assert rc == 0, f"the job failed ({rc}): {log.read_text(errors='replace')[-3000:]}"


def committed_batches(bootstrap: str, app_id: str) -> int:
    """How far query `app_id` has written: its write slots' furthest marker, or its tasks'
    where they write their own outputs (`kstream.spark.sink.TaskWriter`)."""
    from kstream.spark.sink import committed_batches

    return max(
        committed_batches(bootstrap, app_id),
        committed_batches(bootstrap, app_id, by_tasks=True),
    )


def submit_master(log: str) -> str:
    """The master the job says it ran on (the cluster's, not local)."""
    start = log.index("(master ") + len("(master ")
    master = log[start : log.index(",", start)]
    assert master.startswith("spark://127.0.0.1:"), master
    return master


def wait_until(
    cond: Callable[[], bool], job: subprocess.Popen[bytes], log: Path, timeout_s: float = 240.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert job.poll() is None, f"the job ended early: {log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"timed out: {log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
