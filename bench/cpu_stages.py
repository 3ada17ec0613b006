"""Where kstream's CPU per record goes: P1-P3 on Apache Kafka, sampled by py-spy.

Runs kstream P1-P3 (and the raw confluent-kafka pipe beside them) once each, as
bench/run_all.py does, with py-spy sampling the process from its first record to SIGTERM
(`BENCH_PYSPY`, see kstream_pipe.py). The process's CPU over that window is split two ways:

- by thread, measured: librdkafka's own C threads (`rdk:*`: fetching, batching, the protocol)
  against the Python threads;
- the Python threads' CPU by stage, in proportion to py-spy's samples, each stack folded into
  the stage of its deepest recognised frame: consume/deserialize (the consumer's calls,
  messages to records, the source node's serdes), node execution (processors, the DSL's
  functions, the task's dispatch), store (state stores and their write caches, their flush at
  commit and changelog records included), serialize/produce (the sink node's serdes, the
  collector, the producer's calls), commit (the commit protocol: transactions, offsets, the
  high marks), metrics (the stores' timing wrappers and the operation counters, apart from
  the store operations they wrap), other (the stream thread's loop, anything unrecognised).

Start-up (imports, group join, restore) is left out: `startup_cpu_s` in the row. Prints a table
of CPU microseconds per record per stage and writes bench/results/cpu_stages.json. The broker is
Apache Kafka, or the embedded Tansu with `--broker tansu` (bench/brokers.py); kstream runs with
the `broker_compat` the broker needs unless `--broker-compat` says otherwise.

    python bench/cpu_stages.py [--records 200000] [--pipelines P1,P2,P3]
                               [--guarantee exactly_once] [--backend lmdb] [--rate 250]
                               [--broker kafka|tansu] [--broker-compat none|tansu]
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections import Counter
from functools import cache
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from brokers import COMPATS, BenchBroker, add_broker_argument, start_broker  # noqa: E402
from run_all import INPUT_CONFIG, PARTITIONS, produce_input, run_many  # noqa: E402

from kstream.kafka.admin import Admin  # noqa: E402

STAGES = (
    "consume/deserialize",
    "node execution",
    "store",
    "serialize/produce",
    "commit",
    "metrics",
    "other",
)

# (path part, qualified-name prefix or "" for any, stage): a frame takes the first rule that
# matches it, a stack the stage of its deepest matching frame
RULES: tuple[tuple[str, str, str], ...] = (
    ("kstream/runtime/tasks.py", "RuntimeTask.produce_changelogs", "store"),
    ("kstream/runtime/tasks.py", "RuntimeTask.flush", "store"),
    ("kstream/topology/task.py", "Task.flush_stores", "store"),
    ("kstream/kafka/consumer.py", "Consumer.consume", "consume/deserialize"),
    ("kstream/kafka/consumer.py", "Consumer.poll", "consume/deserialize"),
    ("kstream/runtime/tasks.py", "RuntimeTask.process", "consume/deserialize"),
    ("kstream/runtime/tasks.py", "_timestamp", "consume/deserialize"),
    ("kstream/runtime/thread.py", "StreamThread._process", "node execution"),
    ("kstream/topology/task.py", "Task.", "node execution"),
    ("kstream/topology/nodes.py", "Node.", "node execution"),
    ("kstream/topology/nodes.py", "ProcessorNode.", "node execution"),
    ("kstream/topology/nodes.py", "NodeContext.", "node execution"),
    ("kstream/topology/processor.py", "", "node execution"),
    ("kstream/dsl/", "", "node execution"),
    ("kstream_pipe.py", "build.", "node execution"),
    ("kstream/topology/nodes.py", "SourceNode.", "consume/deserialize"),
    ("kstream/state/metrics.py", "", "metrics"),
    ("kstream/state/provenance.py", "", "serialize/produce"),
    ("kstream/state/", "", "store"),
    ("kstream/stores.py", "", "store"),
    ("store_backends/", "", "store"),
    ("kstream/topology/nodes.py", "SinkNode.", "serialize/produce"),
    ("kstream/runtime/collector.py", "Collector.", "serialize/produce"),
    ("kstream/kafka/producer.py", "Producer.produce", "serialize/produce"),
    ("kstream/kafka/producer.py", "Producer.poll", "serialize/produce"),
    ("kstream/runtime/commit.py", "", "commit"),
    ("kstream/runtime/thread.py", "StreamThread.commit", "commit"),
    ("kstream/runtime/thread.py", "StreamThread.apply", "commit"),
    ("kstream/runtime/tasks.py", "RuntimeTask.apply", "commit"),
    ("kstream/runtime/tasks.py", "RuntimeTask.start_period", "commit"),
    ("kstream/runtime/tasks.py", "RuntimeTask.offsets", "commit"),
    ("kstream/runtime/tasks.py", "RuntimeTask._save_marks", "commit"),
    ("kstream/metrics.py", "", "metrics"),
)
# a thread waiting (the main thread's wait for SIGTERM wakes every 50 ms): not CPU
IDLE_LEAVES = ("Condition.wait", "Event.wait")
# the raw pipe's loop calls the client directly: its lines tell the stage
RAW_LINES = (
    ("consume(", "consume/deserialize"),
    ("produce(", "serialize/produce"),
    ("poll(", "serialize/produce"),
    ("transaction", "commit"),
    ("commit(", "commit"),
)


@cache
def qualnames(path: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function in a source file."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return []
    out: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((child.lineno, child.end_lineno or child.lineno, name))
                walk(child, name + ".")

    walk(tree, "")
    return out


def qualname(path: str, line: int) -> str:
    best = ""
    for lo, hi, name in qualnames(path):
        if lo <= line <= hi and len(name) >= len(best):
            best = name  # the innermost
    return best


@cache
def source_line(path: str, line: int) -> str:
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return ""
    return lines[line - 1] if 0 < line <= len(lines) else ""


def parse_frame(frame: str) -> tuple[str, str, int]:
    """py-spy's raw frame `function (path:line)` -> (function, path, line)."""
    func, _, loc = frame.rpartition(" (")
    path, _, line = loc.rstrip(")").rpartition(":")
    try:
        return func, path, int(line)
    except ValueError:
        return func, loc, 0


def stage_of(stack: str) -> str | None:
    """The stage of one sampled stack (root first), None for a waiting thread."""
    frames = stack.split(";")
    if parse_frame(frames[-1])[0] in IDLE_LEAVES:
        return None
    stage = "other"
    for frame in frames:
        func, path, line = parse_frame(frame)
        path = path.replace(os.sep, "/")
        if path.endswith("kstream_pipe.py") and func == "run_raw":
            text = source_line(os.path.join(HERE, "kstream_pipe.py"), line)
            for needle, st in RAW_LINES:
                if needle in text:
                    stage = st
                    break
            continue
        q = None
        for suffix, prefix, st in RULES:
            if suffix not in path:
                continue
            if prefix:
                if q is None:  # py-spy names methods Class.method; an absolute path: look up
                    q = qualname(path, line) if os.path.isabs(path) else func
                if not (q == prefix or q.startswith(prefix)):
                    continue
            stage = st
            break
    return stage


def fold(files: list[str]) -> Counter[str]:
    """Samples per stage, from py-spy's raw (collapsed) output."""
    got: Counter[str] = Counter()
    for name in files:
        with open(name) as f:
            for ln in f:
                stack, _, count = ln.rstrip("\n").rpartition(" ")
                if stack and count.isdigit():
                    stage = stage_of(stack)
                    if stage is not None:
                        got[stage] += int(count)
    return got


def profile_one(
    broker: BenchBroker,
    compat: str,
    src: str,
    n: int,
    kept: int,
    pipeline: str,
    guarantee: str,
    backend: str,
    tmp: str,
) -> dict[str, Any]:
    bs = broker.bootstrap_servers
    engine = "raw" if pipeline == "raw" else "kstream"
    out = f"out-{uuid.uuid4().hex[:8]}"
    state = tempfile.mkdtemp(dir=tmp)
    prefix = os.path.join(tmp, f"spy-{uuid.uuid4().hex[:6]}")
    cmd = [sys.executable, os.path.join(HERE, "kstream_pipe.py"), f"--engine={engine}"]
    cmd += [f"--pipeline={pipeline}", f"--guarantee={guarantee}", f"--backend={backend}"]
    cmd += [f"--bootstrap={bs}", f"--topic={src}", f"--out={out}", f"--state-dir={state}"]
    cmd += [f"--ready-file={os.path.join(state, 'ready')}", f"--broker={broker.kind}"]
    if engine == "kstream":
        cmd += [f"--broker-compat={compat}"]
    os.environ["BENCH_PYSPY"] = prefix
    try:
        res = run_many([cmd], bs, out, kept if pipeline == "P1" else n, broker_pid=broker.pid)
    finally:
        del os.environ["BENCH_PYSPY"]
    files = glob.glob(prefix + "-*.txt")
    samples = fold(files)
    if not samples:
        raise RuntimeError(f"{pipeline}: py-spy wrote no samples (is ptrace allowed?)")
    threads = res.get("thread_cpu_s") or {}
    python_s, client_s = threads.get("python", 0.0), threads.get("client", 0.0)
    total = sum(samples.values())
    us = {st: python_s * samples[st] / total * 1e6 / n for st in STAGES}
    return {
        "engine": engine,
        "pipeline": pipeline,
        "guarantee": guarantee,
        "backend": backend if engine == "kstream" else "-",
        "config": {"broker": broker.name, "broker_compat": compat if engine == "kstream" else "-"},
        "records": n,
        "records_per_s": round(n / res["seconds"]),
        "cpu_us_per_record": round(res["cpu_s"] * 1e6 / n, 2),
        "startup_cpu_s": round(res.get("startup_cpu_s") or 0.0, 2),
        "processing_cpu_us_per_record": round((python_s + client_s) * 1e6 / n, 2),
        "client_threads_us_per_record": round(client_s * 1e6 / n, 2),
        "python_threads_us_per_record": round(python_s * 1e6 / n, 2),
        "python_stages_us_per_record": {st: round(v, 2) for st, v in us.items()},
        "samples": dict(samples),
    }


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["client threads", *STAGES, "processing", "whole process"]
    head = f"| {'us/record':<10} | " + " | ".join(f"{c:>8}" for c in cols) + " |"
    lines = [head, "|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        vals = [r["client_threads_us_per_record"]]
        vals += [r["python_stages_us_per_record"][st] for st in STAGES]
        vals += [r["processing_cpu_us_per_record"], r["cpu_us_per_record"]]
        name = r["pipeline"]
        lines.append(
            f"| {name:<10} | "
            + " | ".join(f"{v:>{max(8, len(c))}.1f}" for v, c in zip(vals, cols, strict=True))
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--pipelines", default="raw,P1,P2,P3")
    ap.add_argument("--guarantee", default="exactly_once")
    ap.add_argument("--backend", default="lmdb")
    ap.add_argument("--rate", default="250", help="py-spy samples per second")
    add_broker_argument(ap)
    ap.add_argument("--broker-compat", choices=COMPATS, default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cpu_stages.json"))
    args = ap.parse_args(argv)
    os.environ["BENCH_PYSPY_RATE"] = args.rate
    t0 = time.monotonic()
    rows = []
    with start_broker(args.broker) as broker, tempfile.TemporaryDirectory() as tmp:
        bs = broker.bootstrap_servers
        broker_name = broker.name
        compat = args.broker_compat or broker.compat
        src = f"stages-in-{uuid.uuid4().hex[:6]}"
        Admin(bs).create_topic(src, PARTITIONS, INPUT_CONFIG)
        kept = produce_input(bs, src, args.records)
        for p in args.pipelines.split(","):
            row = profile_one(
                broker, compat, src, args.records, kept, p, args.guarantee, args.backend, tmp
            )
            rows.append(row)
            print(
                f"{p}: {row['records_per_s']:,} rec/s, {row['cpu_us_per_record']} us/record "
                f"({time.monotonic() - t0:.0f}s)",
                flush=True,
            )
    print()
    print(
        f"CPU us/record by stage, {args.guarantee} {args.backend}, {args.records:,} records, "
        f"{broker_name}, broker_compat {compat}:"
    )
    print(table(rows))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "records": args.records,
                "partitions": PARTITIONS,
                "guarantee": args.guarantee,
                "backend": args.backend,
                "broker": broker_name,
                "broker_compat": compat,
                "pyspy_rate": int(args.rate),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "stages": list(STAGES),
                "rows": rows,
            },
            f,
            indent=2,
        )
        f.write("\n")
    print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
