"""The examples submitted to a standalone cluster (a master, two one-core workers), as a user
would (`kstreamd run --engine spark --master spark://...`), give exactly the test driver's
results; an executor killed mid-query, then the driver killed and the job restarted from its
checkpoint, still gives every result exactly once.

Records are written by the executors (one transaction per write slot and batch), so these are
also the tests of the sink's writes from more than one process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, driver_outputs, per_partition_driver, produce, read_all

from examples.word_count import words
from kstream.dsl.windowed import time_windowed_serde

pytest.importorskip("pyspark")

Names = Callable[[str], str]
Submit = Callable[..., subprocess.Popen[bytes]]


def topics_env(src: str, out: str) -> dict[str, str]:
    return {"TEST_SRC_TOPIC": src, "TEST_OUT_TOPIC": out}


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
    from kstream.spark.sink import committed_batches

    return committed_batches(bootstrap, app_id)


def test_word_count_on_cluster(
    submit: Submit, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    src, out, app = unique_name("lines"), unique_name("counts"), unique_name("wc")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    lines = [(f"k{i % 7}", f"w{i % 5} w{i % 3} x{i % 11} the", 1000 + i) for i in range(300)]
    produce(bootstrap_servers, src, lines, "string", "string")

    job = submit(
        "cluster_apps:word_count",
        app,
        "--max-records-per-batch",
        "100",
        env=topics_env(src, out),
    )
    finish(job, tmp_path / f"{app}.log")

    from examples.word_count import build_topology

    ref = driver_outputs(
        build_topology(src, out), {src: ("string", "string", lines)}, {out: ("string", "long")}
    )[out]
    got = read_all(bootstrap_servers, out, "string", "long")
    assert {r.key: r.value for r in got} == dict(ref)
    log = (tmp_path / f"{app}.log").read_text(errors="replace")
    assert f"master {submit_master(log)}" in log and "records in" in log


def submit_master(log: str) -> str:
    """The master the job says it ran on (the cluster's, not local)."""
    start = log.index("(master ") + len("(master ")
    master = log[start : log.index(",", start)]
    assert master.startswith("spark://127.0.0.1:"), master
    return master


def test_clicks_per_minute_on_cluster(
    submit: Submit, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    src, out, app = unique_name("clicks"), unique_name("cpm"), unique_name("cpm")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    recs: list[tuple[Any, Any, int]] = []
    for i in range(60):
        ts = 1_000_000 + i * 4_000
        recs.append((f"u{i % 5}", {"page": i}, ts))
        if i % 9 == 0:  # late by 5 s: within grace unless the minute has closed
            recs.append((f"u{(i + 1) % 5}", {"late": i}, ts - 5_000))
        if i % 13 == 0:  # late by 70 s: always dropped
            recs.append((f"u{(i + 2) % 5}", {"too late": i}, ts - 70_000))
    recs += [(f"u{u}", {"end": True}, 27 * 60_000) for u in range(5)]
    produce(bootstrap_servers, src, recs, "string", "json")

    job = submit("cluster_apps:clicks_per_minute", app, env=topics_env(src, out))
    finish(job, tmp_path / f"{app}.log")

    from examples.clicks_per_minute import build_topology

    ks = time_windowed_serde("string", "1m")
    ref = per_partition_driver(
        lambda: build_topology(src, out), src, "string", "json", recs, 2, {out: (ks, "long")}
    )[out]
    got = [(r.key, r.value) for r in read_all(bootstrap_servers, out, ks, "long")]
    assert Counter(got) == Counter(ref)
    assert len(got) == len({k for k, _ in got}), "a window was emitted twice"


def test_executor_killed_then_restart_from_checkpoint(
    submit: Submit,
    spark_cluster: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("lines"), unique_name("counts"), unique_name("kill")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    lines = [f"w{i % 7} w{i % 3} x{i % 11}" for i in range(600)]
    produce(
        bootstrap_servers,
        src,
        [(str(i), t, 1000 + i) for i, t in enumerate(lines)],
        "string",
        "string",
    )
    env = topics_env(src, out)
    log = tmp_path / f"{app}.log"
    slow = ("--trigger", "processingTime=200ms", "--max-records-per-batch", "20")
    job = submit("cluster_apps:word_count", app, *slow, env=env)
    try:
        wait_until(lambda: committed_batches(bootstrap_servers, app) >= 2, job, log)
        executors = spark_cluster.executors()
        assert executors, "no executor is running"
        os.kill(executors[0], signal.SIGKILL)
        at_kill = committed_batches(bootstrap_servers, app)
        # the query goes on without that executor (Spark reruns its tasks elsewhere)
        wait_until(lambda: committed_batches(bootstrap_servers, app) >= at_kill + 3, job, log)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    before = committed_batches(bootstrap_servers, app)
    assert before < 30, "the whole input was processed before the kill: nothing to restart"

    again = submit("cluster_apps:word_count", app, "--max-records-per-batch", "200", env=env)
    finish(again, log)

    expected = Counter(w for t in lines for w in words(t))
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in read_all(bootstrap_servers, out, "string", "long"):
        per_key[r.key].append(r.value)
    assert {k: v[-1] for k, v in per_key.items()} == dict(expected)
    for key, counts in per_key.items():
        assert counts == sorted(set(counts)), f"{key}: repeated or out-of-order counts {counts}"


def wait_until(
    cond: Callable[[], bool], job: subprocess.Popen[bytes], log: Path, timeout_s: float = 240.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert job.poll() is None, f"the job ended early: {log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"timed out: {log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
