"""An executor of a standalone cluster SIGKILLed mid-query, then the driver killed and the job
restarted from its checkpoint: every word count still comes out exactly once, in order.
"""

from __future__ import annotations

import os
import signal
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from jobs import Names, Submit, committed_batches, finish, wait_until
from spark_helpers import create_topics, produce, read_all

from examples.word_count import words

pytest.importorskip("pyspark")


def topics_env(src: str, out: str) -> dict[str, str]:
    return {"TEST_SRC_TOPIC": src, "TEST_OUT_TOPIC": out}


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
        # the query goes on without that executor: the batch running at the kill commits (Spark
        # reruns the lost executor's tasks on the other one). A later batch would also wait for
        # the worker to start a new executor, a minute on a loaded machine.
        wait_until(lambda: committed_batches(bootstrap_servers, app) >= at_kill + 1, job, log)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    before = committed_batches(bootstrap_servers, app)
    assert before < 30, "the whole input was processed before the kill: nothing to restart"

    again = submit("cluster_apps:word_count", app, "--max-records-per-batch", "1000", env=env)
    finish(again, log)

    expected = Counter(w for t in lines for w in words(t))
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in read_all(bootstrap_servers, out, "string", "long"):
        per_key[r.key].append(r.value)
    assert {k: v[-1] for k, v in per_key.items()} == dict(expected)
    for key, counts in per_key.items():
        assert counts == sorted(set(counts)), f"{key}: repeated or out-of-order counts {counts}"
