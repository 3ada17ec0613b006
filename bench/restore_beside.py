"""Restoration beside processing on Apache Kafka: a kept task's records/s while the same
instance restores a task of 1,000,000 keys (kstream.runtime.restorer).

The app counts records per key (`group_by_key().count()`, in-memory store) over an input topic
of two partitions, under the cooperative protocol. Two instances, A and B, run one task each:

1. `--keys` distinct keys are produced to B's partition; B counts them all (its store then
   holds that many counts, and its changelog as many records).
2. Live input flows to A's partition (`--rate` records/s), and a sampler reads A's processed
   records every `--bucket` seconds (`Metrics.processed_total`; B's partition gets no more
   input, so everything A processes is its kept task's).
3. B closes. A is assigned B's partition and restores its store from the changelog
   (`Metrics.restored_by_store`) while its kept task goes on.

Printed: the timeline (A's records/s per bucket, the records restored so far, A's state) and a
summary: how long the restore took, and the least records/s of A's kept task in a bucket that
lies wholly inside the restore (0 would mean it stopped, as when the restore ran inside the
rebalance callback). Each bucket also shows the time the process spent in the cyclic garbage
collector's full collections, which stop every thread. Written to
bench/results/restore_beside.json and .txt; the runtime's log (kstream.runtime at INFO, with
times) goes to stderr.

    python bench/restore_beside.py [--keys 1000000] [--rate 2000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

STORE = "counts"


def topology(src: str, out: str) -> Any:
    from kstream.dsl import StreamBuilder

    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
        store=STORE
    ).to_stream().to(out, key_serde="string", value_serde="long")
    return b


def new_app(bs: str, app_id: str, src: str, out: str, state_dir: Path, guarantee: str) -> Any:
    from kstream.runtime import App

    return App(
        topology(src, out),
        app_id=app_id,
        bootstrap_servers=bs,
        processing_guarantee=guarantee,
        config={
            "state_dir": str(state_dir),
            "batch_max_records": 10_000,
            "rebalance_protocol": "cooperative",
        },
    )


def wait(cond: Any, what: str, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def committed(bs: str, group: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, partition)], timeout=10)
        return max(0, tp.offset)
    finally:
        c.close()


def produce_keys(bs: str, topic: str, partition: int, keys: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1_000_000})
    for i in range(keys):
        while True:
            try:
                p.produce(topic, b"1", key=f"key-{i}".encode(), partition=partition)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(60)


class Feeder(threading.Thread):
    """`rate` records/s of a few keys to one partition until stopped."""

    def __init__(self, bs: str, topic: str, partition: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.bs, self.topic, self.partition, self.rate = bs, topic, partition, rate
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bs, "linger.ms": 5})
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                p.produce(
                    self.topic,
                    b"1",
                    key=f"live-{self.sent % 100}".encode(),
                    partition=self.partition,
                )
                self.sent += 1
            p.poll(0)
            time.sleep(0.01)
        p.flush(10)


class Sampler(threading.Thread):
    """Every `bucket` seconds: A's processed records, its restored records, its state."""

    def __init__(self, app: Any, bucket: float) -> None:
        super().__init__(daemon=True)
        self.app, self.bucket = app, bucket
        self.stop = threading.Event()
        self.rows: list[dict[str, Any]] = []

    def run(self) -> None:
        t0 = time.monotonic()
        last = self.app.metrics.processed_total
        gc.callbacks.append(self._gc)
        try:
            while not self.stop.wait(self.bucket):
                now = self.app.metrics.processed_total
                gc_ms, self._gc_s = self._gc_s * 1000, 0.0
                self.rows.append(
                    {
                        "t": round(time.monotonic() - t0, 2),
                        "records_per_s": round((now - last) / self.bucket),
                        "restored": self.app.metrics.restored_by_store.get(STORE, 0),
                        "state": self.app.state.value,
                        "gc_ms": round(gc_ms),
                    }
                )
                last = now
        finally:
            gc.callbacks.remove(self._gc)

    _gc_s = 0.0
    _gc_t0 = 0.0

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        """Time the cyclic collector's full (generation 2) collections, in any thread: a
        bucket without records may be one the whole process spent collecting."""
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self._gc_s += time.perf_counter() - self._gc_t0


def run(bs: str, keys: int, rate: int, bucket: float, guarantee: str, tmp: Path) -> dict[str, Any]:
    from kstream.kafka.admin import Admin, TopicSpec

    run_id = uuid.uuid4().hex[:8]
    src, out, app_id = f"in-{run_id}", f"out-{run_id}", f"restore-beside-{run_id}"
    admin = Admin(bs)
    admin.create_topics([TopicSpec(src, 2), TopicSpec(out, 2)])
    a = new_app(bs, app_id, src, out, tmp / "a", guarantee)
    b = new_app(bs, app_id, src, out, tmp / "b", guarantee)
    a.start()
    wait(lambda: a.state.value == "RUNNING" and len(a.assigned_partitions()) == 2, "A running")
    b.start()
    wait(
        lambda: len(a.assigned_partitions()) == 1 and len(b.assigned_partitions()) == 1,
        "A and B one partition each",
    )
    wait(lambda: a.state.value == "RUNNING" and b.state.value == "RUNNING", "both running")
    [(_, pa)] = a.assigned_partitions()
    [(_, pb)] = b.assigned_partitions()
    t0 = time.monotonic()
    produce_keys(bs, src, pb, keys)
    wait(lambda: committed(bs, app_id, src, pb) >= keys, f"B counting {keys:,} keys", 900)
    prefill_s = time.monotonic() - t0
    feeder = Feeder(bs, src, pa, rate)
    feeder.start()
    sampler = Sampler(a, bucket)
    time.sleep(2.0)  # A's kept task at its steady rate
    sampler.start()
    time.sleep(2.0)
    b.close()
    wait(
        lambda: len(a.assigned_partitions()) == 2 and a.state.value == "RUNNING",
        "A running both tasks",
        900,
    )
    time.sleep(3.0)
    sampler.stop.set()
    sampler.join()
    feeder.stop.set()
    feeder.join()
    a.close()
    rows = sampler.rows
    # the restore: from the first bucket whose restored count moved to the last that did
    moving = [i for i in range(1, len(rows)) if rows[i]["restored"] > rows[i - 1]["restored"]]
    per_s = max(1, round(1 / bucket))  # buckets in a second
    inside = rows[moving[0] : moving[-1]] if len(moving) > 1 else []
    return {
        "keys": keys,
        "rate": rate,
        "bucket_s": bucket,
        "guarantee": guarantee,
        "prefill_s": round(prefill_s, 1),
        "restored": rows[-1]["restored"] if rows else 0,
        "restore_s": round(len(inside) * bucket, 2),
        "kept_min_records_per_s_while_restoring": min(
            (r["records_per_s"] for r in inside), default=None
        ),
        "kept_zero_buckets_while_restoring": sum(1 for r in inside if r["records_per_s"] == 0),
        "kept_min_records_per_s_1s_while_restoring": min(
            (
                round(sum(r["records_per_s"] for r in inside[i : i + per_s]) / per_s)
                for i in range(len(inside) - per_s + 1)
            ),
            default=None,
        ),
        "zero_buckets_before": sum(1 for r in rows[: moving[0]] if r["records_per_s"] == 0)
        if moving
        else None,
        "kept_median_records_per_s_before": sorted(
            r["records_per_s"] for r in rows[: moving[0]] if moving
        )[len(rows[: moving[0]]) // 2]
        if moving and moving[0] > 0
        else None,
        "timeline": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=2000, help="live input records/s to A's task")
    ap.add_argument("--bucket", type=float, default=0.25, help="sampling interval, seconds")
    ap.add_argument("--guarantee", default="exactly_once_v2")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "restore_beside.json"))
    args = ap.parse_args(argv)
    import logging

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(threadName)s %(name)s %(message)s"
    )
    logging.getLogger("kstream.runtime").setLevel(logging.INFO)
    from brokers import start_broker

    with start_broker("kafka") as broker, tempfile.TemporaryDirectory() as tmp:
        row = run(
            broker.bootstrap_servers, args.keys, args.rate, args.bucket, args.guarantee, Path(tmp)
        )
        version = broker.version
    lines = [
        f"Apache Kafka {version}; {args.guarantee}; cooperative; {row['keys']:,} keys restored "
        f"by instance A while its kept task gets {args.rate} records/s; {args.bucket:g} s buckets",
        f"restored {row['restored']:,} records in about {row['restore_s']} s; kept task while "
        f"restoring: least {row['kept_min_records_per_s_while_restoring']} records/s, "
        f"{row['kept_zero_buckets_while_restoring']} bucket(s) at 0, least over a second "
        f"{row['kept_min_records_per_s_1s_while_restoring']} records/s; before the restore: "
        f"median {row['kept_median_records_per_s_before']} records/s, "
        f"{row['zero_buckets_before']} bucket(s) at 0",
        f"{'t (s)':>7} {'records/s':>10} {'restored':>10} {'full gc ms':>10}  state",
    ]
    for r in row["timeline"]:
        lines.append(
            f"{r['t']:>7} {r['records_per_s']:>10} {r['restored']:>10} {r['gc_ms']:>10}  "
            f"{r['state']}"
        )
    text = "\n".join(lines)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"broker": version, **row}, indent=1) + "\n")
    Path(args.out).with_suffix(".txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
