"""The benchmark behind `make bench`: kstream beside the raw pipe, Quix Streams and Kafka Streams.

Starts the broker (`--broker kafka`, the default: one Apache Kafka KRaft node with the
benchmark JVM flags, see bench/brokers.py; `--broker tansu`: the embedded Tansu), produces N
records (key `user-<i % 1000>`, a ~60-byte JSON value with `user`, `amount` and `kind`, event
times spread over 100 s) into a 4-partition topic, then runs, `--repeats` times each (medians
reported, the repeats interleaved so that noise hits every configuration alike):

- the ceiling: a raw confluent-kafka consume -> produce loop, plain and transactional;
- kstream P1 (filter + map + to), P2 (running count per key), P3 (tumbling 10 s windowed sum
  per key), at_least_once, exactly_once and exactly_once_v2, memory and lmdb backends, with the
  `broker_compat` the broker needs ("none" on Kafka, "tansu" on Tansu);
- on Kafka, kstream P1 and P3 under exactly_once_v2 on lmdb once more with
  `broker_compat="tansu"` (Tansu's compensations on a broker that does not need them), each
  beside its "none" row: what the compensations cost per record;
- Quix Streams on P1-P3 under the same guarantees (in its own virtualenv, see `--quix-python`);
- on Kafka, Kafka Streams (Java, tools/kafka-streams-bench, built by `make bench`) on P1-P3
  under exactly_once_v2: the same DSL pipelines, RocksDB stores, record caching off (kstream
  forwards every update, and P2/P3 runs end when every update is readable), kstream's commit
  interval (100 ms); one JVM per run, its CPU from the JVM itself (every thread: JIT compiler
  and GC included). Each JVM first runs half the input through a discarded app of its own
  (`--kafka-streams-warmup`), so that the measured app runs on compiled code as a long-lived
  one would; that warm-up's CPU and the JVM's start are reported apart (the row's
  `jvm.warmup_cpu_s`), and the JIT compiler's CPU during the measured run stays in the row
  (`jvm.thread_cpu_s.jit`). `kafka_streams_ratios` sets kstream's exactly_once_v2 lmdb rows against
  them (issue 35's goals: P1 throughput >= 0.8x, CPU per record <= 2x for P1, <= 3x for P3);
- end-to-end latency (p50/p99) of kstream P1 under exactly_once and exactly_once_v2 at a fixed
  input rate, beside the raw transactional loop and the broker's own floor (one plain hop, one
  transactional hop; a pipeline's floor is their sum, and `latency_floor` gives each path's
  p99 over it). Each run's first `WARMUP_S` seconds of input are a warm-up whose p99 is
  reported apart. On Kafka every latency run shares the benchmark's broker (warmed up by the
  throughput runs); on Tansu each gets a fresh one (its fetches slow down as it fills).

Every run is a subprocess (CPU seconds and peak RSS from its `getrusage`; Kafka Streams' JVM
reads its own), timed from its first record (kstream: the app is RUNNING, i.e. partitions
assigned and stores restored; raw, Quix and Kafka Streams: the first record consumed) to the
moment its last output record is readable by a read_committed consumer. Group-join start-up
is excluded for every engine.

Every row reports CPU microseconds per record beside records/s: the measured process's CPU time
(user + sys, all its threads, the client library's included, start-up included; one process
per run) divided by the input records; `startup_cpu_s` is the part spent before the first
record, and `steady_cpu_us_per_record` the CPU after it per record (a fresh JVM compiles its
hot paths during the run too: that stays in both figures). Every row's `config` names the
broker and kstream's `broker_compat` ("-" for the raw pipe, Quix Streams and Kafka Streams).

`--quick` (the default, `make bench`, a few minutes): the raw pipe, kstream P1-P3 under
at_least_once, exactly_once and exactly_once_v2 on lmdb (and the broker_compat pair), twice
each; Quix Streams under exactly_once and Kafka Streams once each; 5 s latency runs
(the broker's floor: a plain and a transactional hop; the raw loop; kstream exactly_once and
exactly_once_v2). `--full` (`make bench-full`): every configuration 3 times, 10 s latency
runs, a transactional hop whose transactions also commit group offsets, and the plain hop and
kstream again with the upstream producer lingering 50 ms.

`--processes 1,2` runs each kstream row once per worker-process count (the row's `processes`):
N processes of one app as `kstreamd run --processes N` starts them, timed from the first one's
first record, CPU and RSS summed over them; `settled_records_per_s` is the rate from the moment
the last of them was RUNNING, after the start-up rebalances.

Prints a table and the total wall time, and writes bench/results/latest.json.

    python bench/run_all.py [--quick | --full] [--broker kafka|tansu] [--records 200000]
                            [--repeats N] [--no-quix] [--no-compat] [--processes 1,2]
                            [--only raw,kstream,quix,kafka-streams,latency]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from brokers import (  # noqa: E402
    TOPIC_CONFIG,
    BenchBroker,
    add_broker_argument,
    start_broker,
)
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition  # noqa: E402
from confluent_kafka import Consumer as RawConsumer  # noqa: E402
from confluent_kafka import Producer as RawProducer  # noqa: E402
from kstream_pipe import cpu_s, py_spy, stat_cpu_s  # noqa: E402

from kstream.kafka.admin import Admin  # noqa: E402
from kstream.state import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PARTITIONS = 4
KEYS = 1000
SPAN_MS = 100_000
BASE_TS = 1_700_000_000_000
KINDS = ("purchase", "purchase", "purchase", "view", "view", "view", "view", "cart", "cart")
# the input's and the outputs' topic settings (see bench/brokers.py)
INPUT_CONFIG = TOPIC_CONFIG
PIPELINES = ("P1", "P2", "P3")
GUARANTEES = ("at_least_once", "exactly_once")
# kstream also runs exactly_once_v2 (one transactional producer per stream thread); its ratios
# are taken against the transactional ceiling and Quix Streams' exactly_once
V2 = "exactly_once_v2"
BACKENDS = ("memory", "lmdb")
# on Kafka, these rows run under both broker_compat values, side by side
COMPAT_ROWS = (("P1", V2, "lmdb"), ("P3", V2, "lmdb"))
NO_COMPAT = "-"  # the rows of engines other than kstream
# the throughput runs' commit interval, kstream's (its default) and Kafka Streams' alike
KSTREAM_COMMIT_INTERVAL_MS = 100
KAFKA_STREAMS = "kafka-streams"
STREAMS_BENCH = os.path.join(ROOT, "tools", "kafka-streams-bench")
# kstream's exactly_once_v2 rows over Kafka Streams' (issue 35): kstream's P1 records/s at least
# 0.8x, its CPU per record at most 2x on P1 and 3x on P3
KAFKA_STREAMS_GOALS: dict[str, float] = {
    "P1_throughput_min": 0.8,
    "P1_cpu_max": 2.0,
    "P3_cpu_max": 3.0,
}


def value_of(i: int) -> tuple[bytes, bool]:
    refund = i % 10 == 9
    kind = "refund" if refund else KINDS[i % 9]
    amount = (i * 7919) % 100_000 / 100
    v = b'{"user":"user-%d","amount":%.2f,"kind":"%s"}' % (i % KEYS, amount, kind.encode())
    return v, refund


def produce_input(bs: str, topic: str, n: int, base_ts: int = BASE_TS) -> int:
    """Produce the input, event times from `base_ts` over `SPAN_MS`; returns how many records
    P1 keeps (the non-refunds).

    Idempotent, so that each partition holds its records in the order produced (event time
    ascending): a plain producer's retries reorder batches, and a fresh Kafka topic's first
    produce requests can be retried while its leadership spreads (a few thousand records of
    20,000 then came after later ones, too late for P3's windows, which have no grace)."""
    p = RawProducer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 20,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
        }
    )
    kept = 0
    for i in range(n):
        v, refund = value_of(i)
        kept += not refund
        ts = base_ts + i * SPAN_MS // n
        while True:
            try:
                p.produce(topic, v, b"user-%d" % (i % KEYS), timestamp=ts)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)
    return kept


def process_cpu_s(pid: int | None) -> float:
    """Another process's CPU seconds (user + sys); 0 where there is none."""
    return (stat_cpu_s(f"/proc/{pid}/stat") if pid is not None else None) or 0.0


class Watcher(threading.Thread):
    """Reads an output topic (read_committed) and notes when its last expected record arrived
    and how late each record came (the latency runs).

    Reading the records costs this process about 0.55 us of CPU per record (the client's
    fetch and message objects; more with the loop), and the broker its fetches: on a machine
    the measured processes share, that is load beside theirs, so each row notes it
    (`broker_cpu_s`, `harness_cpu_s`). Offsets cannot replace the reading: under exactly-once
    every transaction's commit marker takes an offset of each partition it wrote (and Tansu's
    stable offsets from ListOffsets lagged seconds behind a read_committed reader anyway).
    It counts every record: on Kafka a read_committed reader gets each committed output once.
    """

    SAMPLE_S = 0.02

    def __init__(
        self,
        bs: str,
        topic: str,
        expected: int,
        latency: bool = False,
        broker_pid: int | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.broker_pid = broker_pid
        # (time.monotonic(), the broker's CPU seconds, this process's) every SAMPLE_S: what
        # the rest of the machine spent while the measured processes ran
        self.cpu: list[tuple[float, float, float]] = []
        self.expected = expected
        self.latency = latency
        self.seen = 0
        self.last = 0.0
        self.latencies_ms: list[float] = []
        # (time.monotonic(), outputs seen so far) after every read that found some
        self.progress: list[tuple[float, int]] = []
        self.halt = threading.Event()
        self.c = RawConsumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"watch-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 5,
            }
        )
        self.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

    def run(self) -> None:
        try:
            while not self.halt.is_set() and self.seen < self.expected:
                # consume() returns when it has `num` records or at the timeout: keep the
                # timeout short when measuring latency
                msgs = self.c.consume(10_000, 0.001 if self.latency else 0.05)
                now = time.monotonic()
                if not self.cpu or now - self.cpu[-1][0] >= self.SAMPLE_S:
                    self.cpu.append((now, process_cpu_s(self.broker_pid), cpu_s()))
                wall = time.time() * 1000
                got = 0
                for m in msgs:
                    if m.error() is None:
                        got += 1
                        if self.latency:
                            self.latencies_ms.append(wall - m.timestamp()[1])
                if got:
                    self.seen += got
                    self.last = now
                    self.progress.append((now, self.seen))
        finally:
            self.c.close()

    def wait_seen(self, n: int, timeout_s: float) -> None:
        """Block until `n` outputs have been read (the end of a latency run's warm-up)."""
        end = time.monotonic() + timeout_s
        while self.seen < n:
            if not self.is_alive() or time.monotonic() > end:
                raise RuntimeError(f"latency run: {self.seen} of {n} warm-up outputs arrived")
            time.sleep(0.01)

    def cpu_between(self, start: float, end: float) -> tuple[float, float] | None:
        """The broker's and this process's CPU seconds from `start` to `end` (monotonic)."""
        at_start = [c for c in self.cpu if c[0] <= start] or self.cpu[:1]
        at_end = [c for c in self.cpu if c[0] <= end]
        if not at_start or not at_end:
            return None
        return at_end[-1][1] - at_start[-1][1], at_end[-1][2] - at_start[-1][2]


def run_many(
    cmds: list[list[str]],
    bs: str,
    out: str,
    expected: int,
    timeout_s: float = 300.0,
    stall_s: float = 60.0,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """Run the processes of one benchmark side by side (the worker processes of one app, or
    a single process) against an output topic; returns their measurements together: timed
    from the first process's first record, CPU and peak RSS summed over the processes."""
    Admin(bs).create_topic(out, PARTITIONS, TOPIC_CONFIG)
    w = Watcher(bs, out, expected, broker_pid=broker_pid)
    w.start()
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd in cmds
    ]
    what = " ".join(cmds[0][1:4]) + (f" x{len(cmds)}" if len(cmds) > 1 else "")
    started = time.monotonic()
    deadline = started + timeout_s
    done: list[tuple[str, str]] = []
    try:
        while w.is_alive() and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            w.join(0.1)
            if time.monotonic() - max(w.last, started) > stall_s:
                break  # no output for stall_s: stuck, not slow
    finally:
        w.halt.set()
        w.join()
        stacks = ""
        for proc in procs:
            if proc.poll() is None:
                if w.seen < expected:
                    stacks += dump_stacks(proc.pid)
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                done.append(proc.communicate(timeout=60))
            except subprocess.TimeoutExpired:
                stacks += dump_stacks(proc.pid)
                proc.kill()
                _, stderr = proc.communicate()
                raise RuntimeError(
                    f"{what}: did not stop within 60 s of SIGTERM\n{stderr[-3000:]}\n{stacks}"
                ) from None
    stderr = "\n".join(err[-3000:] for _, err in done)
    if w.seen < expected:
        codes = [p.returncode for p in procs]
        raise RuntimeError(
            f"{what}: {w.seen} of {expected} outputs (rc={codes}, "
            f"last output {time.monotonic() - max(w.last, started):.0f}s before the end)\n"
            f"{visible_counts(bs, out)}\n{stderr}\n{stacks}"
        )
    results: list[dict[str, Any]] = []
    for (stdout, err), proc in zip(done, procs, strict=True):
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"no result from {what}: rc={proc.returncode}\n{err[-3000:]}")
        results.append(json.loads(lines[-1]))
    res: dict[str, Any] = dict(results[0])
    if len(results) > 1:
        res["first"] = min(r["first"] for r in results)
        for key in ("cpu_s", "peak_rss_bytes"):
            res[key] = sum(r[key] for r in results)
        startups = [r.get("startup_cpu_s") for r in results]
        res["startup_cpu_s"] = None if None in startups else sum(x or 0.0 for x in startups)
        threads: dict[str, float] = {}
        for r in results:
            for k, v in (r.get("thread_cpu_s") or {}).items():
                threads[k] = threads.get(k, 0.0) + v
        res["thread_cpu_s"] = threads
        # From the moment the last process was RUNNING (every one had joined the group and
        # restored its stores) to the end: the rate once the start-up rebalances are over.
        settled = max(r["first"] for r in results)
        before = max((n for t, n in w.progress if t <= settled), default=0)
        if w.last > settled and expected > before:
            res["settled_records_per_s"] = (expected - before) / (w.last - settled)
    res["processes"] = len(results)
    res["seconds"] = w.last - res["first"]
    others = w.cpu_between(res["first"], w.last)
    if others is not None:
        res["broker_cpu_s"], res["harness_cpu_s"] = others
    return res


def visible_counts(bs: str, topic: str) -> str:
    """What a read_committed reader misses of what a read_uncommitted one gets, per partition:
    tells outputs that never arrived from outputs held back or hidden by the broker."""
    got: dict[str, dict[tuple[int, int], str]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        c = RawConsumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"diag-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": True,
            }
        )
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen: dict[tuple[int, int], str] = {}
        eof: set[int] = set()
        deadline = time.monotonic() + 20
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.2):
                if m.error() is None:
                    src = provenance.from_headers(m.headers())
                    seen[(m.partition(), m.offset())] = f"{src.partition}" if src else "-"
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
        c.close()
        got[isolation] = seen
    lines = []
    for p in range(PARTITIONS):
        missing = sorted(
            o for q, o in got["read_uncommitted"] if q == p and (q, o) not in got["read_committed"]
        )
        if missing:
            srcs = sorted({got["read_uncommitted"][(p, o)] for o in missing})
            lines.append(
                f"partition {p}: {len(missing)} hidden from read_committed, offsets "
                f"{missing[0]}..{missing[-1]}, written by the tasks of source partitions {srcs}"
            )
    counts = {k: len(v) for k, v in got.items()}
    return f"records seen: {counts}\n" + "\n".join(lines)


def dump_stacks(pid: int) -> str:
    """The threads' stacks of a run that stopped short (py-spy, when installed)."""
    spy = py_spy()
    if spy is None:
        return ""
    try:
        done = subprocess.run(
            [spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"py-spy dump failed: {e}"
    return done.stdout[-6000:] + done.stderr[-1000:]


def ensure_quix_python(path: str | None) -> str:
    """The interpreter of a virtualenv with Quix Streams (created on first use); raises
    RuntimeError saying why when it cannot be set up."""
    if path:
        return path
    venv = os.path.join(HERE, ".venv-quix")
    py = os.path.join(venv, "bin", "python")
    ok = os.path.join(venv, ".installed")
    if not os.path.exists(ok):
        print(f"creating {os.path.relpath(venv, ROOT)} with quixstreams ...", flush=True)
        for cmd in (
            [sys.executable, "-m", "venv", venv],
            [py, "-m", "pip", "install", "-q", "quixstreams>=3"],
        ):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(cmd)} failed (exit {done.returncode}): "
                    f"{(done.stdout + done.stderr)[-2000:]}"
                )
        with open(ok, "w") as f:
            f.write("quixstreams\n")
    return py


LATENCY_KNOBS: dict[str, Any] = {"batch_max_wait": 5, "commit_interval": 20}
LATENCY_KAFKA: dict[str, Any] = {}
# Every latency run (the broker hops, the raw loop, kstream) first sends WARMUP_S seconds of
# records at its rate and waits for all of their outputs; only what follows is in p50/p99, and
# the warm-up's own p99 is reported apart (`warmup_p99_ms`). On Apache Kafka the first second
# or two on fresh topics carry a tail of 0.6-1.1 s for the raw consume-transform-produce loop
# and kstream alike (first fetches, producer ids, partitions' first transactions), which a
# steady state never sees again; measured apart, start-up and steady latency both stay visible.
WARMUP_S = 2.0
INPUT_LINGER_MS = 50  # the full run's second latency input (see latency_runs)


def latency_run(
    broker: BenchBroker,
    rate: int,
    seconds: float,
    state_dir: str,
    guarantee: str = "exactly_once",
    knobs: dict[str, Any] = LATENCY_KNOBS,
    kafka: dict[str, Any] = LATENCY_KAFKA,
    engine: str = "kstream",
    input_linger_ms: int | None = None,
    pipe: str | None = None,
) -> dict[str, Any]:
    """kstream P1 fed at `rate` records/s; end-to-end latency percentiles. `input_linger_ms`:
    the upstream producer's linger.ms (None: librdkafka's default, 5 ms). `pipe`: another
    `kstream_pipe.py` to run (another tree's, to compare loops side by side)."""
    bs = broker.bootstrap_servers
    compat = broker.compat if engine == "kstream" else NO_COMPAT
    src, out = f"lat-in-{uuid.uuid4().hex[:6]}", f"lat-out-{uuid.uuid4().hex[:6]}"
    admin = Admin(bs)
    admin.create_topic(src, PARTITIONS, INPUT_CONFIG)
    admin.create_topic(out, PARTITIONS)
    ready = os.path.join(state_dir, f"ready-{uuid.uuid4().hex[:6]}")
    n, warm = int(rate * seconds), int(rate * WARMUP_S)

    def outputs(first: int, count: int) -> int:
        if engine != "kstream":
            return count
        return sum(1 for i in range(first, first + count) if not value_of(i)[1])

    warm_expected = outputs(0, warm)
    cmd = [
        sys.executable,
        pipe or os.path.join(HERE, "kstream_pipe.py"),
        f"--engine={engine}",
        "--pipeline=P1" if engine == "kstream" else "--pipeline=raw",
        f"--guarantee={guarantee}",
        f"--bootstrap={bs}",
        f"--topic={src}",
        f"--out={out}",
        f"--state-dir={state_dir}",
        f"--ready-file={ready}",
        f"--batch-max-wait={knobs['batch_max_wait']}",
        f"--commit-interval={knobs['commit_interval']}",
        f"--kafka={json.dumps(kafka)}",
        f"--broker={broker.kind}",
    ]
    if compat != NO_COMPAT:
        cmd.append(f"--broker-compat={compat}")
    w = Watcher(bs, out, warm_expected + outputs(warm, n), latency=True)
    w.start()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t_end = time.monotonic() + 120
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > t_end:
                raise RuntimeError(f"latency app did not start: {proc.communicate()[1][-3000:]}")
            time.sleep(0.05)
        time.sleep(0.5)
        # librdkafka's default linger (5 ms), as an upstream service would produce
        p = RawProducer(input_producer_config(bs, input_linger_ms))
        produce_at_rate(p, src, rate, warm)
        w.wait_seen(warm_expected, 60)
        produce_at_rate(p, src, rate, n, first=warm)
        w.join(60)
    finally:
        w.halt.set()
        w.join()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    return {
        "engine": engine,
        "pipeline": "P1" if engine == "kstream" else "raw",
        "guarantee": guarantee,
        "backend": "memory",
        "rate_per_s": rate,
        "records": n,
        **percentiles(w.latencies_ms[warm_expected:]),
        "warmup_p99_ms": percentiles(w.latencies_ms[:warm_expected])["p99_ms"],
        "config": {
            "broker": broker.name,
            "broker_compat": compat,
            **knobs,
            "kafka": kafka,
            "input_linger_ms": input_linger_ms,
        },
    }


def input_producer_config(bs: str, linger_ms: int | None) -> dict[str, Any]:
    """The upstream producer of a latency run: librdkafka's defaults, or `linger_ms`."""
    conf: dict[str, Any] = {"bootstrap.servers": bs, "partitioner": "murmur2_random"}
    if linger_ms is not None:
        conf["linger.ms"] = linger_ms
    return conf


def produce_at_rate(
    p: RawProducer,
    topic: str,
    rate: int,
    n: int,
    commit_every_s: float | None = None,
    offsets: Callable[[int], tuple[list[TopicPartition], Any]] | None = None,
    first: int = 0,
) -> None:
    """Produce input records `first` to `first + n - 1` at `rate` records/s, each stamped with
    the wall clock when it was handed to the client. With `commit_every_s` the producer is
    transactional and commits that often; with `offsets` each transaction also carries
    `offsets(records so far)` (group offsets and the group's metadata), as a consume -> produce
    pipeline's transactions do."""
    tick = 0.002
    per_tick = max(1, round(rate * tick))
    start = last_commit = time.monotonic()
    if commit_every_s is not None:
        p.begin_transaction()
    i, n = first, first + n
    while i < n:
        for _ in range(min(per_tick, n - i)):
            v, _refund = value_of(i)
            p.produce(topic, v, b"user-%d" % (i % KEYS), timestamp=int(time.time() * 1000))
            i += 1
        p.poll(0)
        if commit_every_s is not None and time.monotonic() - last_commit >= commit_every_s:
            if offsets is not None:
                p.send_offsets_to_transaction(*offsets(i))
            p.commit_transaction()
            p.begin_transaction()
            last_commit = time.monotonic()
        delay = start + ((i - first) / rate) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    if commit_every_s is not None:
        p.commit_transaction()
    p.flush(30)


def percentiles(latencies_ms: list[float]) -> dict[str, Any]:
    """p50/p99/max of one run's measured outputs (its warm-up is measured apart)."""
    if not latencies_ms:
        raise RuntimeError("latency run: no outputs")
    steady = sorted(latencies_ms)
    # the p99 of each fifth of the run, in arrival order: whether the tail is a stall, a
    # constant, or (on the test broker, for paths that commit consumer offsets) a growth
    fifth = max(1, len(latencies_ms) // 5)
    parts = [sorted(latencies_ms[i : i + fifth]) for i in range(0, fifth * 5, fifth)]
    return {
        "outputs": len(latencies_ms),
        "p50_ms": round(steady[len(steady) // 2], 2),
        "p99_ms": round(steady[min(len(steady) - 1, int(len(steady) * 0.99))], 2),
        "max_ms": round(steady[-1], 2),
        "p99_ms_by_fifth": [round(p[min(len(p) - 1, int(len(p) * 0.99))], 1) for p in parts if p],
    }


def hop_latency_run(
    broker: BenchBroker,
    rate: int,
    seconds: float,
    commit_interval_ms: int | None,
    offsets: bool = False,
    input_linger_ms: int | None = None,
) -> dict[str, Any]:
    """The broker's own floor: one produce -> read_committed consume hop, no processing.

    Plain (`commit_interval_ms=None`) or transactional, committing every `commit_interval_ms`
    as a pipeline's output does. A pipeline has an input hop and a transactional output hop,
    so its latency cannot go below this pair. With `offsets` every transaction also commits a
    consumer group's offsets of four partitions, as a consume -> produce pipeline's must: on the
    test broker those calls slow down as a run goes on, which the plain pair does not show.
    """
    bs = broker.bootstrap_servers
    tx = commit_interval_ms is not None
    topic = f"hop-{uuid.uuid4().hex[:6]}"
    Admin(bs).create_topic(topic, PARTITIONS)
    n, warm = int(rate * seconds), int(rate * WARMUP_S)
    w = Watcher(bs, topic, warm + n, latency=True)
    w.start()
    conf = input_producer_config(bs, input_linger_ms)
    if tx:
        conf["transactional.id"] = f"hop-{uuid.uuid4().hex}"
    p = RawProducer(conf)
    group: RawConsumer | None = None
    group_offsets: Callable[[int], tuple[list[TopicPartition], Any]] | None = None
    if offsets:
        group = RawConsumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"hop-{uuid.uuid4().hex[:8]}",
                **broker.group_timeouts,
            }
        )
        meta = group.consumer_group_metadata()

        def group_offsets(done: int) -> tuple[list[TopicPartition], Any]:
            return [TopicPartition(topic, q, done // PARTITIONS) for q in range(PARTITIONS)], meta

    try:
        if tx:
            p.init_transactions(30)
        time.sleep(0.5)
        every = None if commit_interval_ms is None else commit_interval_ms / 1000
        produce_at_rate(p, topic, rate, warm, every, group_offsets)
        w.wait_seen(warm, 60)
        produce_at_rate(p, topic, rate, n, every, group_offsets, first=warm)
        w.join(60)
    finally:
        w.halt.set()
        w.join()
        if group is not None:
            group.close()
    return {
        "engine": "broker",
        "pipeline": ("transactional hop + offsets" if offsets else "transactional hop")
        if tx
        else "hop",
        "guarantee": "exactly_once" if tx else "at_least_once",
        "backend": "-",
        "rate_per_s": rate,
        "records": n,
        **percentiles(w.latencies_ms[warm:]),
        "warmup_p99_ms": percentiles(w.latencies_ms[:warm])["p99_ms"],
        "config": {
            "broker": broker.name,
            "broker_compat": NO_COMPAT,
            "commit_interval": commit_interval_ms,
            "offsets": offsets,
            "input_linger_ms": input_linger_ms,
        },
    }


def latency_runs(
    kind: str, rate: int, seconds: float, full: bool = True, shared: BenchBroker | None = None
) -> dict[str, Any]:
    """The broker's floor, the raw loop and kstream, in that order.

    On Tansu each on a broker of its own: its fetches slow down as it fills (see the README's
    known limits of the test broker), and the throughput runs leave millions of records
    behind, so a fresh broker per run gives every path the same start. Kafka does not slow
    down so: every run shares `shared`, the throughput runs' broker, whose JIT compiler has
    by then compiled its hot paths (a fresh JVM would spend a run's first seconds compiling).
    """

    def broker() -> contextlib.AbstractContextManager[BenchBroker]:
        return contextlib.nullcontext(shared) if shared is not None else start_broker(kind)

    out: dict[str, Any] = {}
    hops: tuple[tuple[str, int | None, bool], ...] = (
        ("broker hop", None, False),
        ("broker transactional hop", LATENCY_KNOBS["commit_interval"], False),
        ("broker transactional hop + offsets", LATENCY_KNOBS["commit_interval"], True),
    )
    paths: tuple[tuple[str, str], ...] = (
        ("raw", "exactly_once"),
        ("kstream", "exactly_once"),
        ("kstream", V2),
    )
    if not full:  # quick: the floor a pipeline cannot beat (both hops), the raw loop, kstream
        hops = hops[:2]
    if shared is not None:
        # Warm the broker up first, discarded: with `--only latency` it is fresh, and a fresh
        # JVM spends its first seconds compiling (a cold plain hop measured p99 1,087 ms, its
        # first two fifths over a second, the last three 18-60 ms).
        hop_latency_run(shared, rate, 3.0, None, False)
        hop_latency_run(shared, rate, 3.0, LATENCY_KNOBS["commit_interval"], False)
    for name, commit_ms, offsets in hops:
        # as long as the pipelines' runs: Tansu's tail grows with a run's length (measured at
        # 5,000 records/s: plain + transactional hop p99 15.8 + 34.8 ms over 5 s, 20.4 + 36.8
        # ms over 10 s), so a shorter floor would not be the same run's floor
        with broker() as b:
            out[name] = hop_latency_run(b, rate, seconds, commit_ms, offsets)
    for engine, guarantee in paths:
        name = engine if guarantee == "exactly_once" else f"{engine} {guarantee}"
        with broker() as b, tempfile.TemporaryDirectory() as tmp:
            out[name] = latency_run(b, rate, seconds, tmp, guarantee, engine=engine)
    if full:
        # The same input in batches of 50 ms (the upstream producer's linger.ms): a tenth of the
        # record batches, whose count is what Tansu's fetches slow down with. The floor is this
        # plain hop plus the transactional hop above (its producer commits every 20 ms,
        # whatever its linger).
        linger = INPUT_LINGER_MS
        with broker() as b:
            out[f"broker hop, input linger {linger} ms"] = hop_latency_run(
                b, rate, seconds, None, input_linger_ms=linger
            )
        with broker() as b, tempfile.TemporaryDirectory() as tmp:
            out[f"kstream, input linger {linger} ms"] = latency_run(
                b, rate, seconds, tmp, input_linger_ms=linger
            )
    return out


LATENCY_TARGET = 1.3  # a pipeline's p99 over its floor, at most


def latency_floor(latency: dict[str, Any]) -> dict[str, Any] | None:
    """A consume -> produce pipeline is an input hop plus a transactional output hop: its
    floor is the plain hop's p99 plus the transactional hop's, measured in the same run. Each
    pipeline's p99 over that floor (the target: at most `LATENCY_TARGET`)."""
    hop, tx = latency.get("broker hop"), latency.get("broker transactional hop")
    if hop is None or tx is None:
        return None
    floor = hop["p99_ms"] + tx["p99_ms"]
    ratios = {
        name: round(lat["p99_ms"] / floor, 2)
        for name, lat in latency.items()
        if lat["engine"] != "broker" and lat.get("config", {}).get("input_linger_ms") is None
    }
    return {
        "hop_p99_ms": hop["p99_ms"],
        "transactional_hop_p99_ms": tx["p99_ms"],
        "floor_p99_ms": round(floor, 2),
        "p99_over_floor": ratios,
        "target": LATENCY_TARGET,
    }


# (engine, pipeline, guarantee, backend, worker processes, kstream's broker_compat)
Cfg = tuple[str, str, str, str, int, str]


def plan(args: argparse.Namespace, only: set[str], process_counts: list[int]) -> list[Cfg]:
    """The throughput configurations, in the order each repeat runs them: a broker_compat
    pair side by side."""
    configs: list[Cfg] = []
    compat = "tansu" if args.broker == "tansu" else "none"
    if "raw" in only:
        configs += [("raw", "raw", g, "-", 1, NO_COMPAT) for g in GUARANTEES]
    kstream_guarantees = (*GUARANTEES, V2)
    backends = BACKENDS if args.full else ("lmdb",)
    quix_guarantees = GUARANTEES if args.full else ("exactly_once",)
    if "kstream" in only:
        for p in PIPELINES:
            for g in kstream_guarantees:
                for b in backends:
                    for k in process_counts:
                        configs.append(("kstream", p, g, b, k, compat))
                        # Tansu's compensations on a broker that does not need them
                        if compat == "none" and not args.no_compat and (p, g, b) in COMPAT_ROWS:
                            configs.append(("kstream", p, g, b, k, "tansu"))
    if "quix" in only:
        configs += [
            ("quix", p, g, "rocksdb", 1, NO_COMPAT) for p in PIPELINES for g in quix_guarantees
        ]
    if KAFKA_STREAMS in only:
        configs += [(KAFKA_STREAMS, p, V2, "rocksdb", 1, NO_COMPAT) for p in PIPELINES]
    if args.match:
        configs = [c for c in configs if re.search(args.match, " ".join((*map(str, c[:4]), c[5])))]
    return configs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with the defaults that depend on `--full` filled in and checked:
    `process_counts` (from `--processes`) and `only` (the engines to run) are added."""
    ap = argparse.ArgumentParser(description=__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick", dest="full", action="store_false", help="a few minutes (the default)"
    )
    mode.add_argument("--full", dest="full", action="store_true", help="the README's table")
    ap.set_defaults(full=False)
    add_broker_argument(ap)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=None, help="3 with --full, 2 with --quick")
    ap.add_argument(
        "--quix-repeats", type=int, default=None, help="--repeats with --full, 1 with --quick"
    )
    ap.add_argument(
        "--kafka-streams-repeats",
        type=int,
        default=None,
        help="--repeats with --full, 1 with --quick",
    )
    ap.add_argument(
        "--kafka-streams-warmup",
        type=int,
        default=None,
        help="input records each Kafka Streams JVM first runs through a discarded app (JIT "
        "warm-up; half of --records by default, 0: none)",
    )
    ap.add_argument("--no-quix", action="store_true", help="skip Quix Streams")
    ap.add_argument("--quix-python", default=os.environ.get("QUIX_PYTHON"))
    ap.add_argument(
        "--no-compat",
        action="store_true",
        help="on Kafka, skip the kstream rows with broker_compat='tansu'",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma list of engines: raw,kstream,quix,kafka-streams,latency",
    )
    ap.add_argument("--kstream-pipe", default=os.path.join(HERE, "kstream_pipe.py"))
    ap.add_argument(
        "--match", default="", help="regex over 'engine pipeline guarantee backend broker_compat'"
    )
    ap.add_argument("--latency-rate", type=int, default=5000)
    ap.add_argument("--latency-seconds", type=float, default=None, help="10 (full), 5 (quick)")
    ap.add_argument(
        "--processes",
        default="1",
        help="comma list of worker-process counts for the kstream rows, e.g. 1,2",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "results", "latest.json"))
    args = ap.parse_args(argv)
    args.process_counts = [int(x) for x in args.processes.split(",") if x.strip()]
    if not args.process_counts or min(args.process_counts) < 1:
        ap.error("--processes: positive integers, e.g. 1,2")
    if args.repeats is None:
        args.repeats = 3 if args.full else 2
    if args.quix_repeats is None:
        args.quix_repeats = args.repeats if args.full else 1
    if args.kafka_streams_repeats is None:
        args.kafka_streams_repeats = args.repeats if args.full else 1
    if args.latency_seconds is None:
        args.latency_seconds = 10.0 if args.full else 5.0
    if args.kafka_streams_warmup is None:
        args.kafka_streams_warmup = args.records // 2
    if not 0 <= args.kafka_streams_warmup <= args.records:
        ap.error(f"--kafka-streams-warmup: 0 to --records ({args.records})")
    everything = {"raw", "kstream", "quix", KAFKA_STREAMS, "latency"}
    args.only = set(filter(None, args.only.split(","))) or everything
    if args.only - everything:
        ap.error(f"--only: unknown {sorted(args.only - everything)}; of {sorted(everything)}")
    if args.no_quix:
        args.only.discard("quix")
    return args


@dataclasses.dataclass
class Peers:
    """How the other engines run, once set up: Quix Streams' interpreter and Kafka Streams'
    java command, or why either was left out (then it is dropped from `args.only`)."""

    quix_python: str = ""
    quix_skipped: str | None = None
    java: list[str] = dataclasses.field(default_factory=list)
    kafka_streams_skipped: str | None = None


def set_up_peers(args: argparse.Namespace) -> Peers:
    """Quix Streams' virtualenv and Kafka Streams' JVM command, for the engines asked for; an
    engine that cannot be set up is skipped, saying why, and the rest still run."""
    peers = Peers()
    if "quix" in args.only:
        try:
            peers.quix_python = ensure_quix_python(args.quix_python)
        except (RuntimeError, OSError) as e:
            peers.quix_skipped = f"Quix Streams could not be set up: {e}"
            print(peers.quix_skipped, flush=True)
            args.only.discard("quix")
    if KAFKA_STREAMS in args.only:
        try:
            peers.java = kafka_streams_java(args.broker)
        except RuntimeError as e:
            peers.kafka_streams_skipped = f"Kafka Streams skipped: {e}"
            print(peers.kafka_streams_skipped, flush=True)
            args.only.discard(KAFKA_STREAMS)
    return peers


def run_command(
    args: argparse.Namespace,
    peers: Peers,
    cfg: Cfg,
    bs: str,
    broker: BenchBroker,
    io: tuple[str, str, str],
) -> list[str]:
    """The command line of one throughput run of `cfg`; `io` is (input topic, output topic,
    state directory), the ready file inside the latter."""
    engine, pipeline, guarantee, backend, _, compat = cfg
    src, out, state = io
    ready = os.path.join(state, "ready")
    common = [f"--bootstrap={bs}", f"--topic={src}", f"--out={out}"]
    common += [f"--guarantee={guarantee}", f"--broker={broker.kind}"]
    if engine == KAFKA_STREAMS:
        Admin(bs).create_topic(f"{out}-warmup", PARTITIONS, TOPIC_CONFIG)
        cmd = [*peers.java, f"--pipeline={pipeline}", *common, f"--state-dir={state}"]
        cmd += [f"--warmup-records={args.kafka_streams_warmup}"]
        cmd += [f"--ready-file={ready}", f"--group=ks-{uuid.uuid4().hex[:8]}"]
        cmd += [f"--commit-interval={KSTREAM_COMMIT_INTERVAL_MS}", "--cache-bytes=0"]
    elif engine == "quix":
        cmd = [peers.quix_python, os.path.join(HERE, "quix_pipe.py"), f"--pipeline={pipeline}"]
        cmd += [*common, f"--state-dir={state}", f"--group=q-{uuid.uuid4().hex[:8]}"]
    else:
        cmd = [sys.executable, args.kstream_pipe]
        cmd += [f"--engine={engine}", f"--pipeline={pipeline}"]
        cmd += [*common, f"--backend={backend}", f"--state-dir={state}"]
        cmd += [f"--ready-file={ready}"]
        cmd += [f"--commit-interval={KSTREAM_COMMIT_INTERVAL_MS}"]
        if compat != NO_COMPAT:
            cmd += [f"--broker-compat={compat}"]
    return cmd


def throughput_runs(
    args: argparse.Namespace,
    peers: Peers,
    configs: list[Cfg],
    broker: BenchBroker,
    tmp: str,
    t_start: float,
) -> dict[Cfg, list[dict[str, Any]]]:
    """Produce the input, then run every configuration, repeat by repeat (a repeat runs each
    configuration once, in `configs`' order): each run's figures, by configuration."""
    n = args.records
    bs = broker.bootstrap_servers
    print(f"{broker.name} at {bs} (pid {broker.pid})", flush=True)
    src = f"bench-in-{uuid.uuid4().hex[:6]}"
    Admin(bs).create_topic(src, PARTITIONS, INPUT_CONFIG)
    kept = produce_input(bs, src, n)
    print(
        f"produced {n:,} records into {src} ({PARTITIONS} partitions); "
        f"{'full' if args.full else 'quick'} run",
        flush=True,
    )
    repeats = {"quix": args.quix_repeats, KAFKA_STREAMS: args.kafka_streams_repeats}
    runs: dict[Cfg, list[dict[str, Any]]] = {c: [] for c in configs}
    for rep in range(max(args.repeats, *repeats.values())):
        for cfg in configs:
            engine, pipeline, guarantee, backend, procs, compat = cfg
            if rep >= repeats.get(engine, args.repeats):
                continue
            out = f"out-{uuid.uuid4().hex[:8]}"
            state = tempfile.mkdtemp(dir=tmp)
            cmd = run_command(args, peers, cfg, bs, broker, (src, out, state))
            expected = kept if pipeline == "P1" else n
            cmds = [cmd] if procs == 1 else worker_cmds(cmd, procs, state)
            res = run_many(cmds, bs, out, expected, broker_pid=broker.pid)
            res["records_per_s"] = n / res["seconds"]
            res["cpu_us_per_record"] = res["cpu_s"] * 1e6 / n
            if res.get("startup_cpu_s") is not None:
                res["steady_cpu_us_per_record"] = (res["cpu_s"] - res["startup_cpu_s"]) * 1e6 / n
            runs[cfg].append(res)
            shutil.rmtree(state, ignore_errors=True)
            print(
                f"[{rep + 1}] {engine:<13} {pipeline:<4} {guarantee:<15} "
                f"{backend:<8} x{procs} compat={compat:<5} "
                f"{res['records_per_s']:>10,.0f} rec/s  "
                f"cpu {res['cpu_s']:.1f}s"
                f" = {res['cpu_us_per_record']:.1f} us/record"
                f" (broker {res.get('broker_cpu_s', 0):.1f}s)"
                + (
                    f", {res['settled_records_per_s']:,.0f} rec/s once all were running"
                    if "settled_records_per_s" in res
                    else ""
                )
                + f"  ({time.monotonic() - t_start:.0f}s)",
                flush=True,
            )
    return runs


def summary_rows(runs: dict[Cfg, list[dict[str, Any]]], broker_name: str) -> list[dict[str, Any]]:
    """A row per configuration: the medians of its runs, and its records/s over the ceiling's
    (the raw loop under the same guarantee) and over Quix Streams'."""
    rows: list[dict[str, Any]] = []
    for cfg, results in runs.items():
        engine, pipeline, guarantee, backend, procs, compat = cfg
        rows.append(
            {
                "pipeline": pipeline,
                "guarantee": guarantee,
                "backend": backend,
                "engine": engine,
                "broker_compat": compat,
                "records_per_s": round(statistics.median(r["records_per_s"] for r in results)),
                "cpu_s": round(statistics.median(r["cpu_s"] for r in results), 2),
                "cpu_us_per_record": round(
                    statistics.median(r["cpu_us_per_record"] for r in results), 2
                ),
                "startup_cpu_s": median_or_none([r.get("startup_cpu_s") for r in results]),
                # the CPU after the first record, per record (start-up left out)
                "steady_cpu_us_per_record": median_or_none(
                    [r.get("steady_cpu_us_per_record") for r in results]
                ),
                "processes": procs,
                "peak_rss_bytes": int(statistics.median(r["peak_rss_bytes"] for r in results)),
                "runs_records_per_s": [round(r["records_per_s"]) for r in results],
                "runs_cpu_us_per_record": [round(r["cpu_us_per_record"], 2) for r in results],
                # N processes: records/s from the moment all were RUNNING (see run_many)
                "settled_records_per_s": median_or_none(
                    [r.get("settled_records_per_s") for r in results]
                ),
                # the rest of the machine while the row ran: the broker, and the harness
                # reading the output
                "broker_cpu_s": median_or_none([r.get("broker_cpu_s") for r in results]),
                "harness_cpu_s": median_or_none([r.get("harness_cpu_s") for r in results]),
                "config": {"broker": broker_name, "broker_compat": compat},
            }
        )
        if engine == KAFKA_STREAMS:
            rows[-1]["jvm"] = jvm_figures(results)
    ceiling = {r["guarantee"]: r["records_per_s"] for r in rows if r["engine"] == "raw"}
    quix = {
        (r["pipeline"], r["guarantee"]): r["records_per_s"] for r in rows if r["engine"] == "quix"
    }
    for r in rows:
        base = "exactly_once" if r["guarantee"] == V2 else r["guarantee"]
        c = ceiling.get(base)
        q = quix.get((r["pipeline"], base))
        r["vs_ceiling"] = round(r["records_per_s"] / c, 3) if c else None
        r["vs_quix"] = round(r["records_per_s"] / q, 2) if q and r["engine"] != "quix" else None
    return rows


def print_report(
    broker_name: str,
    rows: list[dict[str, Any]],
    compat_cost: list[dict[str, Any]],
    ks_ratios: dict[str, Any] | None,
    latency: dict[str, Any],
    floor: dict[str, Any] | None,
) -> None:
    """The table, then the broker_compat pairs, Kafka Streams' ratios and the latencies."""
    print()
    print(f"broker: {broker_name}")
    print(table(rows))
    for pair in compat_cost:
        us = pair["cpu_us_per_record"]
        print(
            f"\nbroker_compat, kstream {pair['pipeline']} {pair['guarantee']} {pair['backend']}: "
            f"CPU {us['none']} us/record with 'none', {us['tansu']} with 'tansu' "
            f"({pair['tansu_over_none']:.2f}x; runs {pair['runs_cpu_us_per_record']})"
        )
    if ks_ratios:
        print("\n" + kafka_streams_summary(ks_ratios))
    for lat in latency.values():
        print(
            f"\nlatency, {lat['engine']} {lat['pipeline']} {lat['guarantee']} "
            f"{input_linger_note(lat)}at {lat['rate_per_s']:,} "
            f"records/s: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms"
            f" (p99 by fifth of the run: {lat.get('p99_ms_by_fifth')};"
            f" the {WARMUP_S:g} s warm-up before it: p99 {lat.get('warmup_p99_ms')} ms)"
        )
    if floor is not None:
        print(
            f"\nlatency floor (plain hop p99 + transactional hop p99): "
            f"{floor['hop_p99_ms']} + {floor['transactional_hop_p99_ms']} = "
            f"{floor['floor_p99_ms']} ms; p99 / floor: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in floor["p99_over_floor"].items())
            + f" (target <= {floor['target']}x)"
        )


def write_results(
    args: argparse.Namespace,
    peers: Peers,
    broker_name: str,
    runs: dict[Cfg, list[dict[str, Any]]],
    latency: dict[str, Any],
    t_start: float,
) -> None:
    """The rows and what is derived from them (the broker_compat pairs, Kafka Streams' ratios,
    the latency floor): printed, then written to `args.out` with the run's settings."""
    rows = summary_rows(runs, broker_name)
    compat_cost = compat_pairs(rows)
    ks_ratios = kafka_streams_ratios(rows)
    floor = latency_floor(latency)
    print_report(broker_name, rows, compat_cost, ks_ratios, latency, floor)
    total = time.monotonic() - t_start
    print(f"\ntotal wall time {total:.0f} s ({total / 60:.1f} min)")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "records": args.records,
                "partitions": PARTITIONS,
                "mode": "full" if args.full else "quick",
                "broker": broker_name,
                "repeats": args.repeats,
                "quix_repeats": args.quix_repeats,
                "kafka_streams_repeats": args.kafka_streams_repeats,
                "kafka_streams_warmup_records": (
                    args.kafka_streams_warmup if KAFKA_STREAMS in args.only else None
                ),
                "quix_skipped": peers.quix_skipped,
                "kafka_streams_skipped": peers.kafka_streams_skipped,
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "total_seconds": round(total),
                "rows": rows,
                "broker_compat_cost": compat_cost,
                "kafka_streams_ratios": ks_ratios,
                "latency": latency,
                "latency_floor": floor,
            },
            f,
            indent=2,
        )
        f.write("\n")
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


def main(argv: list[str] | None = None) -> int:
    """The run the module's docstring describes: the set-up, the throughput runs, the latency
    runs, then the table and the results file."""
    args = parse_args(argv)
    peers = set_up_peers(args)
    t_start = time.monotonic()
    configs = plan(args, args.only, args.process_counts)
    latency: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(start_broker(args.broker))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        broker_name = broker.name
        runs = throughput_runs(args, peers, configs, broker, tmp, t_start)
        if "latency" in args.only and broker.kind == "kafka":
            latency = latency_runs(
                broker.kind, args.latency_rate, args.latency_seconds, args.full, shared=broker
            )
    if "latency" in args.only and args.broker == "tansu":
        latency = latency_runs(args.broker, args.latency_rate, args.latency_seconds, args.full)

    write_results(args, peers, broker_name, runs, latency, t_start)
    return 0


def compat_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kstream's rows measured under both broker_compat values, side by side: what Tansu's
    compensations cost on a broker that does not need them."""
    by = {
        (r["pipeline"], r["guarantee"], r["backend"], r["processes"], r["broker_compat"]): r
        for r in rows
        if r["engine"] == "kstream"
    }
    out: list[dict[str, Any]] = []
    for (p, g, b, k, compat), on in by.items():
        off = by.get((p, g, b, k, "none"))
        if compat != "tansu" or off is None:
            continue
        out.append(
            {
                "pipeline": p,
                "guarantee": g,
                "backend": b,
                "processes": k,
                "cpu_us_per_record": {
                    "none": off["cpu_us_per_record"],
                    "tansu": on["cpu_us_per_record"],
                },
                "runs_cpu_us_per_record": {
                    "none": off["runs_cpu_us_per_record"],
                    "tansu": on["runs_cpu_us_per_record"],
                },
                "records_per_s": {"none": off["records_per_s"], "tansu": on["records_per_s"]},
                "tansu_over_none": round(on["cpu_us_per_record"] / off["cpu_us_per_record"], 3),
            }
        )
    return out


def kafka_streams_java(broker: str) -> list[str]:
    """The command that starts one Kafka Streams run (tools/kafka-streams-bench); raises
    RuntimeError saying why it cannot run."""
    if broker != "kafka":
        raise RuntimeError("it runs on Apache Kafka only (--broker kafka)")
    if not os.path.exists(os.path.join(STREAMS_BENCH, "target", ".built")):
        raise RuntimeError(f"{os.path.relpath(STREAMS_BENCH, ROOT)} is not built (`make bench`)")
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise RuntimeError("no java (set JAVA_HOME or put java on PATH)")
    target = os.path.join(STREAMS_BENCH, "target")
    classpath = f"{target}/classes:{target}/libs/*"
    # the JVM's defaults (heap, GC, JIT), as a Kafka Streams app is started
    return [java, "-cp", classpath, "io.kstream.bench.StreamsBench"]


def jvm_figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A Kafka Streams row's JVM figures (medians over its runs): the CPU of the JVM's start and
    the discarded warm-up app before the measured one, and the measured app's CPU by thread
    kind (the JIT compiler still compiles through it)."""
    threads: dict[str, float | None] = {}
    for kind in sorted({k for r in results for k in r.get("jvm_thread_cpu_s", {})}):
        threads[kind] = median_or_none([r.get("jvm_thread_cpu_s", {}).get(kind) for r in results])
    return {
        "warmup_records": results[0].get("warmup_records"),
        "warmup_cpu_s": median_or_none([r.get("jvm_warmup_cpu_s") for r in results]),
        "thread_cpu_s": threads,
    }


def kafka_streams_ratios(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """kstream's exactly_once_v2 rows (lmdb, one process, broker_compat "none") over Kafka
    Streams' on the same pipeline: records/s, and CPU per record with the start-up and
    without it (`steady_`), beside issue 35's goals."""

    def pick(engine: str, pipeline: str) -> dict[str, Any] | None:
        for r in rows:
            if (r["engine"], r["pipeline"], r["guarantee"], r["processes"]) == (
                engine,
                pipeline,
                V2,
                1,
            ) and (engine != "kstream" or (r["backend"], r["broker_compat"]) == ("lmdb", "none")):
                return r
        return None

    out: dict[str, Any] = {}
    for p in PIPELINES:
        ks, kafka = pick("kstream", p), pick(KAFKA_STREAMS, p)
        if ks is None or kafka is None:
            continue
        ratio: dict[str, Any] = {
            "throughput": round(ks["records_per_s"] / kafka["records_per_s"], 3),
            "cpu_per_record": round(ks["cpu_us_per_record"] / kafka["cpu_us_per_record"], 3),
        }
        if ks["steady_cpu_us_per_record"] and kafka["steady_cpu_us_per_record"]:
            ratio["steady_cpu_per_record"] = round(
                ks["steady_cpu_us_per_record"] / kafka["steady_cpu_us_per_record"], 3
            )
        jit = (kafka.get("jvm") or {}).get("thread_cpu_s", {}).get("jit")
        ratio["kafka_streams_jit_cpu_s"] = jit
        out[p] = ratio
    if not out:
        return None
    goals = KAFKA_STREAMS_GOALS
    met: dict[str, bool] = {}
    if "P1" in out:
        met["P1_throughput"] = out["P1"]["throughput"] >= goals["P1_throughput_min"]
        met["P1_cpu"] = out["P1"]["cpu_per_record"] <= goals["P1_cpu_max"]
    if "P3" in out:
        met["P3_cpu"] = out["P3"]["cpu_per_record"] <= goals["P3_cpu_max"]
    return {
        "kstream": {"guarantee": V2, "backend": "lmdb", "broker_compat": "none"},
        "kstream_over_kafka_streams": out,
        "goals": goals,
        "met": met,
    }


def kafka_streams_summary(ratios: dict[str, Any]) -> str:
    """The printed lines of `kafka_streams_ratios`."""
    goals = ratios["goals"]
    lines = ["kstream (exactly_once_v2, lmdb) over Kafka Streams (exactly_once_v2, RocksDB):"]
    for p, r in ratios["kstream_over_kafka_streams"].items():
        steady = r.get("steady_cpu_per_record")
        lines.append(
            f"  {p}: records/s {r['throughput']:.2f}x, CPU per record {r['cpu_per_record']:.2f}x"
            + (f" ({steady:.2f}x after the start-up)" if steady is not None else "")
            + (
                f"; Kafka Streams' JIT compiler took {r['kafka_streams_jit_cpu_s']:.1f} s of CPU"
                " during its run"
                if r.get("kafka_streams_jit_cpu_s") is not None
                else ""
            )
        )
    lines.append(
        f"  goals: P1 records/s >= {goals['P1_throughput_min']}x, CPU per record <= "
        f"{goals['P1_cpu_max']}x on P1 and <= {goals['P3_cpu_max']}x on P3; met: "
        + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in ratios["met"].items())
    )
    return "\n".join(lines)


def worker_cmds(cmd: list[str], processes: int, state: str) -> list[list[str]]:
    """`processes` worker processes of one app, as `kstreamd run --processes N` starts them:
    one app id (one consumer group sharing the partitions), a state directory each, started
    together (`--barrier`). Run directly rather than under the supervisor so that each one's
    CPU and RSS are measured; the supervisor itself only starts and watches them."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    barrier = os.path.join(state, "barrier")
    os.makedirs(barrier)
    out = []
    for i in range(processes):
        own = os.path.join(state, str(i))
        os.makedirs(own)
        c = [a for a in cmd if not a.startswith(("--state-dir=", "--ready-file="))]
        c += [f"--state-dir={own}", f"--group={group}"]
        c += [f"--barrier={barrier}", f"--barrier-count={processes}"]
        out.append(c)
    return out


def input_linger_note(lat: dict[str, Any]) -> str:
    linger = lat.get("config", {}).get("input_linger_ms")
    return "" if linger is None else f"(input linger {linger} ms) "


def median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"| {'engine':<13} | {'pipeline':<8} | {'guarantee':<15} | {'backend':<8} | "
        f"{'compat':<6} | {'procs':>5} | "
        f"{'records/s':>9} | {'CPU us/rec':>10} | {'after start':>11} | "
        f"{'vs ceiling':>10} | {'vs Quix':>7} | "
        f"{'CPU s':>6} | {'peak RSS':>8} |"
    )
    sep = "|" + "|".join("-" * (len(c) if c else 0) for c in head.split("|")[1:-1]) + "|"
    lines = [head, sep]
    for r in rows:
        vc = f"{r['vs_ceiling']:.2f}" if r["vs_ceiling"] is not None else "-"
        vq = f"{r['vs_quix']:.2f}x" if r["vs_quix"] is not None else "-"
        us = r.get("steady_cpu_us_per_record")
        steady = f"{us:.1f}" if us is not None else "-"
        lines.append(
            f"| {r['engine']:<13} | {r['pipeline']:<8} | {r['guarantee']:<15} | "
            f"{r['backend']:<8} | {r['broker_compat']:<6} | {r['processes']:>5} | "
            f"{r['records_per_s']:>9,} | {r['cpu_us_per_record']:>10.1f} | {steady:>11} | "
            f"{vc:>10} | {vq:>7} | "
            f"{r['cpu_s']:>6.1f} | "
            f"{r['peak_rss_bytes'] / 2**20:>6.0f}MB |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
