"""The CPU per record of a stateful task's state path on Spark, without Spark's scheduling.

`bench/spark.py` times whole queries; this one times what a Python worker spends in one
task's `handleInputRows` (`kstream.spark.task_processor.TaskProcessor`, run as it is) on the
windowed count of bench/spark.py (1-minute windows, count per user), batch after batch of one
task, in three modes:

- `memory`: the same task (`TaskRun`) over in-memory stores kept across batches: the kstream
  processors' own cost, the floor of the other two;
- `dict`: `TaskProcessor.handleInputRows` over `DictMap`s (the state path's Python work:
  prefetch, buckets, per-key groups, pickling, directories, sync; no state server);
- `server`: the same over `SparkMap`s speaking PySpark's state protocol (framed protobuf
  `StateRequest`s, pickled rows) to a map-state server in another process over a local socket,
  as a Python worker talks to its JVM (the server's own CPU is not counted, as the JVM's is not
  a Python worker's).

Each run starts from empty state and feeds `--batches` batches of `--records` records (one
task's share of a micro-batch: bench/spark.py's 100,000-record batches over 2 partitions give
50,000), record i of user i mod `--keys`, timestamps 1 ms apart; the figure is this process's
CPU (user + system) per record over the batches after the first (`us_per_record`), the median
of `--repeats` runs, with the state requests per batch. The state-path cost is a mode's figure
minus `memory`'s.

    python bench/spark_state_path.py [--keys 1000 --keys 1000000] [--records 50000]
        [--batches 4] [--repeats 3] [--mode memory --mode dict --mode server]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import socket
import statistics
import struct
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from kstream.dsl import StreamBuilder
from kstream.spark.packing import pack_input, unpack_input
from kstream.spark.plan import TaskPlan, build_task_plan
from kstream.spark.task_processor import TaskProcessor
from kstream.spark.task_state import DictMap
from kstream.spark.tasks import TaskRun
from kstream.spark.wire import SOURCE_ARROW_SCHEMA, ArrowChunk
from kstream.topology.topology import Topology
from store_backends.memory import MemoryBackend

MODES = ("memory", "dict", "server")


def windowed_count() -> Topology:
    """bench/spark.py's windowed count (same DSL calls)."""
    from kstream.dsl.windows import TimeWindows

    b = StreamBuilder()
    (
        b.stream("in", key_serde="string", value_serde="json")
        .group_by(lambda _k, v: v["user"], key_serde="string")
        .windowed_by(TimeWindows.of("1m", grace="1h"))
        .count()
        .to_stream()
        .to("out", value_serde="long")
    )
    return b.build()


def batches(plan: TaskPlan, sub: int, keys: int, records: int, count: int) -> list[list[bytes]]:
    """`count` batches of one task's packed input (partition 0 of the sub-topology's source)."""
    (topic,) = plan.compiled.subtopologies[sub].source_topics
    pad = "x" * 60
    out = []
    for b in range(count):
        first = b * records
        idx = range(first, first + records)
        users = [f"user-{i % keys}" for i in idx]
        cols = {
            "topic": [topic] * records,
            "partition": [0] * records,
            "offset": list(idx),
            "timestamp": [1_000_000 + i for i in idx],
            "key": [u.encode() for u in users],
            "value": [
                json.dumps({"user": u, "n": i, "pad": pad}).encode()
                for u, i in zip(users, idx, strict=True)
            ],
            "headers": [None] * records,
            "timestamp_type": [1] * records,
        }
        batch = pa.RecordBatch.from_pydict(cols, schema=SOURCE_ARROW_SCHEMA)
        out.append([r.column("rows")[0].as_py() for r in pack_input([ArrowChunk(batch)])])
    return out


# --- a map-state server speaking PySpark's protocol ------------------------------------------


def _serve(conn: socket.socket, client: socket.socket) -> None:
    """Answer framed `StateRequest`s on `conn` one at a time, as Spark's state server does,
    until the client hangs up (`client`: its end, inherited by the fork and closed here)."""
    from pyspark.sql.streaming.proto import StateMessage_pb2 as m

    client.close()

    data: dict[str, dict[bytes, bytes]] = {}
    f = conn.makefile("rwb", buffering=1 << 20)
    head = struct.Struct(">ii")
    while True:
        got = f.read(8)
        if len(got) < 8:
            return
        _, size = head.unpack(got)
        request = m.StateRequest()
        request.ParseFromString(f.read(size))
        call = request.stateVariableRequest.mapStateCall
        store = data.setdefault(call.stateName, {})
        answer = m.StateResponse(statusCode=0)
        which = call.WhichOneof("method")
        if which == "getValue":
            value = store.get(call.getValue.userKey)
            if value is not None:
                answer.value = value
        elif which == "updateValue":
            store[call.updateValue.userKey] = call.updateValue.value
        elif which == "removeKey":
            store.pop(call.removeKey.userKey, None)
        raw = answer.SerializeToString()
        f.write(struct.pack(">i", len(raw)) + raw)
        f.flush()


class _Api:
    def __init__(self, sock: socket.socket) -> None:
        self._client_socket = sock


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self._stateful_processor_api_client = _Api(sock)


class ServedMapState:
    """What `SparkMap` reads of a pyspark `MapState`: its name and its client's socket."""

    def __init__(self, name: str, sock: socket.socket) -> None:
        self._stateName = name
        self._mapStateClient = _Client(sock)

    def iterator(self) -> Iterator[Any]:
        raise NotImplementedError("the windowed count never iterates a store's map")


class Server:
    """The server process and the client's end of its socket."""

    def __init__(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.sock = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        listener.close()
        ctx = multiprocessing.get_context("fork")
        self.proc = ctx.Process(target=_serve, args=(conn, self.sock), daemon=True)
        self.proc.start()
        conn.close()

    def close(self) -> None:
        self.sock.close()
        self.proc.join(5)


# --- the runs --------------------------------------------------------------------------------


class KeptMemory(MemoryBackend):
    """An in-memory backend that outlives the task closing it (the next batch reopens it)."""

    def close(self) -> None:
        return None


class Meta:
    """The task's `ValueState`."""

    def __init__(self) -> None:
        self.row: tuple[bytes] | None = None

    def exists(self) -> bool:
        return self.row is not None

    def get(self) -> tuple[bytes] | None:
        return self.row

    def update(self, row: tuple[bytes]) -> None:
        self.row = row


class Counting:
    """A `MapLike` that counts the calls and entries going to the one it wraps."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests = 0

    def get(self, key: bytes) -> bytes | None:
        self.requests += 1
        got: bytes | None = self.inner.get(key)
        return got

    def put(self, key: bytes, value: bytes) -> None:
        self.requests += 1
        self.inner.put(key, value)

    def remove(self, key: bytes) -> None:
        self.requests += 1
        self.inner.remove(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.inner.items())

    def get_many(self, keys: Any) -> list[bytes | None]:
        self.requests += len(keys)
        got: list[bytes | None] = self.inner.get_many(keys)
        return got

    def write_many(self, ops: Any) -> None:
        self.requests += len(ops)
        self.inner.write_many(ops)


def run(mode: str, plan: TaskPlan, sub: int, feed: list[list[bytes]]) -> dict[str, float]:
    """One run from empty state: CPU and wall seconds of each batch, and requests per batch."""
    import pandas as pd

    stores = sorted(plan.compiled.subtopologies[sub].stores)
    cpu, wall, requests = [], [], []
    server = Server() if mode == "server" else None
    try:
        if mode == "memory":
            kept: dict[str, KeptMemory] = {}
            saved: dict[str, Any] = {}
            for blobs in feed:
                c0, w0 = time.process_time(), time.perf_counter()
                task = TaskRun(
                    plan, sub, 0, saved, lambda spec: kept.setdefault(spec.name, KeptMemory())
                )
                task.run(unpack_input(blobs))
                saved = task.snapshot()
                task.close()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
                requests.append(0)
        else:
            from kstream.spark.state_client import SparkMap

            proc = TaskProcessor(plan.blob(), sub, [0], slots=2)
            proc.partition_of = {0: 0}
            proc.meta = Meta()  # type: ignore[assignment]
            maps = {
                name: Counting(
                    DictMap() if server is None else SparkMap(ServedMapState(name, server.sock))
                )
                for name in stores
            }
            proc.maps = maps  # type: ignore[assignment]
            for blobs in feed:
                before = sum(m.requests for m in maps.values())
                c0, w0 = time.process_time(), time.perf_counter()
                list(proc.handleInputRows((0,), iter([pd.DataFrame({"rows": blobs})]), None))
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
                requests.append(sum(m.requests for m in maps.values()) - before)
    finally:
        if server is not None:
            server.close()
    return {
        "cpu_s": sum(cpu[1:]),
        "wall_s": sum(wall[1:]),
        "requests_per_batch": statistics.median(requests[1:]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, action="append", help="distinct users (repeatable)")
    ap.add_argument("--records", type=int, default=50_000, help="records per batch of the task")
    ap.add_argument("--batches", type=int, default=4, help="batches per run (first not counted)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mode", action="append", choices=MODES)
    ap.add_argument(
        "--freeze",
        action="store_true",
        help="gc.freeze() what is loaded before the runs, as kstream's worker daemon does with "
        "what it preloads (kstream.spark.daemon)",
    )
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    plan = build_task_plan(windowed_count(), "state-path-bench")
    # the task reads packed repartition-topic batches, not its upstream's shuffled outputs
    # (`kstream.spark.fusion`): the state path is the same either way
    plan.unfuse(set(plan.fused.values()))
    (sub,) = plan.stateful
    modes = args.mode or list(MODES)
    if args.freeze:
        import pandas  # noqa: F401  (what a worker has loaded: frozen with the rest)

        gc.collect()
        gc.freeze()
    rows = []
    for keys in args.keys or [1000, 1_000_000]:
        feed = batches(plan, sub, keys, args.records, args.batches)
        counted = args.records * (args.batches - 1)
        for mode in modes:
            runs = [run(mode, plan, sub, feed) for _ in range(args.repeats)]
            per = [1e6 * r["cpu_s"] / counted for r in runs]
            row = {
                "keys": keys,
                "mode": mode,
                "us_per_record": round(statistics.median(per), 2),
                "us_per_record_runs": [round(p, 2) for p in per],
                "wall_us_per_record": round(
                    statistics.median(1e6 * r["wall_s"] / counted for r in runs), 2
                ),
                "requests_per_batch": runs[0]["requests_per_batch"],
            }
            rows.append(row)
            print(
                f"keys {keys:>9,}  {mode:<7} {row['us_per_record']:>7.2f} us/record CPU "
                f"(runs {row['us_per_record_runs']}), wall {row['wall_us_per_record']:.2f}, "
                f"{row['requests_per_batch']:,.0f} state requests/batch",
                flush=True,
            )
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "load_end": load}, f, indent=1)


if __name__ == "__main__":
    main()
