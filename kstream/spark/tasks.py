"""Sub-topologies run by kstream's own `Task` on Spark: the one Spark engine, for any operator.

Every topology Spark runs (stateless chains, aggregations, windowed aggregations with grace and
emit final, deduplicate, stream-table, stream-stream and global-table joins, KTable re-grouping,
chained stateful operators, user processors) runs here, with the real kstream processors, so
it forwards the same updates as the native engine:

- the topology is compiled for the app id, exactly as the native runtime compiles it. Every
  sub-topology becomes one streaming query that reads the sub-topology's source topics (external
  ones and repartition topics) and writes through the transactional sink; repartition topics are
  real Kafka topics (`<app_id>-<name>`, created with the partition count the native runtime
  gives them), so the hop between sub-topologies is the same as in Kafka Streams, but where a
  re-keying sub-topology only feeds one stateful sub-topology: the two are one query and the
  hop is Spark's shuffle (`kstream.spark.fusion`);
- a stateful sub-topology groups its input by Kafka partition (`transformWithStateInPandas`,
  the partition mapped to a label that Spark spreads evenly over its cores): each group is one
  task (sub-topology, partition). `kstream.spark.task_processor` builds a `Task` whose stores
  are typed stores over Spark state kept per key (`kstream.spark.task_state`: a `MapState` per
  store, read and written only for the keys the batch touches), processes the batch's records,
  flushes the stores, writes the changed keys back, and keeps the task's stream time,
  punctuation schedules and provenance marks in a small `ValueState`. So a task sees the same
  records in the same order as in the native runtime: the same stream time, the same windows
  closing, the same late records dropped. Records of several topics in one batch are merged as
  Kafka Streams merges partitions: the record with the smallest timestamp at the head of its
  partition goes first, each partition in offset order;
- a stateless sub-topology (only built-in stateless operators, no store, one external input
  topic) runs batch-wise inside the source's read tasks, one `Task` per Kafka partition, with
  no shuffle and no Spark state: a topology without state is one such query, which reads,
  processes and hands its packed outputs to the sink's slots in the read tasks;
- global tables: a task of a sub-topology that may read them keeps its own copy of every global
  store in its state, with the offsets read so far, and reads the global topics from there up
  to their end before each batch (Kafka Streams' global thread, caught up at batch start);
- with `trigger="availableNow"` a query starts once the queries it reads from have finished,
  so it reads to the end of what its upstream wrote, and queries that do not feed one another
  run side by side; with `processingTime` all run side by side.

Wall-clock punctuations fire at the end of a task's micro-batch, when due (their schedule is kept
in the task's state): so only while records arrive, since a micro-batch runs only then. A window
with emit final therefore closes when stream time passes it, not after wall-clock silence as on
the native runtime. Record headers are read from Kafka and passed on as in Kafka Streams.

Repeats of records a broker still shows after an aborted transaction (`broker_compat` only,
`TaskPlan.provenance`: Apache Kafka hides them from read_committed readers): a task drops an
input record whose provenance id is at or below the highest id it has seen from the same source
partition on that input topic (kstream writers keep each source partition's outputs in offset
order, so a repeat is never above the mark). A sub-topology that reads a repartition topic is
therefore always run as a stateful task, since a batch this runner's sink aborted before a crash
is shown there. Stateless sub-topologies over external topics keep no state and rely on the
broker to hide aborted records, as Kafka does. A
task's copy of the global tables travels whole in its metadata each batch: global tables
should stay small.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from kstream.broker_compat import HighMarks
from kstream.errors import TopologyError
from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier
from kstream.records import Record
from kstream.spark.failure import in_worker
from kstream.spark.packing import output_batch, pack_by_slot
from kstream.spark.plan import TaskPlan, build_task_plan, plan_of
from kstream.spark.policy import RecordPolicy
from kstream.spark.task_rows import TaskRows, chosen_topic_partitions
from kstream.spark.task_state import gc_paused
from kstream.spark.wire import ROW_SCHEMA, SourceChunk
from kstream.state.caching import RecordCache
from kstream.state.provenance import header_value
from kstream.topology.processor import PunctuationType

__all__ = [
    "ROW_SCHEMA",
    "TaskPlan",
    "TaskRun",
    "build_task_plan",
    "chosen_topic_partitions",
    "partition_queues",
    "read_task_function",
    "stateless_function",
]

_GLOBAL_WAIT_S = 30.0


def _memory_store(spec: Any, partition: int, data: Mapping[bytes, bytes] | None) -> Any:
    from kstream.state.build import build_store
    from store_backends.memory import MemoryBackend

    backend = MemoryBackend(spec.name, partition)
    if data:
        backend.write_batch(dict(data), [], None)
    return build_store(spec, partition=partition, backend=backend)


def _contents(store: Any) -> dict[bytes, bytes]:
    return dict(store.backend.range(None, None))


def partition_queues(records: Sequence[Record]) -> list[list[Record]]:
    """`records` as one queue per (topic, partition), each in offset order, the queues in
    (topic, partition) order, which breaks ties between equal head timestamps; the task
    merges them by head timestamp (Kafka Streams' choice among partitions, `Task.order_queues`)
    after its timestamp extractors have stamped them."""
    queues: dict[tuple[str, int], list[Record]] = {}
    for r in records:
        queues.setdefault((r.topic or "", r.partition or 0), []).append(r)
    for q in queues.values():
        q.sort(key=lambda r: r.offset or 0)
    return [queues[tp] for tp in sorted(queues)]


def _read_globals(
    plan: TaskPlan, offsets: dict[str, dict[int, int]]
) -> dict[str, list[list[Record]]]:
    """New records of the global topics since `offsets` (updated), per topic and partition."""
    from confluent_kafka import OFFSET_BEGINNING

    from kstream.kafka.consumer import to_end_settings
    from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end

    out: dict[str, list[list[Record]]] = {}
    supplier = plan.client_supplier or KafkaClientSupplier()
    c = supplier.global_consumer(ClientConfig(plan.bootstrap_servers, to_end_settings(plan.kafka)))
    try:
        starts: dict[tuple[str, int], int] = {}
        for topic in plan.global_topics:
            seen = offsets.setdefault(topic, {})
            for part in c.partitions_for(topic):
                starts[(topic, part)] = seen.get(part, OFFSET_BEGINNING)
        if not starts:
            return out
        got: dict[tuple[str, int], list[Record]] = {}
        try:
            for batch in read_to_end(
                c, starts, max_records=10_000, idle_timeout=None, timeout=_GLOBAL_WAIT_S
            ):
                for m in batch.messages:
                    mt, mp, mo = m.topic(), m.partition(), m.offset()
                    got.setdefault((mt, mp), []).append(
                        Record(m.key(), m.value(), m.timestamp()[1], (), mt, mp, mo)
                    )
                    offsets[mt][mp] = mo + 1
                for (t, part), end in batch.ended.items():
                    offsets[t][part] = max(offsets[t].get(part, 0), end)
        except ReadToEndTimeout as e:
            raise TopologyError(
                f"global topic partitions {sorted(e.positions)} did not reach their end in "
                f"{_GLOBAL_WAIT_S:.0f}s"
            ) from None
        for (t, _part), recs in sorted(got.items()):
            out.setdefault(t, []).append(recs)
        return out
    finally:
        c.close()


class TaskRun:
    """One batch of one task: restore from `saved` (the task's metadata), process, `snapshot`.

    `backend(spec)` gives the backend of each of the task's stores (for a stateful task, one
    over its Spark `MapState`: see `kstream.spark.task_state`); without it the stores are
    empty in-memory ones (stateless sub-topologies have none to speak of). A failing record
    goes to the plan's error policies, as in a native task (`kstream.spark.policy`).
    """

    def __init__(
        self,
        plan: TaskPlan,
        sub: int,
        partition: int,
        saved: Mapping[str, Any],
        backend: Callable[[Any], Any] | None = None,
    ) -> None:
        from kstream.state.build import StoreLayers, build_store
        from kstream.topology.task import Task

        self.plan = plan
        self.collector = TaskRows(
            plan.partitions,
            partition,
            lambda topic: chosen_topic_partitions(plan, topic),
            saved.get("written"),
        )
        compiled = plan.compiled
        globals_saved = saved.get("globals", {})
        self.global_offsets: dict[str, dict[int, int]] = {
            t: dict(v) for t, v in saved.get("global_offsets", {}).items()
        }
        self.global_task: Any = None
        glob: dict[str, Any] = {}
        if plan.global_topics and sub in plan.stateful:
            self.global_task = Task(
                compiled,
                None,
                0,
                collector=self.collector,
                open_store=lambda spec, part: _memory_store(
                    spec, part, globals_saved.get(spec.name)
                ),
            )
            glob = {n: s.read_only() for n, s in self.global_task.stores.items()}
        self.now = int(time.time() * 1000)

        # the record cache (`cache_max_bytes`): a micro-batch is a commit, so what it holds back
        # is forwarded at the batch's end (`run`), or when the budget is spent
        self.cache = RecordCache(plan.cache_max_bytes) if plan.cache_max_bytes else None

        # how far each segmented store has purged expired segments (see `_purge_marks`)
        purged = dict(saved.get("purged", {}))
        self.segmented: dict[str, Any] = {}

        layers = StoreLayers(record_cache=self.cache)

        def open_task_store(spec: Any, part: int) -> Any:
            if backend is None:
                return _memory_store(spec, part, None)
            store: Any = build_store(spec, partition=part, backend=backend(spec), layers=layers)
            if hasattr(store, "_purged_below"):
                self.segmented[spec.name] = store
                if spec.name in purged:
                    store._purged_below = store._purge_next = purged[spec.name]
            return store

        self.policy = RecordPolicy(plan.policies, self.collector.dead_letter)
        self.task = Task(
            compiled,
            sub,
            partition,
            collector=self.collector,
            open_store=open_task_store,
            error_handler=self.policy,
            global_stores=glob,
            wall_clock_ms=self.now,
        )
        self.collector.task = self.task
        self.marks = HighMarks(saved.get("marks"))
        self.task.stream_time = int(saved.get("stream_time", -1))
        for kind, key in (
            (PunctuationType.STREAM_TIME, "dues"),
            (PunctuationType.WALL_CLOCK, "wall"),
        ):
            for s, due in zip(self._schedules(kind), saved.get(key, []), strict=False):
                s.due = due

    def _schedules(self, kind: PunctuationType) -> list[Any]:
        return [s for s in self.task.schedules if s.type is kind]

    def run(self, records: Sequence[Record]) -> dict[str, list[Any]]:
        if self.global_task is not None:
            for parts in _read_globals(self.plan, self.global_offsets).values():
                for recs in parts:
                    self.global_task.process(recs)
            self.global_task.flush_stores()
        self.policy.remember(records)
        queues = partition_queues(records)
        if self.plan.provenance:
            # a repeat is told by its input partition's marks, so each queue is checked alone
            queues = [self._drop_seen(q) for q in queues]
        ordered = self.task.order_queues(queues)
        if ordered:
            last = ordered[-1]
            self.collector.fallback = (last.topic or "", last.partition or 0, last.offset or 0)
            self.task.process_ordered(ordered)
        self.task.punctuate_wall_clock(self.now)
        if self.cache is not None:
            self.task.flush_caches()
        self.task.flush_stores()
        return self.collector.take()

    def _drop_seen(self, ordered: list[Record]) -> list[Record]:
        """Records that are not repeats of what a kstream writer already delivered (see
        `HighMarks`): the marks travel in the task's Spark state."""
        admit = self.marks.admit
        out = []
        for r in ordered:
            pid = header_value(r.headers)
            if pid is None or admit(r.topic or "", pid, r.timestamp, None):
                out.append(r)
        self.marks.changed.clear()
        return out

    def snapshot(self) -> dict[str, Any]:
        """The task's metadata (its stores' contents are in their own Spark state)."""
        out: dict[str, Any] = {
            "marks": self.marks.marks,
            "written": self.collector.high,
            "stream_time": self.task.stream_time,
            "dues": [s.due for s in self._schedules(PunctuationType.STREAM_TIME)],
            "wall": [s.due for s in self._schedules(PunctuationType.WALL_CLOCK)],
            "purged": self._purge_marks(),
        }
        if self.global_task is not None:
            out["globals"] = {n: _contents(s) for n, s in self.global_task.stores.items()}
            out["global_offsets"] = self.global_offsets
        return out

    def _purge_marks(self) -> dict[str, int]:
        """Each segmented store's purge mark (the segment below which it has purged all).

        A store opened afresh purges from the start, once per opening; a task's stores open
        every micro-batch here, and a versioned store's purge also scans every key's latest
        version for old tombstones, a read of the whole store per batch. The mark kept in the
        task's metadata lets a store purge only what expired since (a batch's purge writes
        reach Spark's state with the rest of the batch, and a replayed batch starts from the
        metadata its predecessor left)."""
        return {n: s._purged_below for n, s in self.segmented.items()}

    def close(self) -> None:
        self.task.close()
        if self.global_task is not None:
            self.global_task.close()


def stateless_function(
    blob: bytes, sub: int, slots: int
) -> Callable[[Iterator[SourceChunk]], Iterator[pa.RecordBatch]]:
    """Function of a sub-topology without state, run inside the read: a task per partition.

    Its outputs leave packed per write slot (`kstream.spark.packing.OUTPUT_SCHEMA`).
    """
    return read_task_function(
        blob, sub, lambda _plan, _part, cols: output_batch(pack_by_slot(cols, slots))
    )


def read_task_function(
    blob: bytes,
    sub: int,
    hand_over: Callable[[TaskPlan, int, dict[str, list[Any]]], pa.RecordBatch],
) -> Callable[[Iterator[SourceChunk]], Iterator[pa.RecordBatch]]:
    """Sub-topology `sub` (without state) run inside the source's read tasks, a task per
    partition; `hand_over(plan, partition, outputs)` makes the rows each batch of a partition
    leaves as (for the sink's slots, or a fused query's tasks: `kstream.spark.fusion`)."""

    def run(chunks: Iterator[SourceChunk]) -> Iterator[pa.RecordBatch]:
        plan = plan_of(blob)
        tasks: dict[int, TaskRun] = {}
        try:
            with in_worker():
                for chunk in chunks:
                    part = chunk.partition
                    task = tasks.get(part)
                    if task is None:
                        task = tasks[part] = TaskRun(plan, sub, part, {})
                    # the collector paused for the batch, as in a stateful task
                    with gc_paused(plan.gc_pause):
                        records = chunk.records()
                        cols = task.run(records) if records else None
                        out = hand_over(plan, part, cols) if cols and cols["seq"] else None
                    if out is not None:
                        yield out
        finally:
            for task in tasks.values():
                task.close()

    return run
