"""The examples submitted to a standalone cluster (a master, two one-core workers), as a user
would (`kstreamd run --engine spark --master spark://...`), give exactly the test driver's
results. Both examples run in one job: each submission starts a driver and two executor JVMs,
the bulk of these tests' time.

Records are written by the executors (one transaction per write slot and batch), so this is
also a test of the sink's writes from more than one process.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from jobs import Names, Submit, finish, submit_master
from spark_helpers import create_topics, driver_outputs, per_partition_driver, produce, read_all

from kstream.dsl.windowed import time_windowed_serde

pytest.importorskip("pyspark")


def clicks(n: int) -> list[tuple[Any, Any, int]]:
    """Clicks of 5 users 4 s apart, some late within the grace, some always too late, then one
    record per user at minute 27 to close every window."""
    recs: list[tuple[Any, Any, int]] = []
    for i in range(n):
        ts = 1_000_000 + i * 4_000
        recs.append((f"u{i % 5}", {"page": i}, ts))
        if i % 9 == 0:  # late by 5 s: within grace unless the minute has closed
            recs.append((f"u{(i + 1) % 5}", {"late": i}, ts - 5_000))
        if i % 13 == 0:  # late by 70 s: always dropped
            recs.append((f"u{(i + 2) % 5}", {"too late": i}, ts - 70_000))
    return recs + [(f"u{u}", {"end": True}, 27 * 60_000) for u in range(5)]


def test_every_example_on_cluster(
    submit: Submit, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    """The word count and the clicks per minute, in one job (three queries: the word count's
    two sub-topologies and the windowed count), give the test driver's results."""
    lines_topic, counts_topic = unique_name("lines"), unique_name("counts")
    clicks_topic, cpm_topic = unique_name("clicks"), unique_name("cpm")
    app = unique_name("examples")
    create_topics(
        bootstrap_servers, {t: 2 for t in (lines_topic, counts_topic, clicks_topic, cpm_topic)}
    )
    lines = [(f"k{i % 7}", f"w{i % 5} w{i % 3} x{i % 11} the", 1000 + i) for i in range(300)]
    produce(bootstrap_servers, lines_topic, lines, "string", "string")
    recs = clicks(60)
    produce(bootstrap_servers, clicks_topic, recs, "string", "json")

    env = {
        "TEST_LINES_TOPIC": lines_topic,
        "TEST_COUNTS_TOPIC": counts_topic,
        "TEST_CLICKS_TOPIC": clicks_topic,
        "TEST_CPM_TOPIC": cpm_topic,
    }
    job = submit("cluster_apps:every_example", app, "--max-records-per-batch", "2000", env=env)
    finish(job, tmp_path / f"{app}.log")

    from examples import clicks_per_minute, word_count

    ref = driver_outputs(
        word_count.build_topology(lines_topic, counts_topic),
        {lines_topic: ("string", "string", lines)},
        {counts_topic: ("string", "long")},
    )[counts_topic]
    got = read_all(bootstrap_servers, counts_topic, "string", "long")
    assert {r.key: r.value for r in got} == dict(ref)

    ks = time_windowed_serde("string", "1m")
    ref_cpm = per_partition_driver(
        lambda: clicks_per_minute.build_topology(clicks_topic, cpm_topic),
        clicks_topic,
        "string",
        "json",
        recs,
        2,
        {cpm_topic: (ks, "long")},
    )[cpm_topic]
    got_cpm = [(r.key, r.value) for r in read_all(bootstrap_servers, cpm_topic, ks, "long")]
    assert Counter(got_cpm) == Counter(ref_cpm)
    assert len(got_cpm) == len({k for k, _ in got_cpm}), "a window was emitted twice"

    log = (tmp_path / f"{app}.log").read_text(errors="replace")
    assert f"master {submit_master(log)}" in log and "records in" in log
