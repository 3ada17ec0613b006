"""One benchmark run in its own process: kstream P1-P3, or the raw confluent-kafka pipe.

Started by bench/run_all.py. Waits for its consumer group to be joined, processes until it gets
SIGTERM (sent by run_all.py once the last output record is readable), then prints one JSON line:
`{"first": <time.monotonic() when processing started>, "cpu_s": ..., "startup_cpu_s": ...,
"peak_rss_bytes": ...}` (`cpu_s`: the whole process's user + sys CPU seconds, every thread, the
client library's included; `startup_cpu_s`: the part spent before processing started).

- raw: consume -> produce, bytes through, no framework (the ceiling); `--guarantee
  exactly_once` makes it transactional: a transaction spans the batches of one commit interval
  (`--commit-interval`, 100 ms as kstream's; 0: one transaction per batch), offsets sent with it.
- kstream: P1 filter + map + to, P2 running count per key, P3 tumbling 10 s windowed sum per key.

`--broker` (kafka or tansu) sets what the broker needs of the clients (bench/brokers.py: the
group timeouts, kstream's `broker_compat`); `--broker-compat` overrides the latter.

    python bench/kstream_pipe.py --engine kstream --pipeline P2 --guarantee exactly_once \
        --backend lmdb --bootstrap HOST:PORT --topic IN --out OUT --state-dir DIR \
        [--broker kafka|tansu] [--broker-compat none|tansu]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from brokers import BROKERS, COMPATS, DEFAULT_BROKER, default_compat, group_timeouts  # noqa: E402


def build(pipeline: str, src: str, dst: str) -> Any:
    from kstream.dsl import StreamBuilder
    from kstream.dsl.windows import TimeWindows

    b = StreamBuilder()
    s = b.stream(src, key_serde="string", value_serde="json")
    if pipeline == "P1":
        s.filter(lambda k, v: v["kind"] != "refund").map_values(
            lambda v: {"user": v["user"], "cents": round(v["amount"] * 100)}
        ).to(dst, value_serde="json")
    elif pipeline == "P2":
        s.group_by_key().count(store="counts").to_stream().to(dst, value_serde="long")
    else:
        (
            s.map_values(lambda v: v["amount"])
            .group_by_key(value_serde="double")
            .windowed_by(TimeWindows.of("10s"))
            .reduce(lambda a, b: a + b, store="sums")
            .to_stream()
            .to(dst)
        )
    return b


STARTUP_CPU: list[float] = []
THREAD_CPU: dict[str, dict[str, float]] = {}
SPY: list[subprocess.Popen[bytes]] = []


def cpu_s() -> float:
    """This process's CPU seconds so far, user + sys, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stat_cpu_s(path: str) -> float | None:
    """User + sys CPU seconds from a /proc `stat` file (a process's or a thread's); None when
    it is gone or there is no /proc."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


JIT_QUIET = 0.05
"""A JVM is warm once a warm-up pass spends under this share of its CPU in the JIT compiler
(Kafka Streams in bench/fair.py, Spark in bench/spark.py)."""


def thread_ids(pid: int) -> list[str]:
    """The ids of process `pid`'s threads, from /proc; none if it is gone."""
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def jit_threads_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live JIT compiler thread ("C1/C2 CompilerThread<n>") of JVM `pid`,
    by thread id: a JVM starts and ends compiler threads as its queue grows and shrinks, so a
    caller sampling them keeps each thread's last figure."""
    out: dict[int, float] = {}
    for tid in thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if "Compiler" not in f.read():
                    continue
        except OSError:
            continue
        secs = stat_cpu_s(f"/proc/{pid}/task/{tid}/stat")
        if secs is not None:
            out[int(tid)] = secs
    return out


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's live threads: librdkafka's own (`rdk:*`, the client
    library's C threads) and the Python threads (`python`; Linux only, else empty)."""
    out = {"client": 0.0, "python": 0.0}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # the thread ended
        secs = stat_cpu_s(f"/proc/self/task/{tid}/stat")
        if secs is not None:
            out["client" if comm.startswith("rdk:") else "python"] += secs
    return out


def processing_started() -> None:
    """The first record (kstream: the app is RUNNING): note the CPU spent so far, start the
    profiler when asked for one."""
    STARTUP_CPU.append(cpu_s())
    THREAD_CPU["start"] = thread_cpu()
    spy = profiler()
    if spy is not None:
        SPY.append(spy)


def processing_stopped() -> None:
    """SIGTERM, before the clients close: stop the profiler, note the threads' CPU."""
    for spy in SPY:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    THREAD_CPU["stop"] = thread_cpu()


def run_kstream(args: argparse.Namespace, stop: threading.Event) -> float:
    from kstream.runtime import App, AppState

    app = App(
        build(args.pipeline, args.topic, args.out),
        args.group,
        args.bootstrap,
        args.guarantee,
        {
            "state_dir": args.state_dir,
            "default_backend": args.backend,
            "batch_max_records": args.batch_max_records,
            "batch_max_wait": args.batch_max_wait,
            "commit_interval": args.commit_interval,
            "cache_max_bytes": args.cache_bytes,
            "broker_compat": args.broker_compat or default_compat(args.broker),
            "kafka": {**group_timeouts(args.broker), **json.loads(args.kafka)},
        },
    )
    if args.barrier:
        wait_for_peers(args.barrier, args.barrier_count)
    app.start()
    try:
        if not app.wait_for(AppState.RUNNING, AppState.ERROR, timeout=120):
            raise RuntimeError("the app did not start")
        # RUNNING = partitions assigned and stores restored: the group join is over.
        first = time.monotonic()
        processing_started()
        ready(args)
        while not stop.wait(0.05):
            if app.error is not None:
                break
        processing_stopped()
        return first
    finally:
        app.close()
        if app.error is not None:
            raise app.error


def run_raw(args: argparse.Namespace, stop: threading.Event) -> float:
    from confluent_kafka import Consumer, Producer

    tx = args.guarantee == "exactly_once"
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            # as kstream's stream thread does: the fetch waits no longer than the batch
            "fetch.wait.max.ms": max(1, min(500, args.batch_max_wait)),
            # as kstream's consumers (kstream/kafka/consumer.py): refill the fetch queue
            # within 10 ms of draining it, not librdkafka's 1 s
            "fetch.queue.backoff.ms": 10,
            **group_timeouts(args.broker),
            **json.loads(args.kafka),
        }
    )
    pconf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "linger.ms": 5}
    if tx:
        pconf["transactional.id"] = f"raw-{uuid.uuid4().hex}"
        # as kstream's exactly_once_v2 producer (kstream.runtime.commit.shared_producer_settings):
        # a transaction's records are read only once it commits, and the commit sends what
        # lingers, so the producer lingers up to a commit interval (at most 100 ms) and writes
        # one batch per partition per commit, not one per 5 ms
        if args.commit_interval > 0:
            pconf["linger.ms"] = max(5, min(100, args.commit_interval))
    p = Producer(pconf)
    if tx:
        p.init_transactions(30)
    c.subscribe([args.topic])
    while not c.assignment():
        c.poll(0.05)
    ready(args)
    first = 0.0
    dst = args.out
    # One turn as kstream's stream thread takes it (kstream.runtime.thread.run_once): consume a
    # batch, produce it, then commit when the commit interval has passed since the last commit,
    # so a batch goes out in the transaction that is open when it arrives. (Committing before
    # producing the batch just consumed, as this loop did, held that batch back a whole
    # interval: the loop's p99 came out above kstream's, no floor.)
    in_txn = False
    last_commit = time.monotonic()
    interval_s = args.commit_interval / 1000
    while not stop.is_set():
        msgs = c.consume(args.batch_max_records, args.batch_max_wait / 1000)
        if msgs:
            if not first:
                first = time.monotonic()
                processing_started()
            if tx and not in_txn:
                p.begin_transaction()
                in_txn = True
            produce_all(p, dst, msgs)
        if not tx:
            if msgs:
                p.poll(0)
                c.commit(asynchronous=True)
        elif in_txn and time.monotonic() - last_commit >= interval_s:
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata())
            p.commit_transaction()
            in_txn = False
            last_commit = time.monotonic()
        elif not in_txn and time.monotonic() - last_commit >= interval_s:
            last_commit = time.monotonic()  # nothing to commit: the interval starts again
    processing_stopped()
    p.flush(30)
    c.close()
    return first


def produce_all(p: Any, dst: str, msgs: list[Any]) -> None:
    """Queue every record of a consumed batch to `dst`, bytes as they came."""
    produce = p.produce
    for m in msgs:
        if m.error() is not None:
            continue
        while True:
            try:
                # the input's timestamp, as a stream processor forwards it: end-to-end latency
                # is then measured from the upstream producer, as for kstream. Positionally
                # (partition -1: the partitioner's; no per-message callback), as kstream calls
                # it: keywords cost the client 0.25-0.35 us per call
                produce(dst, m.value(), m.key(), -1, None, None, m.timestamp()[1])
                break
            except BufferError:
                p.poll(0.01)


def wait_for_peers(directory: str, count: int, timeout_s: float = 120.0) -> None:
    """Worker processes of one app (`run_all.py --processes N`): each arrives here with its
    App built and starts it only when all N have arrived, so they join the group together and
    share the partitions from the first generation on, as the supervisor's workers do once
    started; without this one process could take every partition alone for its first second
    or two while the other is still importing."""
    with open(os.path.join(directory, str(os.getpid())), "w") as f:
        f.write("here")
    deadline = time.monotonic() + timeout_s
    while len(os.listdir(directory)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(os.listdir(directory))} of {count} peers arrived")
        time.sleep(0.01)


def ready(args: argparse.Namespace) -> None:
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write("ready")


def py_spy() -> str | None:
    """py-spy's path: on PATH, or beside this Python (a virtualenv's bin is not always on PATH)."""
    found = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    return found if os.path.exists(found) else None


def profiler() -> subprocess.Popen[bytes] | None:
    """`BENCH_PYSPY=<file prefix>`: sample this process with py-spy (collapsed stacks) from
    the first record on (`BENCH_PYSPY_RATE` samples/s, 250 by default; `BENCH_PYSPY_GIL=1`:
    only the thread holding the GIL, so waits in the client library are left out)."""
    prefix = os.environ.get("BENCH_PYSPY")
    if not prefix:
        return None
    spy = py_spy()
    if spy is None:
        raise SystemExit("BENCH_PYSPY is set but py-spy is not installed")
    out = f"{prefix}-{os.getpid()}.txt"
    rate = os.environ.get("BENCH_PYSPY_RATE", "250")
    cmd = [spy, "record", "-r", rate, "--nonblocking", "-f", "raw", "-o", out]
    cmd += ["--pid", str(os.getpid())]
    if os.environ.get("BENCH_PYSPY_GIL"):  # only the thread holding the GIL: Python's CPU
        cmd.append("--gil")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("kstream", "raw"), required=True)
    ap.add_argument("--pipeline", choices=("raw", "P1", "P2", "P3"), default="raw")
    ap.add_argument(
        "--guarantee", choices=("at_least_once", "exactly_once", "exactly_once_v2"), required=True
    )
    ap.add_argument("--backend", default="memory")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--group", default=None)
    ap.add_argument("--state-dir", default="")
    ap.add_argument("--ready-file", default="")
    ap.add_argument("--barrier", default="", help="a directory the app's processes meet in")
    ap.add_argument("--barrier-count", type=int, default=1)
    ap.add_argument("--batch-max-records", type=int, default=10_000)
    ap.add_argument("--batch-max-wait", type=int, default=100)
    ap.add_argument("--commit-interval", type=int, default=100)
    ap.add_argument("--cache-bytes", type=int, default=0, help="kstream's cache_max_bytes")
    ap.add_argument("--kafka", default="{}", help="librdkafka settings (JSON) for the app")
    ap.add_argument("--broker", choices=BROKERS, default=DEFAULT_BROKER)
    ap.add_argument(
        "--broker-compat",
        choices=COMPATS,
        default=None,
        help="kstream's broker_compat (default: what --broker needs)",
    )
    args = ap.parse_args()
    # the engine's warnings (retries, rollbacks) reach stderr, which the harness shows on failure
    logging.basicConfig(level=os.environ.get("BENCH_LOG", "WARNING"), stream=sys.stderr)
    args.group = args.group or f"bench-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    first = (run_kstream if args.engine == "kstream" else run_raw)(args, stop)
    start, end = THREAD_CPU.get("start", {}), THREAD_CPU.get("stop", {})
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "first": first,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "startup_cpu_s": STARTUP_CPU[0] if STARTUP_CPU else None,
                # CPU of the live threads between the first record and SIGTERM
                "thread_cpu_s": {k: end[k] - start.get(k, 0.0) for k in end},
                "peak_rss_bytes": usage.ru_maxrss * 1024,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
