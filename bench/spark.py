"""The Spark runner next to the native runtime, against Apache Kafka (`--broker tansu`: the
embedded Tansu; bench/brokers.py): on local[2], or (`--cluster`) on a standalone cluster of two
one-core workers started here. Both engines run with the `broker_compat` the broker needs
(`KSTREAM_BROKER_COMPAT`, set here unless already set).

Three workloads over the same input (100-byte JSON values, 2 partitions): a stateless
filter + map_values to a topic (one query, run inside the source's read tasks), a grouped count
and a windowed count per user (1-minute windows), both a re-keying query in the read tasks
feeding, through a repartition topic, a query of kstream's tasks over Spark state. The stateful
ones run once per key count (`--keys`, the number of distinct users, i.e. the state's size),
and Spark once per batch size (`--batch`, records per micro-batch). Each workload runs on both
engines from the same input topic to an output topic of its own, under exactly-once; every
Spark run first, then every native run:

- Spark: `kstream.spark.start` with `availableNow` and a per-batch record limit. The SparkSession
  is started beforehand, with the checkpoint file manager a session kstream starts itself
  uses for local checkpoints; the query's first batch pays for starting Python workers.
- native: `kstream.runtime.App` (processing_guarantee="exactly_once", default settings), in this
  process. Done when the app's committed offsets cover every record of its source topics.

Columns: `seconds` from start to the last output committed (Spark: the query's wall time;
native: `App.start()` until done, consumer-group join included; done is checked every 50 ms,
with one consumer kept for the run: `Completion`), `records_per_s` = input records
over `seconds`; `steady_records_per_s` leaves out the start-up (Spark: each query's batches
after its first, rows over trigger time, the queries of the sub-topologies in
series; native: from RUNNING, i.e. partitions assigned, until done); batch
latency is Spark's trigger execution time per micro-batch (first batch apart; p50, p99 and max
of the rest: `batch_p50_s` is the median over every query's batches, so with two queries a
median of two kinds of batch); `pipeline_batch_p50_s` is the time a batch's records take
through every query: the sum over the run's queries of each one's p50 (with one query, its
p50); `us_per_record` = 1e6 / steady records/s. `driver_rss_mb` and `jvm_rss_mb`: the
peak RSS of this (driver) Python process and of its Spark JVM during the run, sampled every
0.2 s, and (`*_growth_mb`) how far each rose above what it held when the run started (a
process keeps memory an earlier run or read left it). On local[2] the JVM also runs the
executors (their state stores included); on the cluster it is the driver alone, and
`memory_by_batch_size` shows whether the driver's memory follows the batch size (it should
not: no batch is collected to the driver).
`cpu_s` is the CPU (user + system, every thread) the engine's processes used over `seconds`,
from /proc (bench/spark_cpu.py): for Spark this process, its JVM, the executors' Python workers
and, with `--cluster`, the cluster's JVMs (the broker's processes left out); for the native
engine this process alone. `cores_used` = `cpu_s` / `seconds`; `records_per_core_s` = records /
`cpu_s` (the records/s of one fully used core); `per_core_spark_vs_native` compares those;
`cpu_s_by_kind` splits a Spark run's `cpu_s` into its JVMs' and its Python processes'.
`--stages` turns Spark's UI on and adds `stages_p50_ms` to each Spark row: per query, each
stage of its batch jobs (wall ms, the tasks' summed run and CPU ms; bench/spark_stages.py).
Before the measured runs each workload runs on both engines over `--warmup` records (by default
four batches of the largest `--batch`), unmeasured: on Spark in passes until a pass spends under
5% of its CPU in the JVMs' JIT compilers (at most `SPARK_WARMUP_PASSES`; each pass's share is in
the results' `warmup`), as Kafka Streams is warmed in bench/fair.py; the native engine once.
Otherwise the measured Spark runs pay for starting the executors' Python workers and for the
JVMs compiling their hot code (`jit_share`: the part of a run's CPU spent compiling).
Both engines must write the same final results; the run fails otherwise. Prints a table, writes
bench/results/spark.json (`runs`: one entry per master, with its configuration).

`state_keys` is the number of keys the stateful workload's state holds at the end (the users
seen: at most one per record). `steady_spark_vs_native` compares steady-state rates; the
`scaling` section gives, per stateful workload, engine and master, the per-record cost with the
largest state over that with the smallest (Spark keeps state per key in Spark's state
store, so this measures what a batch pays for the keys it touches, not for the state's size).
`--workload` runs a subset; the rows of the other workloads, and of the other master, are kept
from the previous results file.

    python bench/spark.py [--cluster] [--records 400000] [--batch 50000 --batch 10000]
        [--keys 1000 --keys 100000] [--workload "windowed count"] [--stages]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import TopicPartition  # noqa: E402

from kstream.broker_compat.reader import caught_up  # noqa: E402
from kstream.dsl import StreamBuilder  # noqa: E402
from kstream.errors import KafkaClientError  # noqa: E402
from kstream.kafka.admin import Admin  # noqa: E402
from kstream.kafka.consumer import Consumer, to_end_settings  # noqa: E402
from kstream.kafka.producer import Producer  # noqa: E402
from kstream.runtime import App, AppState  # noqa: E402
from kstream.spark.progress import batch_records  # noqa: E402
from kstream.topology.topology import Topology  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from brokers import add_broker_argument, default_compat, read_output, start_broker  # noqa: E402
from kstream_pipe import JIT_QUIET  # noqa: E402
from spark_cpu import TreeCpu, per_core  # noqa: E402
from spark_stages import fetch, summarize  # noqa: E402

PARTITIONS = 2
SPARK_WARMUP_PASSES = 20
USERS = 1000


def stateless(src: str, out: str) -> Topology:
    b = StreamBuilder()
    (
        b.stream(src, key_serde="string", value_serde="json")
        .filter(lambda _k, v: v["n"] % 2 == 0)
        .map_values(lambda v: {"user": v["user"], "double": v["n"] * 2})
        .to(out, value_serde="json")
    )
    return b.build()


def windowed_count(src: str, out: str) -> Topology:
    from kstream.dsl.windows import TimeWindows

    b = StreamBuilder()
    (
        b.stream(src, key_serde="string", value_serde="json")
        .group_by(lambda _k, v: v["user"], key_serde="string")
        .windowed_by(TimeWindows.of("1m", grace="1h"))  # no drops: repartitioned input interleaves
        .count()
        .to_stream()
        .to(out, value_serde="long")
    )
    return b.build()


def grouped_count(src: str, out: str) -> Topology:
    b = StreamBuilder()
    (
        b.stream(src, key_serde="string", value_serde="json")
        .group_by(lambda _k, v: v["user"], key_serde="string")
        .count()
        .to_stream()
        .to(out, value_serde="long")
    )
    return b.build()


WORKLOADS = {
    "stateless": stateless,
    "group-by count": grouped_count,
    "windowed count": windowed_count,
}
VALUE_SERDES = {"stateless": "json", "group-by count": "long", "windowed count": "long"}
KEY_SERDES = {"stateless": "string", "group-by count": "string", "windowed count": "bytes"}
STATEFUL = ("group-by count", "windowed count")


def produce(bootstrap: str, topic: str, n: int, users: int = USERS) -> None:
    """`n` records over `users` users, timestamps 1 ms apart (so a few 1-minute windows)."""
    pad = "x" * 60
    with Producer(bootstrap) as p:
        for i in range(n):
            value = json.dumps({"user": f"user-{i % users}", "n": i, "pad": pad}).encode()
            p.produce(topic, value, f"k{i}".encode(), timestamp=1_000_000 + i)
            if i % 10_000 == 0:
                p.poll(0)
        p.flush()


def final_results(bootstrap: str, topic: str, name: str) -> tuple[int, Any]:
    """(records, a digest of the final result): every record for a stream, last per key else."""
    value_serde = VALUE_SERDES[name]
    # outputs carry provenance ids, and need reading without repeats, only under Tansu's compat
    dedup = os.environ.get("KSTREAM_BROKER_COMPAT") == "tansu"
    recs = read_output(bootstrap, topic, KEY_SERDES[name], value_serde, dedup=dedup)
    if value_serde == "long":
        table = {r.key: r.value for r in recs}
        return len(recs), sorted(table.items())
    return len(recs), sorted((r.key, json.dumps(r.value, sort_keys=True)) for r in recs)


# --- Spark -----------------------------------------------------------------------------------


class PeakRss:
    """The peak resident memory of this process and of its Spark JVM while a run lasts, sampled
    every 0.2 s (a high-water mark such as `ru_maxrss` would carry over from earlier runs)."""

    def __init__(self) -> None:
        self.python_mb = 0.0
        self.jvm_mb = 0.0
        # what the processes held before the run (memory earlier runs left in use)
        self.python_start_mb = rss_mb(os.getpid()) or 0.0
        self._jvm = jvm_pid()
        self.jvm_start_mb = (rss_mb(self._jvm) or 0.0) if self._jvm is not None else 0.0
        self.own_s = 0.0  # the sampling thread's CPU (taken out of the engine's: TreeCpu)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        began = time.thread_time()
        while True:
            self.python_mb = max(self.python_mb, rss_mb(os.getpid()) or 0.0)
            if self._jvm is not None:
                self.jvm_mb = max(self.jvm_mb, rss_mb(self._jvm) or 0.0)
            if self._stop.wait(0.2):
                self.own_s = time.thread_time() - began
                return


def proc_status(pid: int | str) -> dict[str, str]:
    """`/proc/<pid>/status` as a dict (empty if the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            return {k: v.strip() for k, v in (line.split(":", 1) for line in f if ":" in line)}
    except OSError:
        return {}


def rss_mb(pid: int) -> float | None:
    rss = proc_status(pid).get("VmRSS")
    return int(rss.split()[0]) / 1024 if rss else None


def run_spark(
    spark: Any,
    bootstrap: str,
    name: str,
    src: str,
    batch: int,
    tmp: str,
    slug: str,
    broker_pid: int | None = None,
    stages: bool = False,
) -> dict:
    from kstream.spark import start

    out = f"bench-{slug}-out-spark"
    with Admin(bootstrap) as admin:
        admin.create_topic(out, PARTITIONS)
    from kstream.spark.runner import transient

    ui = spark.sparkContext.uiWebUrl if stages else None
    after_job = max((j["jobId"] for j in fetch(ui)[0]), default=-1) if ui else -1
    t0 = time.perf_counter()
    restarts = 0
    with PeakRss() as rss, TreeCpu(skip=[broker_pid]) as cpu:
        while True:
            q = start(
                WORKLOADS[name](src, out),
                f"bench-{slug}-spark",
                bootstrap,
                checkpoint_dir=os.path.join(tmp, slug),
                spark=spark,
                max_records_per_batch=batch,
            )
            try:
                q.wait()
                break
            except Exception as e:
                # a Python worker that missed Spark's 10 s to connect back (a loaded machine):
                # restarted from the checkpoint, as kstream.spark.run does; the timings then
                # cover the last start only
                if not transient(e) or restarts >= 10:
                    raise
                q.close()
                restarts += 1
                print(f"{slug}: restarted after {type(e).__name__} ({restarts})", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    cpu.discount(rss.own_s)
    # one query per sub-topology, upstream (the input topic's) first: records count what
    # was read from the input; batch times are those of every query
    queries = list(q.queries)
    reports = [list(query.recentProgress) for query in queries]
    slot_timings = [list(getattr(sink, "timings", ())) for sink in q.sinks]
    stage_p50 = summarize(*fetch(ui), [str(x.runId) for x in queries], after_job) if ui else None
    q.close()
    per_query = [[batch_of(p) for p in rs] for rs in reports]
    latencies = [t for batches in per_query for t, _ in batches]
    rows = sum(records_read(p) for p in reports[0])
    # every batch after each query's first (which starts its Python workers)
    steady = [t for batches in per_query for t, _ in batches[1:]] or latencies
    written, digest = final_results(bootstrap, out, name)
    steady_cost = steady_seconds_per_record(per_query)
    steady_rate = 1 / steady_cost if steady_cost else None
    return {
        "workload": name,
        "engine": "spark",
        "queries": len(queries),
        "records": rows,
        "batches": len(latencies),
        "seconds": round(elapsed, 2),
        "records_per_s": round(rows / elapsed),
        "steady_records_per_s": round(steady_rate) if steady_rate else None,
        "first_batch_s": round(latencies[0], 2) if latencies else None,
        "batch_p50_s": round(statistics.median(steady), 3) if steady else None,
        "pipeline_batch_p50_s": pipeline_batch_p50(per_query),
        "batch_p99_s": round(percentile(steady, 0.99), 3) if steady else None,
        "batch_max_s": round(max(steady), 3) if steady else None,
        "us_per_record": round(1e6 / steady_rate, 1) if steady_rate else None,
        "records_written": written,
        "restarts": restarts,
        "max_records_per_batch": batch,
        "batch_phases_p50_ms": phases_p50(reports),
        "slot_p50_ms": slot_p50(slot_timings),
        **({"stages_p50_ms": stage_p50} if stage_p50 is not None else {}),
        "driver_rss_mb": round(rss.python_mb),
        "jvm_rss_mb": round(rss.jvm_mb),
        "driver_rss_growth_mb": round(rss.python_mb - rss.python_start_mb),
        "jvm_rss_growth_mb": round(rss.jvm_mb - rss.jvm_start_mb),
        **per_core(rows, cpu.cpu_s, elapsed),
        "cpu_s_by_kind": cpu.by_kind,
        "jit_cpu_s": round(cpu.jit_s, 2),
        "jit_share": round(cpu.jit_s / cpu.cpu_s, 3) if cpu.cpu_s > 0 else None,
        "_digest": digest,
    }


def batch_of(progress: Any) -> tuple[float, int]:
    """(trigger seconds, Kafka records read) of one micro-batch's progress report."""
    data = json.loads(progress.json)
    return progress.durationMs.get("triggerExecution", 0) / 1000, batch_records(data)


PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "getBatch",
    "addBatch",
    "commitOffsets",
)


def phases_p50(reports: list[list[Any]]) -> dict[str, dict[str, int]]:
    """Per query (sub-topology, upstream first): the median of each phase of Spark's progress
    timings (`StreamingQueryProgress.durationMs`) over its batches after the first. `addBatch`
    is the batch's Spark job (read, tasks, write slots) and the sink's driver side;
    `latestOffset` the source's end-of-partition probe; `walCommit` and `commitOffsets` the
    checkpoint's offset and commit logs."""
    out: dict[str, dict[str, int]] = {}
    for i, rs in enumerate(reports):
        later = rs[1:] or rs
        if not later:
            continue
        out[f"query{i}"] = {
            k: round(statistics.median(p.durationMs.get(k, 0) for p in later)) for k in PHASES
        }
    return out


def slot_p50(timings: list[list[list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    """Per query: the median of each of the write slots' own timers (`TransactionalSink.timings`:
    clients and marker, produce, transaction commit), over the slots of its batches after the
    first."""
    out: dict[str, dict[str, float]] = {}
    for i, batches in enumerate(timings):
        slots = [t for b in (batches[1:] or batches) for t in b]
        if slots:
            out[f"query{i}"] = {
                k: round(statistics.median(t[k] for t in slots), 1) for k in slots[0]
            }
    return out


def pipeline_batch_p50(per_query: list[list[tuple[float, int]]]) -> float | None:
    """The time a batch's records take through every query: per query, the median trigger time
    of its batches after the first (its only batch if it ran one), summed over the queries
    (one per sub-topology, run in series: the re-keying query, then the count). With one
    query it is that query's p50; None if no query ran a batch."""
    p50s = [
        statistics.median(t for t, _ in (batches[1:] if len(batches) > 1 else batches))
        for batches in per_query
        if batches
    ]
    return round(sum(p50s), 3) if p50s else None


def steady_seconds_per_record(per_query: list[list[tuple[float, int]]]) -> float | None:
    """Seconds per input record once started: per query, its batches after the first over the
    rows they read (its only batch if it ran one), summed over the queries (a
    record goes through each sub-topology's query in turn)."""
    total = 0.0
    for batches in per_query:
        later = batches[1:] if len(batches) > 1 else batches
        rows = sum(n for _, n in later)
        if rows:
            total += sum(t for t, _ in later) / rows
    return total or None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def jvm_pid() -> int | None:
    """The Spark JVM this process started (its child `java` running Spark: the Kafka broker
    is a child `java` too), from /proc."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            status = proc_status(pid)
            if status.get("PPid") == me and status.get("Name") == "java":
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if b"kafka.Kafka\0" in f.read():
                            continue
                except OSError:
                    continue
                return int(pid)
    return None


def records_read(progress: Any) -> int:
    """Input records of one micro-batch: the offsets its source advanced by."""
    n = 0
    for s in progress.sources:
        start = (json.loads(s.startOffset) if s.startOffset else None) or {}
        end = (json.loads(s.endOffset) if s.endOffset else None) or {}
        for topic, parts in end.items():
            for p, e in parts.items():
                n += int(e) - int(start.get(topic, {}).get(p, 0))
    return n


# --- native ----------------------------------------------------------------------------------


def run_native(
    bootstrap: str,
    name: str,
    src: str,
    records: int,
    tmp: str,
    slug: str,
    broker_pid: int | None = None,
) -> dict:
    from kstream.spark.tasks import build_task_plan

    out, app_id = f"bench-{slug}-out-native", f"bench-{slug}-native"
    with Admin(bootstrap) as admin:
        admin.create_topic(out, PARTITIONS)
    topology = WORKLOADS[name](src, out)
    plan = build_task_plan(WORKLOADS[name](src, out), app_id)  # source topics, upstream first
    plan.unfuse(set(plan.fused.values()))  # the native runtime runs every sub-topology
    ordered = [t for sid in plan.order for t in plan.sources[sid]]
    ends = input_ends(bootstrap, src)
    app = App(topology, app_id, bootstrap, "exactly_once", {"state_dir": tmp})
    # its consumer started before the CPU count starts
    completion = Completion(bootstrap, app_id, ordered, {src: ends})
    cpu = TreeCpu(skip=[broker_pid], descend=False)
    t0 = time.perf_counter()
    try:
        with completion, cpu:
            app.start()
            if not app.wait_for(AppState.RUNNING, AppState.ERROR, timeout=120):
                raise RuntimeError(f"the native app did not start: {app.state}")
            running = time.perf_counter()
            while not completion.done():
                if app.state == AppState.ERROR:
                    raise RuntimeError(f"the native app failed: {app.error}")
                time.sleep(0.05)
            done = time.perf_counter()
    finally:
        app.close()
    written, digest = final_results(bootstrap, out, name)
    return {
        "workload": name,
        "engine": "native",
        "queries": None,
        "records": records,
        "batches": None,
        "seconds": round(done - t0, 2),
        "records_per_s": round(records / (done - t0)),
        "steady_records_per_s": round(records / (done - running)),
        "first_batch_s": None,
        "batch_p50_s": None,
        "pipeline_batch_p50_s": None,
        "batch_p99_s": None,
        "batch_max_s": None,
        "us_per_record": round(1e6 * (done - running) / records, 1),
        "records_written": written,
        "driver_rss_mb": None,
        "jvm_rss_mb": None,
        **per_core(records, cpu.cpu_s, done - t0),
        "_digest": digest,
    }


def input_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of each partition of the input, as fetching sees it."""
    from kstream.spark.source import partition_bounds

    with Consumer(bootstrap, kafka=to_end_settings({})) as c:
        ends = partition_bounds(c, [topic])[1][topic]
    return {int(p): e for p, e in ends.items()}


class Completion:
    """Whether the native app's group has committed past every record of `topics` (in
    upstream order), checked every 50 ms while it runs, in the measured process.

    Where the end is known (the input) the committed offset must reach it; elsewhere (topics
    written in transactions, which end with a commit marker) no record may follow it, which
    only reading to the end shows (`caught_up`, two consumers of its own). So one consumer,
    kept for the run, reads the committed offsets; the read to the end runs only once every
    earlier topic is done and the topic's committed offsets stood still since the previous
    check (while they move, the app is still at work). A consumer made at every check cost
    the native engine's `cpu_s` its start and connection 20 times a second.
    """

    def __init__(
        self, bootstrap: str, group: str, topics: list[str], known: dict[str, dict[int, int]]
    ) -> None:
        self._bootstrap, self._group = bootstrap, group
        self._topics, self._known = topics, known
        self._meta = Consumer(bootstrap, group_id=group)
        self._parts: dict[str, list[int]] = {}  # asked when first needed: the app creates some
        self._last: dict[str, dict[int, int]] = {}

    def __enter__(self) -> Completion:
        return self

    def __exit__(self, *_: Any) -> None:
        self._meta.close()

    def done(self) -> bool:
        for topic in self._topics:
            parts = self._parts.get(topic) or self._meta.partitions_for(topic)
            if not parts:
                return False
            self._parts[topic] = parts
            try:
                committed = self._meta.committed([TopicPartition(topic, p) for p in parts])
            except KafkaClientError as e:
                if e.retriable:  # the group's coordinator moving or loading: ask again
                    return False
                raise
            offsets = {tp.partition: max(tp.offset, 0) for tp in committed}
            if topic in self._known:
                if any(offsets[p] < e for p, e in self._known[topic].items()):
                    return False
                continue
            still = self._last.get(topic) == offsets
            self._last[topic] = offsets
            if not still or not caught_up(self._bootstrap, self._group, topic):
                return False
        return True


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument(
        "--batch", type=int, action="append", help="records per micro-batch (repeatable)"
    )
    ap.add_argument("--keys", type=int, action="append", help="distinct users (repeatable)")
    ap.add_argument(
        "--workload",
        action="append",
        choices=sorted(WORKLOADS),
        help="run only these (repeatable); the results file keeps the other workloads' rows",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="records each workload first runs on both engines, not measured, in batches of "
        "the largest --batch (default: four such batches; 0: none); on Spark in passes until its "
        "JIT compilers are quiet",
    )
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="run Spark on a standalone cluster of two one-core workers started here, not local[2]",
    )
    ap.add_argument(
        "--stages",
        action="store_true",
        help="turn Spark's UI on and report each Spark run's stages (bench/spark_stages.py)",
    )
    add_broker_argument(ap)
    args = ap.parse_args()
    # before Spark starts, so that its Python workers get it too
    os.environ.setdefault("KSTREAM_BROKER_COMPAT", default_compat(args.broker))
    keys = args.keys or [USERS]
    batches = args.batch or [50_000]
    chosen = args.workload or list(WORKLOADS)
    runs = [
        (name, k)
        for name in WORKLOADS
        if name in chosen
        for k in (keys if name in STATEFUL else keys[:1])
    ]
    with contextlib.ExitStack() as stack:
        master, spark = start_spark(stack, args.cluster, args.stages)
        broker = stack.enter_context(start_broker(args.broker))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        bs = broker.bootstrap_servers
        warm_batch = max(batches)
        warm_records = 4 * warm_batch if args.warmup is None else args.warmup
        warm, warm_shares = warm_up(spark, bs, chosen, warm_records, warm_batch, tmp, broker.pid)
        sources, spark_rows = {}, {}
        for name, k in runs:
            slug = f"{name.replace(' ', '-')}-{k}"
            src = sources[(name, k)] = f"bench-{slug}-in"
            with Admin(bs) as admin:
                admin.create_topic(src, PARTITIONS)
            produce(bs, src, args.records, k)
            for batch in batches:
                row = run_spark(
                    spark,
                    bs,
                    name,
                    src,
                    batch,
                    os.path.join(tmp, "spark"),
                    f"{slug}-{batch}",
                    broker.pid,
                    args.stages,
                )
                spark_rows[(name, k, batch)] = {**row, "keys": k, "master": master}
        spark.stop()
        for name, src in warm.items():
            slug = f"warm-{name.replace(' ', '-')}"
            run_native(
                bs, name, src, warm_records, os.path.join(tmp, "warm-native"), slug, broker.pid
            )
        native_rows = {}
        for name, k in runs:
            slug = f"{name.replace(' ', '-')}-{k}"
            row = run_native(
                bs,
                name,
                sources[(name, k)],
                args.records,
                os.path.join(tmp, "native"),
                slug,
                broker.pid,
            )
            native_rows[(name, k)] = {**row, "keys": k, "master": None}
    results = []
    for name, k in runs:
        native_row = native_rows[(name, k)]
        digest = native_row.pop("_digest")
        native_row["spark_vs_native"] = native_row["steady_spark_vs_native"] = None
        native_row["per_core_spark_vs_native"] = None
        native_row["state_keys"] = min(k, args.records) if name in STATEFUL else None
        for batch in batches:
            spark_row = spark_rows[(name, k, batch)]
            if spark_row.pop("_digest") != digest:
                raise SystemExit(f"{name}: Spark and the native runtime wrote different results")
            spark_row["spark_vs_native"] = round(
                spark_row["records_per_s"] / native_row["records_per_s"], 3
            )
            spark_row["steady_spark_vs_native"] = round(
                (spark_row["steady_records_per_s"] or 0) / native_row["steady_records_per_s"], 3
            )
            spark_row["per_core_spark_vs_native"] = (
                round(spark_row["records_per_core_s"] / native_row["records_per_core_s"], 3)
                if spark_row["records_per_core_s"] and native_row["records_per_core_s"]
                else None
            )
            spark_row["state_keys"] = native_row["state_keys"]
            results.append(spark_row)
        results.append(native_row)
    cols = [
        "workload",
        "engine",
        "keys",
        "max_records_per_batch",
        "records",
        "batches",
        "seconds",
        "records_per_s",
        "steady_records_per_s",
        "first_batch_s",
        "batch_p50_s",
        "pipeline_batch_p50_s",
        "batch_p99_s",
        "us_per_record",
        "driver_rss_mb",
        "jvm_rss_mb",
        "spark_vs_native",
        "cores_used",
        "records_per_core_s",
        "per_core_spark_vs_native",
        "jit_share",
    ]
    width = {c: max(len(c), 9) for c in cols}
    print(f"Spark on {master}")
    print(" | ".join(f"{c:>{width[c]}}" for c in cols))
    for r in results:
        print(" | ".join(f"{'-' if r.get(c) is None else r[c]!s:>{width[c]}}" for c in cols))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", "spark.json")
    previous = previous_file(path)
    meta = {
        "partitions": PARTITIONS,
        "records": args.records,
        "max_records_per_batch": batches,
        "keys": keys,
        "workloads": chosen,
        "processing_guarantee": "exactly_once",
        "broker": broker.name,
        "broker_compat": os.environ["KSTREAM_BROKER_COMPAT"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "warmup": {
            "records": warm_records,
            "max_records_per_batch": warm_batch,
            "quiet_jit_share": JIT_QUIET,
            "max_passes": SPARK_WARMUP_PASSES,
            "spark_passes_jit_share": warm_shares,
        },
    }
    runs_meta = [r for r in previous.get("runs", []) if r.get("master_kind") != master_kind(master)]
    runs_meta.append({"master": master, "master_kind": master_kind(master), **meta})
    # rows of other masters, or of workloads this run left out, come from the previous file,
    # each measured under the configuration its `runs` entry gives
    for r in results:
        r["run"] = master_kind(master)
    kept = [
        r
        for r in previous.get("results", [])
        if r.setdefault("run", "local[2]") != master_kind(master) or r["workload"] not in chosen
    ]
    out = {
        "runs": runs_meta,
        "results": kept + results,
        "scaling": scaling(kept + results),
        "memory_by_batch_size": memory_by_batch(kept + results),
    }
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


def warm_up(
    spark: Any,
    bs: str,
    chosen: list[str],
    records: int,
    batch: int,
    tmp: str,
    broker_pid: int | None = None,
) -> tuple[dict[str, str], dict[str, list[float | None]]]:
    """Run each workload on Spark over `records` records in batches of `batch`, unmeasured, in
    passes until one spends under `JIT_QUIET` of its CPU in the JVMs' JIT compilers (at most
    `SPARK_WARMUP_PASSES`), as Kafka Streams is warmed in bench/fair.py. Spark compiles for
    minutes: its per-batch code (planning, task serialization, closure cleaning, the state
    server's set-up) runs a few times a batch and reaches the compiler's thresholds only after
    hundreds of batches, so two warm batches left 40-50% of the measured JVM CPU in the
    compiler. The first pass also starts the executors' Python workers. The batches are as
    large as the measured ones: the code a batch runs once gets as hot as the code it runs per
    record. Returns the input topics and each workload's passes' JIT shares."""
    if records <= 0:
        return {}, {}
    sources: dict[str, str] = {}
    shares: dict[str, list[float | None]] = {}
    for name in chosen:
        slug = f"warm-{name.replace(' ', '-')}"
        src = sources[name] = f"bench-{slug}-in"
        with Admin(bs) as admin:
            admin.create_topic(src, PARTITIONS)
        produce(bs, src, records, 100)
        passes = shares[name] = []
        while len(passes) < SPARK_WARMUP_PASSES:
            row = run_spark(
                spark,
                bs,
                name,
                src,
                batch,
                os.path.join(tmp, "warm"),
                f"{slug}-{len(passes)}",
                broker_pid,
            )
            passes.append(row["jit_share"])
            print(f"warm-up {name} pass {len(passes)}: JIT {row['jit_share']}", file=sys.stderr)
            if row["jit_share"] is not None and row["jit_share"] < JIT_QUIET:
                break
    return sources, shares


def start_spark(stack: contextlib.ExitStack, cluster: bool, ui: bool = False) -> tuple[str, Any]:
    """(master, session): local[2], or a standalone cluster of two one-core workers; with
    `ui`, Spark's UI (and its REST API) on."""
    from kstream.spark import spark_session

    conf = {"spark.sql.shuffle.partitions": str(PARTITIONS)}
    if ui:
        conf["spark.ui.enabled"] = "true"
    if not cluster:
        return "local[2]", local_checkpoints(spark_session(conf=conf))
    from kstream.spark.local_cluster import LocalCluster

    env = {"PYTHONPATH": os.pathsep.join([ROOT, *sys.path[1:]])}
    nodes = stack.enter_context(LocalCluster(workers=2, cores=1, memory="1g", env=env))
    conf.update({"spark.driver.host": "127.0.0.1", "spark.executor.memory": "768m"})
    return nodes.url, local_checkpoints(spark_session(master=nodes.url, conf=conf))


def local_checkpoints(session: Any) -> Any:
    """`session` with the checkpoint file manager a session kstream starts itself gets for a
    checkpoint on the local disk (`kstream.spark.run` without a session), as the bench's
    checkpoints are, where the bench passes a session of its own."""
    from kstream.spark.checkpoint import use_file_system_manager

    use_file_system_manager(session, ROOT)
    return session


def master_kind(master: str) -> str:
    return "cluster" if master.startswith("spark://") else master


def previous_file(path: str) -> dict[str, Any]:
    """The last results file (its rows are kept for what this run leaves out)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if "config" in data:  # the layout before per-master runs: local[2] rows
        data["runs"] = [{"master": "local[2]", "master_kind": "local[2]", **data.pop("config")}]
    return dict(data)


def scaling(results: list[dict]) -> dict[str, Any]:
    """Per stateful workload, run (local[2] or cluster) and engine: per-record cost with the
    most keys of state over the cost with the fewest (the target: within 1.5x), from the
    steady-state rates, at the largest batch size."""
    out: dict[str, Any] = {}
    for name in STATEFUL:
        for engine in ("spark", "native"):
            rows = [r for r in results if r["workload"] == name and r["engine"] == engine]
            for run in sorted({r["run"] for r in rows}):
                mine = [r for r in rows if r["run"] == run]
                batch = max((r.get("max_records_per_batch") or 0) for r in mine)
                mine = [
                    r
                    for r in mine
                    if r["us_per_record"]
                    and r.get("state_keys")
                    and (r.get("max_records_per_batch") or 0) == batch
                ]
                if len({r.get("state_keys") for r in mine}) < 2:
                    continue
                small = min(mine, key=lambda r: r["state_keys"])
                large = max(mine, key=lambda r: r["state_keys"])
                out.setdefault(name, {}).setdefault(run, {})[engine] = {
                    "state_keys": [small["state_keys"], large["state_keys"]],
                    "us_per_record": [small["us_per_record"], large["us_per_record"]],
                    "cost_ratio": round(large["us_per_record"] / small["us_per_record"], 2),
                }
    return out


def memory_by_batch(results: list[dict]) -> list[dict]:
    """Per master, workload and state size run with more than one batch size: the driver's
    peak RSS (Python process and JVM) at each."""
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for r in results:
        if r["engine"] == "spark" and r.get("max_records_per_batch"):
            groups.setdefault((r["run"], r["workload"], r["keys"]), []).append(r)
    return [
        {
            "run": run,
            "workload": name,
            "keys": keys,
            "max_records_per_batch": [r["max_records_per_batch"] for r in rows],
            "driver_rss_mb": [r["driver_rss_mb"] for r in rows],
            "jvm_rss_mb": [r["jvm_rss_mb"] for r in rows],
            "driver_rss_growth_mb": [r.get("driver_rss_growth_mb") for r in rows],
            "jvm_rss_growth_mb": [r.get("jvm_rss_growth_mb") for r in rows],
        }
        for (run, name, keys), rows in sorted(groups.items())
        if len(rows) > 1
    ]


if __name__ == "__main__":
    main()
