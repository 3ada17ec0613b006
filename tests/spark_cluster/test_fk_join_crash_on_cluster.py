"""A foreign-key join and a windowed count on the standalone cluster, through an executor
SIGKILLed mid-stream, then the driver SIGKILLed and the job started again (issue 46, item 5).

Some orders are there before the job starts; more are produced steadily (a producer thread,
10 every 0.5 s) from its first batch until the driver is killed; the rest follow, and the
restarted job (availableNow) processes everything there is and ends. The join's two sides
feed each other (subscriptions one way, responses back), so the first job runs them side by
side (processingTime) and the restart takes turns between them
(kstream.spark.runner.TaskQueries), after fencing the slots of any transaction the killed job
left open.

What any reader sees is checked with a plain confluent-kafka read_committed consumer
(tests/e2e/independent_reader.py, no kstream code), against answers computed here in plain
Python from what was produced: one join result per order (every customer exists before the
first order and never changes, so no result is retracted or repeated), and per customer and
window the counts 1..n: 0 missing, 0 duplicated, 0 wrong.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from cluster_apps import fk_join_and_windows
from confluent_kafka import Producer
from e2e.independent_reader import IndependentReader, check_updates
from jobs import Names, Submit, committed_batches, finish, wait_until
from spark_helpers import create_topics

pytest.importorskip("pyspark")

T0 = 1_700_000_000_000
CUSTOMERS = {f"c{i}": f"name-{i}" for i in range(8)}
WINDOW_MS = 10_000
STEP_MS = 250  # event time between orders: 40 orders a window, 5 per customer
BURST, PAUSE_S = 10, 0.5
BEFORE = 200  # orders there before the job starts
AFTER_KILL = 200  # orders produced after the driver is killed
SLOW_BATCH = 40  # records per batch before the kill, so that the kills land mid-stream
FIRST_BATCH_S = 480.0  # the driver's and both executors' start-ups


def order(i: int) -> tuple[str, str, int]:
    """Order `i`: its id, value "<customer> <i>" and timestamp."""
    return f"o{i}", f"c{(i * 7 + i // 5) % len(CUSTOMERS)} {i}", T0 + i * STEP_MS


class Orders:
    """Produces orders from a thread, `BURST` every `PAUSE_S`, until `stop()`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer(java_placement(bootstrap))
        self.topic = topic
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.produce(BURST)
            self._stop.wait(PAUSE_S)

    def produce(self, n: int) -> None:
        for i in range(self.sent, self.sent + n):
            key, value, ts = order(i)
            self.producer.produce(self.topic, value.encode(), key.encode(), timestamp=ts)
        self.producer.flush()
        self.sent += n

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join()


def java_placement(bootstrap: str) -> dict[str, Any]:
    """A plain producer's settings placing keys as Kafka's Java producer does (murmur2), as
    the join's co-partitioning of the customers with the subscriptions needs."""
    return {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}


def expected(n: int) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """What the first `n` orders must give, computed without kstream: per order its one join
    result; per `<customer>@<window start>` the running counts."""
    joined: dict[str, list[Any]] = {}
    per_window: dict[str, int] = defaultdict(int)
    for i in range(n):
        key, value, ts = order(i)
        customer = value.split()[0]
        joined[key] = [f"{value}|{CUSTOMERS[customer]}"]
        per_window[f"{customer}@{ts - ts % WINDOW_MS}"] += 1
    return joined, {k: list(range(1, c + 1)) for k, c in per_window.items()}


def query_app(app: str, topic: str, topics: tuple[str, str, str, str]) -> str:
    """The app id under which the sub-topology reading `topic` commits its batches."""
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(fk_join_and_windows(*topics), app)
    (sid,) = (s for s in plan.order if topic in plan.read_topics(s))
    return f"{app}-subtopology-{sid}"


# two submissions on one-core executors, the first of three queries side by side: on a
# saturated 2-core machine (a load of 30) the first batch alone has taken over 240 s
@pytest.mark.timeout(900)
def test_fk_join_and_windows_on_cluster_through_an_executor_kill_and_a_driver_kill(
    submit: Submit,
    spark_cluster: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Path,
) -> None:
    bs = bootstrap_servers
    started = time.monotonic()
    topics = (unique_name("orders"), unique_name("customers"), unique_name("joined"))
    topics += (unique_name("counts"),)
    orders_topic, customers_topic, joined_topic, counts_topic = topics
    create_topics(bs, {t: 2 for t in topics})
    customers = Producer(java_placement(bs))
    for c, name in CUSTOMERS.items():  # before the first order, in event time too
        customers.produce(customers_topic, name.encode(), c.encode(), timestamp=T0 - 1000)
    customers.flush()
    env = {
        "TEST_ORDERS_TOPIC": orders_topic,
        "TEST_CUSTOMERS_TOPIC": customers_topic,
        "TEST_JOINED_TOPIC": joined_topic,
        "TEST_COUNTS_TOPIC": counts_topic,
    }
    app = unique_name("fk-crash")
    watched = query_app(app, orders_topic, topics)  # the join's orders side
    log = tmp_path / f"{app}.log"

    orders = Orders(bs, orders_topic)
    orders.produce(BEFORE)
    slow = ("--trigger", "processingTime=500ms", "--max-records-per-batch", str(SLOW_BATCH))
    job = submit("cluster_apps:fk_join_and_windows_app", app, *slow, env=env)
    try:
        # one batch committed: both executors are up (the first batch waits for their start)
        wait_until(lambda: committed_batches(bs, watched) >= 1, job, log, FIRST_BATCH_S)
        orders.start()
        executors = spark_cluster.executors()
        assert executors, "no executor is running"
        os.kill(executors[0], signal.SIGKILL)
        at_kill = committed_batches(bs, watched)
        # the batch running at the kill commits (Spark reruns the lost tasks on the other
        # executor): the driver is killed while the queries are still going
        wait_until(lambda: committed_batches(bs, watched) >= at_kill + 1, job, log)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
        orders.stop()
    killed_at = orders.sent
    # at most SLOW_BATCH records a batch (orders and responses): orders were left unread
    assert committed_batches(bs, watched) * SLOW_BATCH < killed_at, "the kill came after the end"
    orders.produce(AFTER_KILL)

    again = submit(
        "cluster_apps:fk_join_and_windows_app",
        app,
        "--max-records-per-batch",
        "4000",
        "--spark-conf",
        "spark.cores.max=1",
        env=env,
    )
    finish(again, log)

    want_joined, want_counts = expected(orders.sent)
    with IndependentReader(bs, [joined_topic], values="string") as reader:
        reader.read_to_end()
        joined = check_updates(reader, joined_topic, want_joined)
    with IndependentReader(bs, [counts_topic]) as reader:
        reader.read_to_end()
        counts = check_updates(reader, counts_topic, want_counts)
    print(
        f"\n{orders.sent} orders ({killed_at} before the driver's kill), "
        f"{time.monotonic() - started:.0f} s\n{joined}\n{counts}"
    )
    assert joined.exact, str(joined)
    assert counts.exact, str(counts)
