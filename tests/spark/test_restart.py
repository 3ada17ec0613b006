"""Kill the Spark process mid-stream, restart from its checkpoint: exact results, no repeats.

The output is read as a kstream reader reads it: a record whose provenance id was already seen
is dropped. After that, every count of every word appears exactly once, in order, up to the
true total: nothing lost, nothing doubled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, produce, read_all

from examples.word_count import words

pytest.importorskip("pyspark")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def committed_batches(bootstrap: str, app_id: str) -> int:
    from kstream.spark.sink import committed_batches

    return committed_batches(bootstrap, app_id)


def test_kill_and_restart(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from examples.word_count import build_topology
    from kstream.spark import run

    src, out, app = unique_name("lines"), unique_name("counts"), unique_name("restart")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    lines = [f"w{i % 7} w{i % 3} x{i % 11}" for i in range(400)]
    produce(
        bootstrap_servers,
        src,
        [(str(i), t, 1000 + i) for i, t in enumerate(lines)],
        "string",
        "string",
    )
    checkpoint = str(tmp_path / "checkpoint")

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "restart_app.py"),
            bootstrap_servers,
            src,
            out,
            checkpoint,
            app,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while committed_batches(bootstrap_servers, app) < 3:
            assert proc.poll() is None, "the Spark process exited before being killed"
            assert time.monotonic() < deadline, "the Spark process wrote no batch"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = committed_batches(bootstrap_servers, app)
    assert before < 20, "the whole input was processed before the kill: nothing to restart"

    run(build_topology(src, out), app, bootstrap_servers, checkpoint_dir=checkpoint, spark=spark)

    expected = Counter(w for t in lines for w in words(t))
    got = read_all(bootstrap_servers, out, "string", "long")
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in got:
        per_key[r.key].append(r.value)
    assert {k: v[-1] for k, v in per_key.items()} == dict(expected)
    for key, counts in per_key.items():
        assert counts == sorted(set(counts)), f"{key}: repeated or out-of-order counts {counts}"
