"""The examples submitted to a standalone cluster (a master, two one-core workers), as a user
would (`kstreamd run --engine spark --master spark://...`), with an executor SIGKILLed
mid-query, then the driver killed and the job restarted from its checkpoint: the results are
exactly the test driver's and the native runtime's (run on the same input meanwhile), every
count once and in order.

Both examples run in one job (three queries: the word count's two sub-topologies and the
windowed count). The first submission starts a driver and two executor JVMs, the restart a
driver and one executor: JVM start-ups are the bulk of this test's time. Records are written by
the executors (one transaction per task and batch: no topic of either example is read back by
the app, `kstream.spark.sink.TaskWriter`), so this is also a test of writes from more than one
process.
"""

from __future__ import annotations

import os
import signal
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from cluster_apps import both_examples
from jobs import Names, Submit, committed_batches, finish, submit_master, wait_until
from spark_helpers import (
    create_topics,
    driver_outputs,
    final_values,
    finish_native,
    per_partition_driver,
    produce,
    read_all,
    start_native,
)

from examples import clicks_per_minute, word_count
from kstream.dsl.windowed import time_windowed_serde
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

LINES = 600
END_MINUTE_MS = 27 * 60_000
SLOW_BATCH = 20  # records per batch before the kill: 30 batches of lines, the kill lands early


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
    return recs + [(f"u{u}", {"end": True}, END_MINUTE_MS) for u in range(5)]


def lines_query(app: str, topology: Topology, lines_topic: str) -> str:
    """The app id under which the sub-topology reading the lines commits its batches."""
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(topology, app)
    (sid,) = (s for s in plan.order if lines_topic in plan.read_topics(s))
    return f"{app}-subtopology-{sid}"


# two submissions of three queries each on two one-core executors: on a saturated 2-core
# machine their first batches alone have taken 80 s
@pytest.mark.timeout(600)
def test_every_example_on_cluster_through_an_executor_kill_and_a_restart(
    submit: Submit,
    spark_cluster: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Path,
) -> None:
    lines_topic, counts_topic = unique_name("lines"), unique_name("counts")
    clicks_topic, cpm_topic = unique_name("clicks"), unique_name("cpm")
    nat_counts, nat_cpm = unique_name("native-counts"), unique_name("native-cpm")
    app = unique_name("examples")
    topics = (lines_topic, counts_topic, clicks_topic, cpm_topic, nat_counts, nat_cpm)
    create_topics(bootstrap_servers, {t: 2 for t in topics})
    lines = [(f"k{i % 7}", f"w{i % 5} w{i % 3} x{i % 11} the", 1000 + i) for i in range(LINES)]
    produce(bootstrap_servers, lines_topic, lines, "string", "string")
    recs = clicks(60)
    produce(bootstrap_servers, clicks_topic, recs, "string", "json")
    env = {
        "TEST_LINES_TOPIC": lines_topic,
        "TEST_COUNTS_TOPIC": counts_topic,
        "TEST_CLICKS_TOPIC": clicks_topic,
        "TEST_CPM_TOPIC": cpm_topic,
    }
    query = lines_query(
        app, both_examples(lines_topic, counts_topic, clicks_topic, cpm_topic), lines_topic
    )
    log = tmp_path / f"{app}.log"
    nat_id = unique_name("native")
    on_native = start_native(
        both_examples(lines_topic, nat_counts, clicks_topic, nat_cpm),
        nat_id,
        bootstrap_servers,
        str(tmp_path / nat_id),
    )

    slow = ("--trigger", "processingTime=200ms", "--max-records-per-batch", str(SLOW_BATCH))
    job = submit("cluster_apps:every_example", app, *slow, env=env)
    try:
        # one batch committed: both executors are up (the first batch waits for their start)
        wait_until(lambda: committed_batches(bootstrap_servers, query) >= 1, job, log)
        executors = spark_cluster.executors()
        assert executors, "no executor is running"
        os.kill(executors[0], signal.SIGKILL)
        at_kill = committed_batches(bootstrap_servers, query)
        # the query goes on without that executor: the batch running at the kill commits (Spark
        # reruns the lost executor's tasks on the other one). A later batch would also wait for
        # the worker to start a new executor, a minute on a loaded machine.
        wait_until(lambda: committed_batches(bootstrap_servers, query) >= at_kill + 1, job, log)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    before = committed_batches(bootstrap_servers, query)
    assert before < LINES // SLOW_BATCH, "every line was read before the kill: nothing to restart"

    # the restart on one executor: writes from two are covered before the kill, and a second
    # executor JVM would add only its start-up to this test's time
    again = submit(
        "cluster_apps:every_example",
        app,
        "--max-records-per-batch",
        "2000",
        "--spark-conf",
        "spark.cores.max=1",
        env=env,
    )
    finish(again, log)
    finish_native(on_native, bootstrap_servers)

    ref = driver_outputs(
        word_count.build_topology(lines_topic, counts_topic),
        {lines_topic: ("string", "string", lines)},
        {counts_topic: ("string", "long")},
    )[counts_topic]
    got = read_all(bootstrap_servers, counts_topic, "string", "long")
    native_counts = read_all(bootstrap_servers, nat_counts, "string", "long")
    assert final_values(got) == final_values(native_counts) == dict(ref)
    # provenance ids are stamped under broker_compat only (the cluster lane runs on Apache Kafka)
    stamped = os.environ.get("KSTREAM_BROKER_COMPAT", "none") == "tansu"
    assert all((r.header("kstream.src") is not None) == stamped for r in got)
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in got:
        per_key[r.key].append(r.value)
    for key, counts in per_key.items():
        assert counts == sorted(set(counts)), f"{key}: repeated or out-of-order counts {counts}"

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
    # The native runtime also closes the last minute (the end records') once its wall clock has
    # been silent for 70 s, which this test may outlast; Spark (and the driver) never do.
    native_cpm = [
        (r.key, r.value)
        for r in read_all(bootstrap_servers, nat_cpm, ks, "long")
        if r.key.start < END_MINUTE_MS
    ]
    assert Counter(got_cpm) == Counter(native_cpm) == Counter(ref_cpm)
    assert len(got_cpm) == len({k for k, _ in got_cpm}), "a window was emitted twice"

    text = log.read_text(errors="replace")
    assert f"master {submit_master(text)}" in text and "records in" in text
