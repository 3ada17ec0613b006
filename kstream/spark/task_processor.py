"""The `transformWithStateInPandas` processor of a stateful sub-topology: one group per task.

Spark calls `handleInputRows` once per task (sub-topology, partition) and micro-batch, with that
task's records of the batch. Its state is:

- `task`, a `ValueState`: the task's metadata (stream time, punctuation schedules, provenance
  high marks, the global tables' copies and offsets, the store directories' page counts and
  bucket layouts), small whatever the stores hold;
- one `MapState` per store (`store.<name>`), read and written per user key through
  `kstream.spark.task_state.MapBackend`, the user keys' entries kept in hash buckets of about
  64 keys each (`kstream.spark.buckets`): a batch costs what it touches, not the store's size.
  The entries of the batch's record keys are read together before the task runs (a store
  where that guess mostly misses is listed in the metadata's `prefetch_off` and not guessed
  for again), and the changes are written together after it.

Spark's RocksDB state store provider (the session default) keeps these on the executors' disks
and in the checkpoint. Window, session and dedup stores expire their own data by stream time
(as on the native runtime), not through Spark's processing-time TTL, which could drop windows
a replay still needs.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from kstream.errors import TopologyError
from kstream.spark.buckets import BucketedMap
from kstream.spark.failure import in_worker
from kstream.spark.fusion import fused_input
from kstream.spark.packing import pack_by_slot, unpack_input
from kstream.spark.plan import TaskPlan, plan_of
from kstream.spark.sink import WRITTEN_SLOT, TaskWriter
from kstream.spark.state_client import SparkMap
from kstream.spark.task_state import DATA_TAG, MapBackend, gc_paused
from kstream.spark.tasks import TaskRun

META_STATE = "task"
META_SCHEMA = "blob binary"
MAP_KEY_SCHEMA = "k binary"
MAP_VALUE_SCHEMA = "v binary"
LAYOUT = 2
"""How the stores sit in Spark's state: 2 = user keys in hash buckets (`BucketedMap`)."""
BATCHES = "batches"
"""The metadata's count of the batches a task that writes its own outputs has run: the marker
of its next write. Counted whether or not a batch had outputs, so a replay that has outputs
where the first run had none (a wall-clock punctuation) still writes them."""
WRITER = "writer"
"""The metadata's token of the producer that wrote the task's last batch (`TaskWriter.write`)."""


def store_state_name(store: str) -> str:
    return f"store.{store}"


class TaskProcessor(StatefulProcessor):
    """Runs task (sub-topology `sub`, partition p) for the group whose key is `labels[p]`.

    Its input rows and its outputs are packed (`kstream.spark.packing`): records in, one row
    per packed source batch; out, one row per write slot of the query's `slots`. With `writer`
    (`plan.tasks_write`) the task writes its outputs itself, in a transaction of its own marked
    with its count of batches (`BATCHES`, in its metadata), and hands over one `WRITTEN_SLOT`
    row saying what it wrote.
    """

    def __init__(
        self,
        blob: bytes,
        sub: int,
        labels: Sequence[int],
        slots: int,
        writer: TaskWriter | None = None,
    ) -> None:
        self.blob = blob
        self.sub = sub
        self.labels = list(labels)
        self.slots = slots
        self.writer = writer

    def init(self, handle: StatefulProcessorHandle) -> None:
        plan = plan_of(self.blob)
        self.partition_of = {label: p for p, label in enumerate(self.labels)}
        self.meta = handle.getValueState(META_STATE, META_SCHEMA)
        stores = plan.compiled.subtopologies[self.sub].stores
        self.maps = {
            name: SparkMap(
                handle.getMapState(store_state_name(name), MAP_KEY_SCHEMA, MAP_VALUE_SCHEMA)
            )
            for name in sorted(stores)
        }

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        """One batch of the task: its packed outputs, one row per write slot.

        Python's cyclic collector is paused for the batch, as the native runtime pauses it
        (config `gc_pause`): a batch allocates objects per record that reference counting
        frees, and the collector's scans of them cost as much as the batch's own work
        (bench/spark_state_path.py). It runs again before the rows leave."""
        import pandas as pd

        plan = plan_of(self.blob)
        with gc_paused(plan.gc_pause):
            packed = self._batch(plan, key, rows)
        if packed:  # pyspark cannot convert an empty frame of this schema
            slots = sorted(packed)
            yield pd.DataFrame({"slot": slots, "rows": [packed[s] for s in slots]})

    def _batch(self, plan: TaskPlan, key: Any, rows: Iterator[Any]) -> dict[int, bytes]:
        """Run the batch of the task whose group key is `key`; its outputs packed per slot."""
        partition = self.partition_of[int(key[0])]
        blobs: list[bytes] = []
        for pdf in rows:
            blobs.extend(pdf["rows"].tolist())
        got = self.meta.get() if self.meta.exists() else None
        saved: dict[str, Any] = {} if got is None else pickle.loads(bytes(got[0]))
        passing: dict[str, list[Any]] | None = None
        fused_next: dict[tuple[str, int], int] = dict(saved.get("fused_next", {}))
        if self.sub in plan.fused:
            # the upstream's outputs, handed over by Spark's shuffle (`kstream.spark.fusion`)
            got_input = fused_input(blobs, set(plan.sources[self.sub]), fused_next)
            records, passing = got_input.records, got_input.passing
        else:
            records = unpack_input(blobs)
        if saved and self.maps and saved.get("layout") != LAYOUT:
            raise TopologyError(
                f"sub-topology {self.sub}'s Spark state was written by a kstream that kept its "
                "stores in another layout: start the query from a new checkpoint (and reset "
                "the app's topics)"
            )
        dirs: dict[str, dict[bytes, list[int]]] = saved.get("dirs", {})
        layouts: dict[str, dict[str, int]] = saved.get("buckets", {})
        backends: list[MapBackend] = []

        def backend(spec: Any) -> MapBackend:
            store_dirs = dirs.setdefault(spec.name, {})
            buckets = BucketedMap(self.maps[spec.name], layouts.setdefault(spec.name, {}), DATA_TAG)
            b = MapBackend(spec.name, spec.kind, buckets, store_dirs)
            backends.append(b)
            return b

        task = TaskRun(plan, self.sub, partition, saved, backend)
        guessless = set(saved.get("prefetch_off", ()))
        try:
            keys = [r.key for r in records if r.key is not None]
            for b in backends:
                if b.name not in guessless:
                    b.prefetch(keys)
            with in_worker():
                cols = task.run(records)
            for b in backends:
                b.sync()
                if b.prefetch_missed():
                    guessless.add(b.name)
            meta = task.snapshot()
            meta["dirs"] = {name: d for name, d in dirs.items() if d}
            meta["buckets"] = layouts
            meta["layout"] = LAYOUT
            if guessless:
                meta["prefetch_off"] = sorted(guessless)
            if fused_next:
                meta["fused_next"] = fused_next
        finally:
            task.close()
        if passing is not None and passing["seq"]:
            cols = {name: passing[name] + cols[name] for name in cols}
        out = pack_by_slot(cols, self.slots) if self.writer is None else None
        if out is None:
            out = self._write(plan, partition, cols, saved, meta)
        self.meta.update((pickle.dumps(meta, protocol=5),))
        return out

    def _write(
        self,
        plan: TaskPlan,
        partition: int,
        cols: dict[str, list[Any]],
        saved: dict[str, Any],
        meta: dict[str, Any],
    ) -> dict[int, bytes]:
        """Write the batch's outputs from the task (`writer`), its count of batches and the
        writing producer's token kept in `meta`; the row saying what it wrote, if anything."""
        assert self.writer is not None
        batch = int(saved.get(BATCHES, 0))
        meta[BATCHES] = batch + 1
        meta[WRITER] = saved.get(WRITER)
        if not cols["seq"]:
            return {}
        written, meta[WRITER] = self.writer.write(
            partition,
            cols,
            batch,
            plan.bootstrap_servers,
            plan.client_supplier,
            plan.provenance,
            saved.get(WRITER),
        )
        return {WRITTEN_SLOT: written}

    def close(self) -> None:
        return None
