"""Spark runner throughput and batch latency on local[2] against the embedded broker.

Two workloads over the same input (100-byte JSON values, 2 partitions): a stateless
filter + map_values to a topic, and a grouped count (one stateful step). Each runs with
`availableNow` and a per-batch record limit; records/s counts input records over the query's
wall time (first batch included: it pays for starting Python workers), batch latency is
Spark's trigger execution time per micro-batch. Prints a table, writes bench/results/spark.json.

    python bench/spark.py [--records 200000] [--batch 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kstream.dsl import StreamBuilder  # noqa: E402
from kstream.kafka.admin import Admin  # noqa: E402
from kstream.kafka.broker import EmbeddedBroker  # noqa: E402
from kstream.kafka.producer import Producer  # noqa: E402
from kstream.topology.topology import Topology  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def stateless(src: str, out: str) -> Topology:
    b = StreamBuilder()
    (
        b.stream(src, key_serde="string", value_serde="json")
        .filter(lambda _k, v: v["n"] % 2 == 0)
        .map_values(lambda v: {"user": v["user"], "double": v["n"] * 2})
        .to(out, value_serde="json")
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


WORKLOADS = {"stateless": stateless, "group-by count": grouped_count}


def produce(bootstrap: str, topic: str, n: int) -> None:
    pad = "x" * 60
    with Producer(bootstrap) as p:
        for i in range(n):
            value = json.dumps({"user": f"user-{i % 1000}", "n": i, "pad": pad}).encode()
            p.produce(topic, value, f"k{i}".encode())
            if i % 10_000 == 0:
                p.poll(0)
        p.flush()


def measure(spark: Any, bootstrap: str, name: str, n: int, batch: int, tmp: str) -> dict:
    from kstream.spark import start

    slug = name.replace(" ", "-")
    src, out = f"bench-{slug}-in", f"bench-{slug}-out"
    with Admin(bootstrap) as admin:
        admin.create_topic(src, 2)
        admin.create_topic(out, 2)
    produce(bootstrap, src, n)
    t0 = time.perf_counter()
    q = start(
        WORKLOADS[name](src, out),
        f"bench-{slug}",
        bootstrap,
        checkpoint_dir=os.path.join(tmp, slug),
        spark=spark,
        max_records_per_batch=batch,
    )
    q.wait()
    elapsed = time.perf_counter() - t0
    progress = q.query.recentProgress
    q.sink.close()
    latencies = [p.durationMs.get("triggerExecution", 0) / 1000 for p in progress]
    rows = sum(p.numInputRows for p in progress)
    steady = latencies[1:] or latencies
    return {
        "workload": name,
        "records": rows,
        "batches": len(latencies),
        "seconds": round(elapsed, 2),
        "records_per_s": round(rows / elapsed),
        "first_batch_s": round(latencies[0], 2) if latencies else None,
        "batch_p50_s": round(statistics.median(steady), 3) if steady else None,
        "batch_max_s": round(max(steady), 3) if steady else None,
        "records_written": q.sink.records_written,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=50_000)
    args = ap.parse_args()
    from kstream.spark import spark_session

    spark = spark_session(conf={"spark.sql.shuffle.partitions": "2"})
    results = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        for name in WORKLOADS:
            results.append(
                measure(spark, broker.bootstrap_servers, name, args.records, args.batch, tmp)
            )
    spark.stop()
    cols = [
        "workload",
        "records",
        "batches",
        "seconds",
        "records_per_s",
        "first_batch_s",
        "batch_p50_s",
        "batch_max_s",
    ]
    print(" | ".join(f"{c:>14}" for c in cols))
    for r in results:
        print(" | ".join(f"{r[c]!s:>14}" for c in cols))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    meta = {"master": "local[2]", "partitions": 2, "max_records_per_batch": args.batch}
    with open(os.path.join(HERE, "results", "spark.json"), "w") as f:
        json.dump({"config": meta, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
