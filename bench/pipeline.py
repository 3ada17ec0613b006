"""Pipeline throughput on Apache Kafka: kstream beside a raw confluent-kafka pipe.

Every run reads the same N records (100-byte values, 4 partitions, 1,000 keys) and writes one
output record per input record:

- raw: a confluent-kafka consumer -> producer loop (no framework), the ceiling;
- stateless: `map_values` + `filter` -> `to`, at-least-once and exactly-once;
- stateful: a running count per key (`group_by_key().count()`), both guarantees.

The time counted is from the app's RUNNING state (tasks assigned, stores restored) until the
last output record is readable. Prints a table and writes bench/results/pipeline.json. The
broker is Apache Kafka, or the embedded Tansu with `--broker tansu` (bench/brokers.py); kstream
runs with the `broker_compat` the broker needs.

    python bench/pipeline.py [--records 200000] [--broker kafka|tansu]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: E402
from confluent_kafka import Consumer as RawConsumer  # noqa: E402
from confluent_kafka import Producer as RawProducer  # noqa: E402

from kstream.dsl import StreamBuilder  # noqa: E402
from kstream.kafka.admin import Admin  # noqa: E402
from kstream.runtime import App, AppState  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from brokers import add_broker_argument, start_broker  # noqa: E402

PARTITIONS = 4
KEYS = 1000


def produce_input(bs: str, topic: str, n: int) -> None:
    p = RawProducer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 20,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,  # retries keep each partition's order
        }
    )
    value = b"x" * 100
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, b"key-%d" % (i % KEYS))
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def count_until(bs: str, topic: str, n: int, started: float) -> float:
    """Seconds from `started` until `n` records of `topic` are readable (read_committed)."""
    c = RawConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    try:
        while seen < n:
            seen += sum(1 for m in c.consume(10_000, 0.2) if m.error() is None)
        return time.perf_counter() - started
    finally:
        c.close()


def raw_pipe(bs: str, src: str, dst: str, n: int) -> float:
    c = RawConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"raw-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    p = RawProducer({"bootstrap.servers": bs, "linger.ms": 5})
    c.subscribe([src])
    while not c.assignment():
        c.poll(0.1)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        for m in c.consume(10_000, 0.1):
            if m.error() is None:
                while True:
                    try:
                        p.produce(dst, m.value(), m.key())
                        break
                    except BufferError:
                        p.poll(0.05)
                done += 1
        p.poll(0)
    p.flush(60)
    c.commit(asynchronous=False)
    c.close()
    return time.perf_counter() - t0


def stateless(src: str, dst: str) -> Any:
    b = StreamBuilder()
    b.stream(src).map_values(lambda v: v.upper()).filter(lambda k, v: v is not None).to(dst)
    return b


def stateful(src: str, dst: str) -> Any:
    b = StreamBuilder()
    b.stream(src, key_serde="bytes").group_by_key().count(store="counts").to_stream().to(
        dst, key_serde="bytes", value_serde="long"
    )
    return b


def run_app(
    bs: str, kind: str, guarantee: str, src: str, n: int, state_dir: str, compat: str
) -> float:
    dst = f"out-{kind}-{guarantee}-{uuid.uuid4().hex[:6]}"
    Admin(bs).create_topic(dst, PARTITIONS)
    topo = (stateless if kind == "stateless" else stateful)(src, dst)
    app = App(
        topo,
        f"bench-{uuid.uuid4().hex[:8]}",
        bs,
        guarantee,
        {
            "state_dir": state_dir,
            "batch_max_records": 10_000,
            "commit_interval": 100,
            "broker_compat": compat,
        },
    )
    app.start()
    try:
        if not app.wait_for(AppState.RUNNING, AppState.ERROR, timeout=120):
            raise RuntimeError("the app did not start")
        return count_until(bs, dst, n, time.perf_counter())
    finally:
        app.close()
        if app.error is not None:
            raise app.error


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    add_broker_argument(ap)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "pipeline.json"))
    args = ap.parse_args(argv)
    n = args.records
    rows: list[dict[str, Any]] = []
    with start_broker(args.broker) as broker, tempfile.TemporaryDirectory() as state_dir:
        bs = broker.bootstrap_servers
        broker_name, compat = broker.name, broker.compat
        src = f"bench-in-{uuid.uuid4().hex[:6]}"
        Admin(bs).create_topic(src, PARTITIONS)
        produce_input(bs, src, n)
        raw_out = f"raw-out-{uuid.uuid4().hex[:6]}"
        Admin(bs).create_topic(raw_out, PARTITIONS)
        secs = raw_pipe(bs, src, raw_out, n)
        rows.append({"pipeline": "raw confluent-kafka pipe", "guarantee": "-", "seconds": secs})
        for kind in ("stateless", "stateful"):
            for guarantee in ("at_least_once", "exactly_once"):
                secs = run_app(bs, kind, guarantee, src, n, state_dir, compat)
                rows.append({"pipeline": kind, "guarantee": guarantee, "seconds": secs})
    raw_rate = n / rows[0]["seconds"]
    for r in rows:
        r["records"] = n
        r["records_per_s"] = round(n / r["seconds"])
        r["vs_raw"] = round(r["records_per_s"] / raw_rate, 3)
        r["seconds"] = round(r["seconds"], 3)
        r["config"] = {
            "broker": broker_name,
            "broker_compat": "-" if r["pipeline"].startswith("raw") else compat,
        }
    print(f"broker: {broker_name}, kstream broker_compat {compat}")
    print(f"{'pipeline':<26} {'guarantee':<14} {'records/s':>10} {'vs raw':>7}")
    for r in rows:
        print(
            f"{r['pipeline']:<26} {r['guarantee']:<14} {r['records_per_s']:>10,} "
            f"{r['vs_raw']:>7.2f}"
        )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {"records": n, "partitions": PARTITIONS, "broker": broker_name, "results": rows},
            f,
            indent=2,
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
