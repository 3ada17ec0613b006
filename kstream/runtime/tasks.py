"""One task as the runtime runs it: the topology `Task` plus its producer, offsets and dedup.

Under `exactly_once` every task has its own transactional producer (transactional id
`<app_id>-<task id>`), so a new owner of the task fences the old one on any broker, whatever the
broker does with consumer-group generations. A batch of a task is one transaction: outputs,
changelog records and the task's input offsets commit together, and only then are the write
caches applied to the stores (docs/architecture.md, "Exactly-once"). Under
`exactly_once_v2` the tasks of a stream thread share the thread's transactional producer and
commit in one transaction, as in Kafka Streams: one commit instead of one per task, but a zombie
is fenced only by a broker that checks consumer-group generations in transactional offset
commits (KIP-447).

On Apache Kafka that is the whole story. With the broker-compatibility component on
(`broker_compat="tansu"`, kstream.broker_compat) outputs carry a provenance id and a task drops
an input id at or below the highest one it has seen from the same source partition on that
input topic (`HighMarks`), kept in a small changelogged store written once per batch, so records
of aborted transactions that such a broker still shows are processed once, across restarts too.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, TopicPartition

from kstream.broker_compat import (
    BrokerCompat,
    HighMarks,
    compat_of,
    load_marks,
    marks_key,
    marks_spec,
    marks_value,
)
from kstream.config import Config
from kstream.errors import ProduceError
from kstream.kafka.producer import UNASSIGNED, Producer
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.metrics import STORE_TIMING_SAMPLE_EVERY
from kstream.records import Headers, Record, TimestampType, derive
from kstream.runtime.policies import ErrorCounts, make_handler
from kstream.state.changelog import CHANGELOG_OFFSET, changelog_records
from kstream.state.metrics import StoreMetrics, instrument
from kstream.state.provenance import HEADER, encoder, header_value
from kstream.state.restore import RestoreResult, open_and_restore_all
from kstream.state.spec import StoreSpec
from kstream.topology.compiled import CompiledTopology
from kstream.topology.schedule import Schedule
from kstream.topology.task import Task

log = logging.getLogger("kstream.runtime")

TP = tuple[str, int]


@dataclass
class RuntimeContext:
    """What every task of one app shares."""

    compiled: CompiledTopology
    config: Config
    app_id: str
    bootstrap_servers: str
    exactly_once: bool
    partition_counts: dict[str, int]
    changelog_topics: set[str]
    global_views: Mapping[str, Any]
    shared_producer: Callable[[], Producer]
    counts: ErrorCounts = field(default_factory=ErrorCounts)
    # exactly_once_v2: the tasks share the stream thread's transactional producer
    shared_transactions: bool = False
    renew_shared_producer: Callable[[], None] = lambda: None
    restoring: int = 0
    duplicates_dropped: int = 0
    # where the app's Kafka clients come from (a mock cluster's in broker-free tests)
    client_supplier: ClientSupplier = field(default_factory=KafkaClientSupplier)
    # where user stores report their operations (the app's metrics); None: not timed
    store_metrics: StoreMetrics | None = None
    # the broker-compatibility component's switches (config.broker_compat)
    compat: BrokerCompat = field(init=False)

    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.compat = compat_of(self.config)

    def restoring_changed(self, delta: int) -> None:
        """Count tasks being restored (tasks restore side by side on pool threads)."""
        with self._lock:
            self.restoring += delta

    def new_producer(
        self, transactional_id: str | None, kafka: Mapping[str, Any] | None = None
    ) -> Producer:
        """An idempotent producer, transactional with `transactional_id`, that tracks the
        offsets of the changelog records it delivers (`kafka`: the settings, by default the
        app's)."""
        return self.client_supplier.producer(
            ClientConfig(
                self.bootstrap_servers,
                self.config.kafka if kafka is None else kafka,
                self.config.connect_timeout,
                client_id=transactional_id,
                transactional_id=transactional_id,
                idempotent=True,
                track_offsets=frozenset(self.changelog_topics),
            )
        )


class Collector:
    """Sends a task's sink records through its producer, with the records' own headers (as
    Kafka Streams' record collector), or stamped with their provenance id when the
    broker-compatibility component asks for it.

    This runs once per output record. Stamping, per source partition it keeps the header's
    encoder (`provenance.encoder`: the topic encoded once, one pack per record) and the count
    of outputs per source offset (the id's output index), so a record costs a lookup by
    (topic, partition), a counter and one pack.
    """

    __slots__ = ("_client_produce", "_producer", "counters", "produced", "rt", "stamp")

    def __init__(self, rt: RuntimeTask) -> None:
        self.rt = rt
        self.stamp = rt.ctx.compat.provenance
        # the task's producer and its client's produce (None: the producer has none, e.g. a
        # mock); looked up again when the task gets a new producer
        self._producer: Any = None
        self._client_produce: Any = None
        # (source topic, source partition) -> (header encoder, topic bytes, source offset ->
        # outputs so far); cleared with each commit period (apply, rollback)
        self.counters: dict[tuple[str, int], tuple[Any, bytes, dict[int, int]]] = {}
        # records sent per topic since the stream thread last read them (for metrics)
        self.produced: dict[str, int] = {}

    def _source(self, topic: str, partition: int) -> tuple[Any, bytes, dict[int, int]]:
        entry = self.counters[(topic, partition)] = (
            encoder(topic, partition),
            topic.encode("utf-8"),
            {},
        )
        return entry

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """One record caused by the task's current record (its provenance, and the record a
        failure is reported on); see `send_many`."""
        cur = self.rt.task.current
        if cur is None:
            origin = Record(None, None, timestamp, headers)
        else:
            origin = derive(cur, cur.key, cur.value)
            origin.timestamp = timestamp
            origin.headers = headers
        self.send_many(topic, [origin], [key], [value], None if partition is None else [partition])

    def send_many(
        self,
        topic: str,
        records: Sequence[Record],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        partitions: Sequence[int | None] | None,
    ) -> None:
        """A sink's records, serialized (`keys`, `values`, and `partitions` or None for the
        partitioner's choice, one per record): each keeps the record's timestamp and headers
        and, with the compensations on, is stamped with the provenance of its record (topic,
        partition, offset).

        This is the engine's innermost loop, one pass per output record: the producer is
        looked up once per call, the header encoder once per run of records from one source
        partition.
        """
        rt = self.rt
        producer = rt.producer
        if producer is not self._producer:
            self._producer = producer
            self._client_produce = getattr(producer, "client_produce", None)
        fast = self._client_produce
        stamp = self.stamp
        counters = self.counters
        last_topic: str | None = None
        last_part: int | None = None
        enc: Any = None
        tb = b""
        seen: dict[int, int] = {}
        sent = 0
        i = -1
        for r in records:
            i += 1
            headers = r.headers
            # a record keeps its own headers, less a `kstream.src` stamp: without the
            # compensations, an upstream's stamp names that app's input, and a reader that
            # drops repeated stamps would drop this app's second output of one input record
            hdrs: list[tuple[str, bytes | None]] = (
                [h for h in headers if h[0] != HEADER] if headers else []
            )
            offset = r.offset
            if stamp and offset is not None:
                src_topic = r.topic
                src_part = r.partition
                if src_part != last_part or src_topic != last_topic:
                    if src_topic is None or src_part is None:
                        offset = None
                    else:
                        last_topic, last_part = src_topic, src_part
                        entry = counters.get((src_topic, src_part))
                        if entry is None:
                            entry = self._source(src_topic, src_part)
                        enc, tb, seen = entry
                if offset is not None:
                    idx = seen.get(offset, 0)
                    seen[offset] = idx + 1
                    hdrs.append((HEADER, enc(offset, idx, tb)))
            partition = None if partitions is None else partitions[i]
            if fast is not None:
                # Producer.produce's common case, inlined; anything it raises (a full queue, a
                # client error) goes to the full call, which retries or names the error
                try:
                    # positionally (see kstream.kafka.producer.UNASSIGNED)
                    fast(
                        topic,
                        values[i],
                        keys[i],
                        UNASSIGNED if partition is None else partition,
                        None,
                        None,
                        r.timestamp or 0,
                        hdrs or None,
                    )
                    sent += 1
                    continue
                except Exception:
                    pass
            sent += self._produce(topic, r, keys[i], values[i], partition, hdrs, sent)
        self._count(topic, sent)

    def _produce(
        self,
        topic: str,
        r: Record,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        hdrs: list[tuple[str, bytes | None]],
        sent: int,
    ) -> int:
        """The full produce call (retries a full queue, names errors): 1 if the record was
        sent, 0 if the processing-error policy dropped it. `sent`: the slice's records sent
        so far, counted before an error is raised."""
        rt = self.rt
        producer = rt.producer
        try:
            producer.produce(topic, value, key, partition, r.timestamp, hdrs)
            return 1
        except ProduceError as e:
            # A record the broker will never take (too large, ...) is the input record's
            # problem: the processing-error policy decides (fail, skip or dead-letter).
            if e.retriable or producer.is_fatal():
                self._count(topic, sent)
                raise
            # the failed record is the current one: a dead-letter copy takes its provenance
            rt.task.current = r
            rt.task.report(e, r, f"producing to topic {topic!r}")
            return 0

    def _count(self, topic: str, sent: int) -> None:
        if sent:
            produced = self.produced
            produced[topic] = produced.get(topic, 0) + sent

    def send_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        self.send(topic, key, value, timestamp, headers, None)

    def partitions_for(self, topic: str) -> int:
        return self.rt.ctx.partition_counts[topic]


def task_store_parts(
    ctx: RuntimeContext, subtopology: int, partition: int
) -> list[tuple[StoreSpec, int]]:
    """A task's store partitions, `(spec, partition)`: its sub-topology's stores, then its
    dedup marks when the broker-compatibility component keeps them."""
    sub = ctx.compiled.subtopologies[subtopology]
    specs = [ctx.compiled.topology.stores[name] for name in sub.stores]
    if ctx.compat.drop_repeats:
        specs.append(marks_spec(subtopology))
    return [(spec, partition) for spec in specs]


def restore_tasks(
    ctx: RuntimeContext, tasks: Sequence[tuple[int, int]], committed: Mapping[TP, int]
) -> list[list[RestoreResult]]:
    """Open and restore the stores of `tasks` (`(subtopology, partition)`) with one consumer,
    as Kafka Streams' restore consumer does for a thread's tasks: one client and one wait for
    the end per rebalance, not per store. `committed`: the tasks' committed input offsets
    (with the broker-compatibility component on, under exactly-once a changelog record counts
    only if its input offset was committed).
    Returns each task's `RestoreResult`s, in `task_store_parts` order."""
    cfg = ctx.config
    parts = [task_store_parts(ctx, sub, part) for sub, part in tasks]
    # with provenance stamped on every changelog record, each must name an input partition of
    # its task (kstream.state.restore_check)
    sources: list[frozenset[TP] | None] = [
        frozenset((t, part) for t in ctx.compiled.subtopologies[sub].source_topics)
        if ctx.compat.provenance
        else None
        for (sub, part), task_parts in zip(tasks, parts, strict=True)
        for _ in task_parts
    ]
    ctx.restoring_changed(+len(tasks))
    try:
        results = open_and_restore_all(
            [p for task_parts in parts for p in task_parts],
            app_id=ctx.app_id,
            state_dir=cfg.state_dir,
            bootstrap_servers=ctx.bootstrap_servers,
            committed=committed if ctx.exactly_once and ctx.compat.restore_filter else None,
            default_backend=cfg.default_backend,
            kafka=cfg.kafka,
            progress=ctx.store_metrics.record_restore if ctx.store_metrics is not None else None,
            client_supplier=ctx.client_supplier,
            on_error=cfg.on_restore_error,
            sources=sources,
        )
    finally:
        ctx.restoring_changed(-len(tasks))
    out: list[list[RestoreResult]] = []
    at = 0
    for task_parts in parts:
        out.append(results[at : at + len(task_parts)])
        at += len(task_parts)
    return out


class RuntimeTask:
    """A task (sub-topology, partition) owned by this instance."""

    def __init__(
        self,
        ctx: RuntimeContext,
        subtopology: int,
        partition: int,
        committed: Mapping[TP, int],
        restored: Sequence[RestoreResult] | None = None,
    ) -> None:
        """`restored`: the task's stores (`task_store_parts`), already restored from their
        changelogs with `committed` (the stream thread restores every task of a rebalance
        with one consumer); the task takes them over, and closes them if it fails. Without
        them the task restores its own."""
        self.ctx = ctx
        self.subtopology = subtopology
        self.partition = partition
        self.id = f"{subtopology}_{partition}"
        sub = ctx.compiled.subtopologies[subtopology]
        self.tps: list[TP] = [(t, partition) for t in sub.source_topics]
        self.committed: dict[TP, int] = {tp: committed[tp] for tp in self.tps if tp in committed}
        self.next_offsets: dict[TP, int] = {}
        self.open = False
        self.batch: dict[TP, list[Message]] = {}
        self._snapshot: tuple[int, list[tuple[Schedule, int]]] | None = None
        self.own_producer = ctx.exactly_once and not ctx.shared_transactions
        cfg = ctx.config
        self.marks: HighMarks | None = None
        self.marks_store: Any = None
        try:
            self.producer: Producer = (
                ctx.new_producer(f"{ctx.app_id}-{self.id}")
                if self.own_producer
                else ctx.shared_producer()
            )
            self.collector = Collector(self)
            if restored is None:
                restored = restore_tasks(ctx, [(subtopology, partition)], committed)[0]
            ready = {res.store.name: self._restored(res) for res in restored}
            self.task = Task(
                ctx.compiled,
                subtopology,
                partition,
                collector=self.collector,
                app_id=ctx.app_id,
                state_dir=cfg.state_dir,
                default_backend=cfg.default_backend,
                open_store=lambda spec, _part: ready.pop(spec.name),
                error_handler=make_handler(cfg, ctx.counts, self._raw, self.collector.send_raw),
                global_stores=ctx.global_views,
                wall_clock_ms=int(time.time() * 1000),
            )
            if ctx.compat.drop_repeats:
                name = marks_spec(subtopology).name
                self.marks_store = ready.pop(name)
                self.marks_store.source = self.task.source
                self.task.stores[name] = self.marks_store
                self.marks = load_marks(self.marks_store)
        except BaseException:
            for res in restored or ():
                res.store.close()  # closing twice is harmless
            if self.own_producer and hasattr(self, "producer"):
                self.producer.close(drop_undelivered=True)
            raise

    def _restored(self, res: RestoreResult) -> Any:
        """A store of this task fresh from its restore: logged, and timed when asked to be."""
        ctx, cfg, name = self.ctx, self.ctx.config, res.store.name
        log.info(
            "task %s: restored store %r: %d record(s) applied, %d skipped, %d refused, "
            "offsets %d..%d",
            self.id,
            name,
            res.applied,
            res.skipped,
            res.refused,
            res.start_offset,
            res.end_offset,
        )
        if (
            ctx.store_metrics is not None
            and cfg.metrics_recording_level != "info"
            and not name.startswith("kstream-")
        ):
            # Store operations are counted and timed at the debug recording level only, as in
            # Kafka Streams: a wrapper per call cost P3 5-8% of its CPU. Before the processors'
            # init: aggregations take the store's fused accessors there, and those must already
            # be the timed ones. The metering layer is a new object around the store.
            return instrument(res.store, ctx.store_metrics, sample_every=STORE_TIMING_SAMPLE_EVERY)
        return res.store

    def __repr__(self) -> str:
        return f"RuntimeTask({self.id})"

    def _raw(self, topic: str | None, partition: int | None, offset: int | None) -> Any:
        for m in self.batch.get((topic, partition), ()):  # type: ignore[arg-type]
            if m.offset() == offset:
                return m
        return None

    # --- processing ------------------------------------------------------------------------

    def begin(self) -> None:
        """Open the task's commit period (a transaction under exactly-once)."""
        if self.open:
            return
        t = self.task
        self._snapshot = (t.stream_time, [(s, s.due) for s in t.schedules])
        if self.ctx.exactly_once and not self.producer.in_transaction:
            self.producer.begin()
        self.open = True

    def process(self, parts: dict[TP, list[Message]]) -> None:
        """Process this batch's messages of the task's partitions, in stream-time order."""
        self.begin()
        self.batch = parts
        lists: list[list[Record]] = []
        new, create_time = object.__new__, TimestampType.CREATE_TIME
        marks = self.marks
        dropped = marks.dropped if marks is not None else 0
        for (topic, partition), msgs in parts.items():
            # Record(...) field by field: a third cheaper per message (see kstream.records).
            # With high marks (broker_compat), a record with headers may be a repeat of one
            # kstream wrote (its provenance id at or below the high mark of its source
            # partition): dropped here.
            recs: list[Record] = []
            keep = recs.append
            for m in msgs:
                r = new(Record)
                r.key = m.key()
                r.value = m.value()
                r.timestamp = m.timestamp()[1]
                r.topic = topic
                r.partition = partition
                r.offset = m.offset()
                r.timestamp_type = create_time
                hdrs = m.headers()
                if hdrs:
                    r.headers = hdrs  # type: ignore[assignment]
                    if marks is not None:
                        pid = header_value(hdrs)
                        if pid is not None and not marks.admit(topic, pid, r.timestamp, r):
                            continue
                else:
                    r.headers = ()
                keep(r)
            self.next_offsets[(topic, partition)] = msgs[-1].offset() + 1  # type: ignore[operator]
            lists.append(recs)
        if marks is not None and marks.dropped != dropped:
            self.ctx.duplicates_dropped += marks.dropped - dropped
        records = lists[0] if len(lists) == 1 else list(heapq.merge(*lists, key=_timestamp))
        try:
            if records:
                self.task.process(records)
            if marks is not None and marks.changed:
                self._save_marks(marks)
        finally:
            self.batch = {}

    def _save_marks(self, marks: HighMarks) -> None:
        """Write the marks this batch moved (each with the record that moved it as its
        provenance, so a restore skips it if that record's offset was never committed), and
        forget marks not moved within `dedup_retention` of stream time."""
        store, task = self.marks_store, self.task
        if task.stream_time >= 0:
            for mark in marks.expire(task.stream_time - self.ctx.config.dedup_retention):
                task.current = None
                store.delete(marks_key(mark))
        for mark, cause in marks.changed.items():
            task.current = cause
            store.put(marks_key(mark), marks_value(marks, mark))
        task.current = None
        marks.changed.clear()

    def punctuate(self, now_ms: int) -> None:
        task = self.task
        if any(s.type.value == "wall_clock" for s in task.schedules):
            self.begin()
            task.punctuate_wall_clock(now_ms)

    # --- commit ----------------------------------------------------------------------------

    def verify_stores(self) -> None:
        """Raise StoreLostError if a remote store lost or rolled back data since it was opened.

        Runs before the commit, after every read of the batch: a store that forgot its data
        answered those reads with "absent", so the batch's outputs and changelog records are
        wrong and must not commit (the stream thread rebuilds the store and retries).
        """
        for store in self.task.stores.values():
            check = getattr(store.backend, "check_intact", None)
            if check is not None:
                check()

    def produce_changelogs(self) -> None:
        app_id = self.ctx.app_id
        produce = self.producer.produce
        for store in self.task.stores.values():
            if not store.spec.changelog or not store.has_pending():
                continue
            for rec in changelog_records(store, app_id, provenance=self.collector.stamp):
                produce(rec.topic, rec.value, rec.key, rec.partition, 0, rec.headers)

    def apply(self, delivered: Mapping[TP, int]) -> None:
        """Apply the write caches with their changelog checkpoints (after the commit)."""
        cps: dict[str, dict[str, Any]] = {}
        app_id = self.ctx.app_id
        for name, store in self.task.stores.items():
            off = delivered.get((store.spec.changelog_topic(app_id), self.partition))
            if off is not None:
                cps[name] = {CHANGELOG_OFFSET: off + 1}
        self.task.flush_stores(cps)
        self.committed.update(self.next_offsets)
        self.collector.counters.clear()
        self.open = False
        self._snapshot = None

    def offsets(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, o) for (t, p), o in self.next_offsets.items()]

    def end_txn(self, group_metadata: Any) -> None:
        """Send the input offsets into the transaction and commit it (the stream thread
        queues the changelogs first and applies the write caches after)."""
        offs = self.offsets()
        if offs:
            self.producer.send_offsets(offs, group_metadata)
        self.producer.commit()

    def rollback(self, fenced: bool = False) -> None:
        """Drop the uncommitted work: abort, empty the write caches, rewind stream time.

        The caller seeks the task's partitions back to `committed`. A fenced producer is not
        replaced: a new one with the task's transactional id would fence the task's new owner.
        """
        if self.ctx.exactly_once and self.producer.in_transaction:
            try:
                self.producer.abort()
            except Exception as e:
                if not fenced and not self.producer.fenced():
                    log.warning("task %s: abort failed (%s); recreating its producer", self.id, e)
                    self.recreate_producer()
        self.task.discard()
        if self.marks_store is not None:
            self.marks = load_marks(self.marks_store)  # the marks as last committed
        if self._snapshot is not None:
            st, scheds = self._snapshot
            self.task.stream_time = st
            for s, due in scheds:
                s.due = due
            self.task.schedules = [s for s, _ in scheds]
        self.next_offsets = {}
        self.collector.counters.clear()
        self.open = False
        self._snapshot = None

    def recreate_producer(self) -> None:
        if not self.own_producer:
            if self.ctx.exactly_once:
                self.ctx.renew_shared_producer()
            return
        try:
            self.producer.close(1.0, drop_undelivered=True)
        except Exception:
            pass
        self.producer = self.ctx.new_producer(f"{self.ctx.app_id}-{self.id}")

    def close(self) -> None:
        try:
            self.task.close()
        finally:
            if self.own_producer:
                self.producer.close(1.0, drop_undelivered=True)


def _timestamp(r: Record) -> int:
    return r.timestamp
