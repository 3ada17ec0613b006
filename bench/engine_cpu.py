"""CPU cost of the engine alone: P1-P3 through a `Task`, no broker, batches of 10,000.

Feeds the benchmark's records (bytes, as a consumer returns them) to the topology's task in
batches, with a collector that only counts, and applies the stores' write caches after each
batch as a commit would. Measures the processing path (serdes, nodes, stores, write cache) that
bench/run_all.py measures together with the clients and the broker; useful to compare changes
to the hot paths without the broker's noise.

`--runtime` adds what the runtime puts around the task, still without a broker: the runtime's
sink collector (the provenance header of every output, handed to a producer that drops it), as
`kstream.runtime.tasks` sets it up; with `--debug-metrics` also the store metrics of the debug
recording level (user stores timed at the runtime's sampling rate into a `Metrics`). The
difference between the modes is their cost.

    python bench/engine_cpu.py [--records 200000] [--backend memory|lmdb] [--repeats 3]
                               [--no-gc-pause] [--runtime [--debug-metrics]]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kstream_pipe import build  # noqa: E402
from run_all import BASE_TS, KEYS, SPAN_MS, value_of  # noqa: E402

from kstream.records import Record  # noqa: E402
from kstream.topology.task import Task  # noqa: E402


class CountingCollector:
    def __init__(self) -> None:
        self.sent = 0

    def send(self, *args: Any) -> None:
        self.sent += 1

    def partitions_for(self, topic: str) -> int:
        return 1


class DroppingProducer:
    """The runtime collector's producer, minus the client: counts the records it is given."""

    def __init__(self) -> None:
        self.sent = 0

    def produce(self, *args: Any) -> None:
        self.sent += 1

    # the client's own produce, which the runtime's collector calls directly when it has one
    client_produce = produce

    def is_fatal(self) -> bool:
        return False


class RuntimeStandIn:
    """What the runtime's Collector reads of its RuntimeTask: the task and the producer."""

    def __init__(self) -> None:
        self.task: Any = None
        self.producer = DroppingProducer()


def runtime_parts(tmp: str, backend: str, store_metrics: bool) -> tuple[Any, Any, RuntimeStandIn]:
    """(collector, store opener, stand-in) wired as kstream.runtime.tasks wires them (store
    metrics: as at metrics_recording_level "debug")."""
    from kstream.metrics import STORE_TIMING_SAMPLE_EVERY, Metrics
    from kstream.runtime.collector import Collector
    from kstream.state import open_store
    from kstream.state.metrics import instrument

    metrics = Metrics("cpu")
    stand_in = RuntimeStandIn()

    def opener(spec: Any, partition: int) -> Any:
        store = open_store(
            spec, app_id="cpu", partition=partition, state_dir=tmp, default_backend=backend
        )
        if not store_metrics:
            return store
        return instrument(store, metrics, sample_every=STORE_TIMING_SAMPLE_EVERY)

    return Collector(stand_in), opener, stand_in  # type: ignore[arg-type]


def run(
    pipeline: str,
    n: int,
    backend: str,
    batch: int,
    gc_pause: bool = True,
    runtime: bool = False,
    store_metrics: bool = False,
) -> tuple[float, int]:
    topo = build(pipeline, "in", "out").build()
    compiled = topo.compile("cpu")
    compiled.resolve_partitions({t: 1 for t in compiled.external_source_topics})
    inputs = [
        (b"user-%d" % (i % KEYS), value_of(i)[0], BASE_TS + i * SPAN_MS // n) for i in range(n)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        coll: Any = CountingCollector()
        opener = None
        stand_in = None
        if runtime:
            coll, opener, stand_in = runtime_parts(tmp, backend, store_metrics)
        tasks = [
            Task(
                compiled,
                sub,
                0,
                collector=coll,
                state_dir=tmp,
                default_backend=backend,
                open_store=opener,
            )
            for sub in range(len(compiled.subtopologies))
        ]
        if stand_in is not None:
            stand_in.task = tasks[-1]  # the sink's task
        t0 = time.process_time()
        for lo in range(0, n, batch):
            recs = [
                Record(k, v, ts, (), "in", 0, lo + j)
                for j, (k, v, ts) in enumerate(inputs[lo : lo + batch])
            ]
            # as the stream thread does (config gc_pause): the collector is off during a batch
            if gc_pause:
                gc.disable()
            try:
                for t in tasks:
                    if "in" in t.source_topics:
                        t.process(recs)
            finally:
                gc.enable()
            for t in tasks:
                t.flush_stores()
        secs = time.process_time() - t0
        for t in tasks:
            t.close()
    return secs, stand_in.producer.sent if stand_in is not None else coll.sent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--backend", default="memory")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument(
        "--no-gc-pause", action="store_true", help="leave the cyclic GC on during batches"
    )
    ap.add_argument("--runtime", action="store_true", help="the runtime's collector too")
    ap.add_argument(
        "--debug-metrics",
        action="store_true",
        help="with --runtime: store metrics too (metrics_recording_level debug)",
    )
    args = ap.parse_args()
    pause = not args.no_gc_pause
    for p in ("P1", "P2", "P3"):
        secs = [
            run(p, args.records, args.backend, args.batch, pause, args.runtime, args.debug_metrics)[
                0
            ]
            for _ in range(args.repeats)
        ]
        best = min(secs)
        print(
            f"{p} {args.backend:<7} {best * 1e6 / args.records:6.2f} us/record, "
            f"{args.records / best:>10,.0f} records/s per CPU second "
            f"(best of {args.repeats}; median {statistics.median(secs):.2f}s; "
            f"gc {'paused' if pause else 'on'} during batches"
            f"{'; runtime collector' if args.runtime else ''}"
            f"{' and store metrics' if args.runtime and args.debug_metrics else ''})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
