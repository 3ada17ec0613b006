"""The fair benchmark (`make bench`; the protocol is docs/performance.md "The fair protocol"):
every engine measured from the outside, over the same steady-state window, doing the same work.

Why from the outside: an engine's own clock starts where its author chose (kstream at RUNNING,
Kafka Streams at its first record), its CPU counts whatever its life held (a JVM's JIT compiler,
a Python process's imports). Here one harness times them all alike:

- **Input.** One 4-partition topic of `--records` records (default 2,000,000; key `user-<i %
  1000>`, a ~60-byte JSON value, event times over 100 s ending an hour before the run, so no
  changelog is deleted by time retention before it is counted), read by every run under its
  own group.
- **Outputs** go to a fresh topic per run created with `message.timestamp.type=LogAppendTime`:
  each output record carries the moment the broker appended it. After the run a plain
  confluent-kafka read_committed consumer (no kstream code) reads them all.
- **The window** is the steady state between 20% and 80% of the run's outputs by those
  timestamps (start-up, group join, restoration, the JIT's first compilations and the tail are
  outside it).
- **Input processed in the window** comes from the run's committed input offsets (under
  exactly-once: inputs whose outputs are committed), sampled every `SAMPLE_S` from the broker
  and interpolated at the window's ends: records/s = those inputs / the window's seconds.
- **CPU in the window** comes from `/proc` sampled at the same moments: every process of the
  engine, every thread (librdkafka's, the JVM's JIT and GC included); CPU per record and cores
  used divide it by the window's inputs and seconds. The whole-life figure is reported beside.
  For Kafka Streams the compiler threads' part of it (`jit_share`) is reported per run.
- **The same work and settings**: exactly_once_v2 for kstream and Kafka Streams (the raw loop
  and Quix Streams: their transactional mode, one producer per process), a 100 ms commit
  interval everywhere; record caches off, and on (Kafka Streams' 10 MB default, kstream's
  `cache_max_bytes` at the same 10 MB); Kafka Streams with RocksDB and with in-memory stores,
  kstream with lmdb and memory; Kafka Streams' clients given librdkafka's producer batch size
  (1,000,000 bytes) and kstream's fetch wait (100 ms) and batch (10,000 records), its producer
  lingering 100 ms as kstream's exactly_once_v2 producer does; every run's changelog and
  output record counts reported.
- **Kafka Streams warm**: each JVM first runs discarded warm-up apps over the input until a
  pass's JIT compiler share falls under `JIT_QUIET` (at most `WARMUP_PASSES` passes).
- **The raw ceiling**: a confluent-kafka consume -> produce loop in one transaction per 100 ms
  (bench/kstream_pipe.py `--engine raw`), the best a Python process with this client can do.
- **Repeats**: a throwaway raw run first warms the broker; then `--repeats` runs of every row
  in a shuffled order (seeded, printed); medians with their spread (min-max).

- **Latency** (bench/fair_latency.py): after the throughput runs, `--latency-pairs` interleaved
  pairs of the raw loop (the floor: no processing, the same transactions) and kstream P1 fed
  at a fixed rate; kstream's p50 and p99 over the floor's, the median over the pairs with a
  95% bootstrap interval.

Writes the table to stdout and bench/results/fair.txt, every run to bench/results/fair.json.

    python bench/fair.py [--records 2000000] [--repeats 3] [--pipelines P1,P2,P3]
                         [--engines kstream,kafka-streams,raw,quix] [--seed N] [--out PATH]
                         [--latency-pairs 5]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from brokers import TOPIC_CONFIG, BenchBroker, start_broker  # noqa: E402
from confluent_kafka import Consumer, KafkaError, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from fair_latency import PAIRS, latency_pairs, latency_table  # noqa: E402
from kstream_pipe import JIT_QUIET, jit_threads_cpu, stat_cpu_s  # noqa: E402
from run_all import (  # noqa: E402
    PARTITIONS,
    SPAN_MS,
    ensure_quix_python,
    kafka_streams_java,
    produce_input,
)

SAMPLE_S = 0.05
CACHE_BYTES = 10 * 1024 * 1024  # Kafka Streams' default statestore.cache.max.bytes
COMMIT_INTERVAL_MS = 100
# P3's tumbling window: the input's first event time is a multiple of it, as run_all's is
P3_WINDOW_MS = 10_000
WINDOW = (0.2, 0.8)  # the steady state: between these fractions of a run's outputs
WARMUP_PASSES = 8
RUN_TIMEOUT_S = 900.0
# no committed progress for this long once the run has committed anything: stuck, not slow
# (before its first commit a run may still be warming up: Kafka Streams' passes over the input
# take minutes with RocksDB and its cache off; RUN_TIMEOUT_S bounds that)
STALL_S = 60.0
# Kafka Streams' clients, set to what kstream's librdkafka clients run with
KAFKA_STREAMS_CLIENTS = {
    "producer.batch.size": "1000000",  # librdkafka's batch.size default
    "producer.linger.ms": "100",  # kstream's exactly_once_v2 producer: min(100, commit interval)
    "consumer.fetch.max.wait.ms": "100",  # kstream: fetch.wait.max.ms = batch_max_wait (100)
    "consumer.max.poll.records": "10000",  # kstream's batch_max_records
}
ENGINES = ("kstream", "kafka-streams", "raw", "quix")
STORES = {"kstream": ("lmdb", "memory"), "kafka-streams": ("rocksdb", "memory")}


@dataclass(frozen=True)
class Row:
    """One configuration: an engine on a pipeline with a store and its record cache on or off
    (P1 and the raw loop keep no state: one row each, store and cache "-")."""

    engine: str
    pipeline: str
    store: str = "-"
    cache: bool | None = None

    @property
    def name(self) -> str:
        cache = "" if self.cache is None else (" cache on" if self.cache else " cache off")
        store = "" if self.store == "-" else f" {self.store}"
        return f"{self.engine} {self.pipeline}{store}{cache}"


def plan(engines: list[str], pipelines: list[str]) -> list[Row]:
    rows: list[Row] = []
    if "raw" in engines:
        rows.append(Row("raw", "raw"))
    for engine in ("kstream", "kafka-streams"):
        if engine not in engines:
            continue
        for p in pipelines:
            if p == "P1":
                rows.append(Row(engine, "P1"))
                continue
            rows += [Row(engine, p, s, c) for s in STORES[engine] for c in (False, True)]
    if "quix" in engines:
        rows += [Row("quix", p, "rocksdb") for p in pipelines]
    return rows


@dataclass
class Sample:
    t: float  # wall clock (s), the clock of the broker's LogAppendTime
    cpu: float  # the engine's processes, every thread
    jit: float  # the JVM's compiler threads (0 elsewhere)
    broker_cpu: float
    committed: int  # input records whose offsets the run's group committed


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (a Python engine may start helpers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def jit_cpu_s(pid: int) -> float:
    """CPU seconds of a JVM's live JIT compiler threads ("C1/C2 CompilerThread")."""
    return sum(jit_threads_cpu(pid).values())


class Sampler(threading.Thread):
    """Samples a run every SAMPLE_S until halted: its CPU, the broker's, and its group's
    committed input. CPU of a process that ended stays at its last value."""

    def __init__(self, pid: int, broker: BenchBroker, group: str, topic: str, jvm: bool) -> None:
        super().__init__(daemon=True)
        self.pid, self.broker, self.group, self.topic, self.jvm = pid, broker, group, topic, jvm
        # OffsetFetch through a consumer of the group that never subscribes (so never joins
        # it); confluent-kafka 2.16's AdminClient.list_consumer_group_offsets crashed the
        # process (SIGSEGV) on this broker
        self.offsets = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
            }
        )
        self.partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.samples: list[Sample] = []
        self.halt = threading.Event()
        self.cpu_by_pid: dict[int, float] = {}
        self.jit = 0.0

    def committed(self) -> int:
        try:
            got = self.offsets.committed(self.partitions, timeout=5)
        except Exception:  # a slow answer: the last value stands
            return self.samples[-1].committed if self.samples else 0
        return sum(max(0, tp.offset) for tp in got)

    def sample(self) -> Sample:
        for p in process_tree(self.pid):
            cpu = stat_cpu_s(f"/proc/{p}/stat")
            if cpu is not None:
                self.cpu_by_pid[p] = cpu
        if self.jvm:
            self.jit = max(self.jit, jit_cpu_s(self.pid))
        broker = stat_cpu_s(f"/proc/{self.broker.pid}/stat") if self.broker.pid else None
        s = Sample(
            time.time(),
            sum(self.cpu_by_pid.values()),
            self.jit,
            broker or 0.0,
            self.committed(),
        )
        self.samples.append(s)
        return s

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                began = time.monotonic()
                self.sample()
                self.halt.wait(max(0.0, SAMPLE_S - (time.monotonic() - began)))
        finally:
            self.offsets.close()


def at(samples: list[Sample], t: float, attr: str) -> float:
    """`attr` at wall time `t`, linearly interpolated between the samples around it."""
    times = [s.t for s in samples]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return float(getattr(samples[0], attr))
    if i >= len(samples):
        return float(getattr(samples[-1], attr))
    a, b = samples[i - 1], samples[i]
    va, vb = float(getattr(a, attr)), float(getattr(b, attr))
    return va + (vb - va) * (t - a.t) / (b.t - a.t) if b.t > a.t else vb


def read_topic(bs: str, topic: str, want_times: bool) -> tuple[int, list[int]]:
    """Every committed record of `topic` (a plain read_committed consumer, to each partition's
    end): the count and, with `want_times`, their timestamps (ms)."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"fair-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # offset 0 gone (deleted by retention) is an error, not a silent jump to the end
            "auto.offset.reset": "error",
        }
    )
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(meta.partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        left, count, times = set(parts), 0, []
        deadline = time.monotonic() + 300
        while left and time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        left.discard(m.partition())
                        continue
                    raise RuntimeError(f"reading {topic}: {err}")
                count += 1
                if want_times:
                    times.append(m.timestamp()[1])
        if left:
            raise RuntimeError(f"reading {topic}: partitions {sorted(left)} not read to the end")
        return count, times
    finally:
        c.close()


@dataclass
class Result:
    row: str
    repeat: int
    records_per_s: float
    cpu_us_per_record: float
    cores: float
    window_s: float
    window_records: float
    outputs: int
    changelog_records: int
    cpu_s_whole_life: float
    broker_cores: float
    jit_share: float | None = None
    warmup: dict[str, Any] = field(default_factory=dict)


def command(row: Row, bs: str, topic: str, out: str, group: str, state: str, n: int) -> list[str]:
    pipe = os.path.join(HERE, "kstream_pipe.py")
    common = ["--bootstrap", bs, "--topic", topic, "--out", out, "--group", group]
    if row.engine == "raw":
        return [sys.executable, pipe, "--engine", "raw", "--guarantee", "exactly_once",
                "--commit-interval", str(COMMIT_INTERVAL_MS), *common]  # fmt: skip
    if row.engine == "kstream":
        store = row.store if row.store != "-" else "memory"
        return [sys.executable, pipe, "--engine", "kstream", "--pipeline", row.pipeline,
                "--guarantee", "exactly_once_v2", "--backend", store, "--state-dir", state,
                "--commit-interval", str(COMMIT_INTERVAL_MS),
                "--cache-bytes", str(CACHE_BYTES if row.cache else 0), *common]  # fmt: skip
    if row.engine == "quix":
        quix = ensure_quix_python(os.environ.get("QUIX_PYTHON"))
        return [quix, os.path.join(HERE, "quix_pipe.py"), "--pipeline", row.pipeline,
                "--guarantee", "exactly_once", "--state-dir", state, *common]  # fmt: skip
    java = kafka_streams_java("kafka")
    args = {
        "pipeline": row.pipeline,
        "bootstrap": bs,
        "topic": topic,
        "out": out,
        "group": group,
        "state-dir": state,
        "ready-file": os.path.join(state, "ready"),
        "guarantee": "exactly_once_v2",
        "commit-interval": str(COMMIT_INTERVAL_MS),
        "cache-bytes": str(CACHE_BYTES if row.cache else 0),
        "store": "memory" if row.store == "memory" else "rocksdb",
        "warmup-records": str(n),
        "warmup-quiet": str(JIT_QUIET),
        "warmup-passes": str(WARMUP_PASSES),
        **KAFKA_STREAMS_CLIENTS,
    }
    return [*java, *(f"--{k}={v}" for k, v in args.items())]


def recent_base_ts(now_ms: int | None = None) -> int:
    """The input's first event time: an hour before now, on a P3 window's edge.

    Not run_all's fixed 2023 time: a windowed store's changelog is `compact,delete` with a
    retention of its window's retention plus a day, and the broker's log cleaner deletes
    segments whose records are older than that (for `compact,delete` topics it does so on its
    own schedule, every `log.cleaner.backoff.ms`). With 2023 event times P3's changelogs were
    gone before they were counted (0 records for Kafka Streams, ~250 for kstream)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start = now - 3_600_000 - SPAN_MS
    return start - start % P3_WINDOW_MS


def changelog_records(bs: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bs})
    topics = admin.list_topics(timeout=10).topics
    # the run's own changelogs, not those of Kafka Streams' discarded warm-up apps
    # (`<group>-warmup-<pass>-...`)
    names = [
        t
        for t in topics
        if t.startswith(group + "-")
        and t.endswith("-changelog")
        and not t.startswith(group + "-warmup")
    ]
    return sum(read_topic(bs, t, want_times=False)[0] for t in names)


def run_row(row: Row, repeat: int, broker: BenchBroker, topic: str, n: int) -> Result:
    bs = broker.bootstrap_servers
    tag = uuid.uuid4().hex[:8]
    group, out = f"fair-{tag}", f"fair-out-{tag}"
    admin = AdminClient({"bootstrap.servers": bs})
    spec = {**TOPIC_CONFIG, "message.timestamp.type": "LogAppendTime"}
    admin.create_topics([NewTopic(out, PARTITIONS, 1, config=spec)])[out].result(30)
    state = tempfile.mkdtemp(prefix=f"fair-{tag}-")
    cmd = command(row, bs, topic, out, group, state, n)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid, broker, group, topic, jvm=row.engine == "kafka-streams")
    sampler.start()
    began = time.monotonic()
    last_progress, last_committed = began, -1
    try:
        while proc.poll() is None and time.monotonic() - began < RUN_TIMEOUT_S:
            time.sleep(0.2)
            done = sampler.samples[-1].committed if sampler.samples else 0
            if done >= n:
                break
            if done != last_committed:
                last_progress, last_committed = time.monotonic(), done
            elif done > 0 and time.monotonic() - last_progress > STALL_S:
                break
    finally:
        sampler.halt.set()
        sampler.join()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        shutil.rmtree(state, ignore_errors=True)
    samples = sampler.samples
    if not samples or samples[-1].committed < n:
        got = samples[-1].committed if samples else 0
        raise RuntimeError(
            f"{row.name}: {got} of {n} inputs committed (rc={proc.returncode})\n{stderr[-3000:]}"
        )
    outputs, times = read_topic(bs, out, want_times=True)
    times.sort()
    t0 = times[int(WINDOW[0] * (len(times) - 1))] / 1000
    t1 = times[int(WINDOW[1] * (len(times) - 1))] / 1000
    span = t1 - t0
    inputs = at(samples, t1, "committed") - at(samples, t0, "committed")
    cpu = at(samples, t1, "cpu") - at(samples, t0, "cpu")
    if span <= 0 or inputs <= 0:
        raise RuntimeError(f"{row.name}: an empty window ({span:.3f} s, {inputs:.0f} inputs)")
    jit = at(samples, t1, "jit") - at(samples, t0, "jit") if sampler.jvm else None
    report = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    warmup: dict[str, Any] = {}
    if report and row.engine == "kafka-streams":
        r = json.loads(report[-1])
        warmup = {"passes_jit_share": r.get("warmup_passes"), "cpu_s": r.get("jvm_warmup_cpu_s")}
    broker_cpu = at(samples, t1, "broker_cpu") - at(samples, t0, "broker_cpu")
    return Result(
        row=row.name,
        repeat=repeat,
        records_per_s=inputs / span,
        cpu_us_per_record=cpu / inputs * 1e6,
        cores=cpu / span,
        window_s=span,
        window_records=inputs,
        outputs=outputs,
        changelog_records=changelog_records(bs, group),
        cpu_s_whole_life=samples[-1].cpu,
        broker_cores=broker_cpu / span,
        jit_share=(jit / cpu if cpu > 0 else 0.0) if jit is not None else None,
        warmup=warmup,
    )


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rows: list[Row], results: list[Result]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        mine = [r for r in results if r.row == row.name]
        if not mine:
            continue
        jit = [r.jit_share for r in mine if r.jit_share is not None]
        out.append(
            {
                "row": row.name,
                **{k: v for k, v in asdict(row).items()},
                "runs": len(mine),
                "records_per_s": spread([r.records_per_s for r in mine]),
                "cpu_us_per_record": spread([r.cpu_us_per_record for r in mine]),
                "cores": spread([r.cores for r in mine]),
                "window_s": spread([r.window_s for r in mine]),
                "outputs": spread([float(r.outputs) for r in mine]),
                "changelog_records": spread([float(r.changelog_records) for r in mine]),
                "jit_share": spread(jit) if jit else None,
            }
        )
    return out


def pairs(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kstream against Kafka Streams (records/s and CPU per record, like store against like:
    lmdb with RocksDB, memory with memory) and against the raw ceiling, row by row."""
    by = {s["row"]: s for s in summary}
    raw = by.get("raw raw")
    out = []
    for s in summary:
        if s["engine"] != "kstream":
            continue
        peer_store = {"lmdb": "rocksdb", "memory": "memory", "-": "-"}[s["store"]]
        peer = by.get(Row("kafka-streams", s["pipeline"], peer_store, s["cache"]).name)
        med = s["records_per_s"]["median"]
        out.append(
            {
                "row": s["row"],
                "vs_kafka_streams_records_per_s": (
                    med / peer["records_per_s"]["median"] if peer else None
                ),
                "vs_kafka_streams_cpu_per_record": (
                    s["cpu_us_per_record"]["median"] / peer["cpu_us_per_record"]["median"]
                    if peer
                    else None
                ),
                "vs_raw_ceiling": med / raw["records_per_s"]["median"] if raw else None,
            }
        )
    return out


def table(summary: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> str:
    def f(x: dict[str, float] | None, fmt: str) -> str:
        if x is None:
            return "-"
        return f"{x['median']:{fmt}} ({x['min']:{fmt}}-{x['max']:{fmt}})"

    lines = [
        "| row | runs | records/s (min-max) | CPU us/record | cores | outputs | changelog | "
        "JIT share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        lines.append(
            f"| {s['row']} | {s['runs']} | {f(s['records_per_s'], ',.0f')} | "
            f"{f(s['cpu_us_per_record'], '.2f')} | {s['cores']['median']:.2f} | "
            f"{s['outputs']['median']:,.0f} | {s['changelog_records']['median']:,.0f} | "
            f"{f(s['jit_share'], '.3f')} |"
        )
    lines += ["", "| kstream row | records/s vs Kafka Streams | CPU/record vs Kafka Streams | "
              "vs raw ceiling |", "|---|---|---|---|"]  # fmt: skip
    for r in ratios:
        cells = [
            "-" if r[k] is None else f"{r[k]:.2f}x"
            for k in (
                "vs_kafka_streams_records_per_s",
                "vs_kafka_streams_cpu_per_record",
                "vs_raw_ceiling",
            )
        ]
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pipelines", default="P1,P2,P3")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--seed", type=int, default=None, help="the run order's shuffle seed")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fair.json"))
    ap.add_argument(
        "--latency-pairs",
        type=int,
        default=PAIRS,
        help="interleaved floor/kstream latency pairs after the throughput runs (0: none)",
    )
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise SystemExit(f"--engines: unknown {sorted(unknown)}; expected some of {ENGINES}")
    rows = plan(engines, [p for p in args.pipelines.split(",") if p])
    if "kafka-streams" in engines:
        kafka_streams_java("kafka")  # not built: say so before the input is written
    if "quix" in engines:
        ensure_quix_python(os.environ.get("QUIX_PYTHON"))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    order = [(row, k) for row in rows for k in range(1, args.repeats + 1)]
    random.Random(seed).shuffle(order)
    began = time.monotonic()
    results: list[Result] = []
    with start_broker("kafka") as broker:
        topic = f"fair-in-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=TOPIC_CONFIG)])[topic].result(30)
        print(f"producing {args.records:,} records into {topic} ...", flush=True)
        produce_input(broker.bootstrap_servers, topic, args.records, recent_base_ts())
        print(f"seed {seed}; a throwaway raw run warms the broker, then {len(order)} runs",
              flush=True)  # fmt: skip
        run_row(Row("raw", "raw"), 0, broker, topic, args.records)
        for i, (row, k) in enumerate(order, 1):
            r = run_row(row, k, broker, topic, args.records)
            results.append(r)
            jit = "" if r.jit_share is None else f", JIT {r.jit_share:.1%}"
            print(
                f"[{i}/{len(order)} {(time.monotonic() - began) / 60:.1f} min] {row.name} #{k}: "
                f"{r.records_per_s:,.0f} records/s, {r.cpu_us_per_record:.2f} us/record, "
                f"{r.cores:.2f} cores over {r.window_s:.1f} s{jit}",
                flush=True,
            )
        latency: dict[str, Any] | None = None
        if args.latency_pairs > 0:
            try:
                latency = latency_pairs(broker, args.latency_pairs, seed)
            except Exception as e:  # the throughput runs above are kept, the failure stated
                latency = {"error": f"{type(e).__name__}: {e}"}
        version = broker.name
    summary = summarise(rows, results)
    ratios = pairs(summary)
    text = table(summary, ratios)
    if latency is not None:
        text += "\n\n" + (
            f"Latency: failed ({latency['error']})"
            if "error" in latency
            else latency_table(latency)
        )
    doc = {
        "protocol": "bench/fair.py (docs/performance.md, The fair protocol)",
        "broker": version,
        "records": args.records,
        "repeats": args.repeats,
        "seed": seed,
        "seconds": round(time.monotonic() - began, 1),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "java": java_version() if "kafka-streams" in engines else None,
        "kafka_streams_clients": KAFKA_STREAMS_CLIENTS,
        "rows": summary,
        "ratios": ratios,
        "runs": [asdict(r) for r in results],
        "latency": latency,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(os.path.splitext(args.out)[0] + ".txt", "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"{len(results)} runs in {(time.monotonic() - began) / 60:.1f} min; {args.out}")
    return 0


def java_version() -> str:
    java = kafka_streams_java("kafka")[0]
    done = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    return (done.stderr or done.stdout).strip().splitlines()[0] + " (default JVM flags)"


if __name__ == "__main__":
    sys.exit(main())
