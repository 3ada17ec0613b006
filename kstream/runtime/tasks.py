"""One task as the runtime runs it: the topology `Task` plus its producer, offsets and dedup.

A task keeps its own state: the records it processes, its punctuations, its stores and their
write caches, the input offsets of its open commit period, and how to discard that period. The
producer it writes through, and when a transaction begins, commits or aborts, are the commit
protocol's (commit.py): the task opens a period (`start_period`), queues its changelog records
(`produce_changelogs`), names its offsets (`offsets`), applies its caches after a commit
(`apply`) and forgets its work after a rollback (`discard`). The write caches reach the stores
only after the commit (docs/architecture.md, "Exactly-once").

A task reading several partitions (a join, a merge) keeps them in `PartitionBuffers` and
processes only when Kafka's task-idling rule allows (kstream.runtime.idling); the offsets it
commits are those of the records processed, so records still buffered are read again after a
crash or a rollback. A single-input task processes each batch as it comes.

On Apache Kafka that is the whole story. With the broker-compatibility component on
(`broker_compat="tansu"`, kstream.broker_compat) outputs carry a provenance id and a task drops
an input id at or below the highest one it has seen from the same source partition on that
input topic (`HighMarks`), kept in a small changelogged store written once per batch, so records
of aborted transactions that such a broker still shows are processed once, across restarts too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
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
from kstream.guarantee import AT_LEAST_ONCE, EXACTLY_ONCE, EXACTLY_ONCE_V2
from kstream.kafka.producer import UNASSIGNED, Producer
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.metrics import STORE_TIMING_SAMPLE_EVERY
from kstream.records import KAFKA_TIMESTAMP_TYPES, Record
from kstream.runtime.collector import Collector
from kstream.runtime.idling import IDLING_DISABLED, LagOf, PartitionBuffers
from kstream.runtime.policies import ErrorCounts, make_handler
from kstream.state import Store
from kstream.state.build import StoreLayers, build_store
from kstream.state.caching import RecordCache
from kstream.state.changelog import CHANGELOG_OFFSET, changelog_records
from kstream.state.metrics import StoreMetrics
from kstream.state.provenance import header_value
from kstream.state.restore import RestoreResult
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
    counts: ErrorCounts = field(default_factory=ErrorCounts)
    # exactly_once_v2: the tasks share the stream thread's transactional producer
    shared_transactions: bool = False
    restoring: int = 0
    duplicates_dropped: int = 0
    # where the app's Kafka clients come from (a mock cluster's in broker-free tests)
    client_supplier: ClientSupplier = field(default_factory=KafkaClientSupplier)
    # where user stores report their operations (the app's metrics); None: not timed
    store_metrics: StoreMetrics | None = None
    # the broker-compatibility component's switches (config.broker_compat)
    compat: BrokerCompat = field(init=False)
    # the stream thread's record cache (config.cache_max_bytes, kstream.state.caching)
    record_cache: RecordCache = field(init=False)

    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.compat = compat_of(self.config)
        self.record_cache = RecordCache(self.config.cache_max_bytes)

    @property
    def store_layers(self) -> StoreLayers:
        """The outer layers of every task store (kstream.state.build): the record cache's, and
        the metering one at the debug recording level only, as in Kafka Streams (a wrapper per
        call cost P3 5-8% of its CPU), timing one call in `STORE_TIMING_SAMPLE_EVERY`."""
        timed = self.config.metrics_recording_level != "info"
        return StoreLayers(
            record_cache=self.record_cache,
            metrics=self.store_metrics if timed else None,
            sample_every=STORE_TIMING_SAMPLE_EVERY,
        )

    @property
    def guarantee(self) -> str:
        """The processing guarantee's name (kstream.guarantee), from the two flags the app
        sets; read once, by `kstream.runtime.commit.commit_protocol`, whose protocol object
        is what the rest of the runtime asks."""
        if not self.exactly_once:
            return AT_LEAST_ONCE
        return EXACTLY_ONCE_V2 if self.shared_transactions else EXACTLY_ONCE

    def restoring_changed(self, delta: int) -> None:
        """Count tasks being restored (tasks restore side by side on pool threads)."""
        with self._lock:
            self.restoring += delta

    def new_producer(
        self, transactional_id: str | None, kafka: Mapping[str, Any] | None = None
    ) -> Producer:
        """An idempotent producer, transactional with `transactional_id`, that tracks the
        offsets of the changelog records it delivers (`kafka`: the settings, by default the
        app's).

        A transactional one gets Kafka Streams' `transaction.timeout.ms` of 10 s unless the
        settings give one (librdkafka's default is 60 s): the broker aborts the open
        transaction of an instance that died and never comes back after that long, and until
        then its pending offsets hold up the task's new owner (KIP-447)."""
        settings = self.config.kafka if kafka is None else kafka
        if transactional_id is not None:
            settings = {**TRANSACTIONAL_DEFAULTS, **settings}
        return self.client_supplier.producer(
            ClientConfig(
                self.bootstrap_servers,
                settings,
                self.config.connect_timeout,
                client_id=transactional_id,
                transactional_id=transactional_id,
                idempotent=True,
                track_offsets=frozenset(self.changelog_topics),
            )
        )


TRANSACTIONAL_DEFAULTS = {"transaction.timeout.ms": 10_000}
"""The runtime's transactional producers' defaults, as Kafka Streams sets them under
exactly-once (StreamsConfig: `transaction.timeout.ms` 10000)."""


class RuntimeTask:
    """A task (sub-topology, partition) owned by this instance."""

    def __init__(
        self,
        ctx: RuntimeContext,
        subtopology: int,
        partition: int,
        committed: Mapping[TP, int],
        producer: Producer,
        restored: Sequence[RestoreResult],
    ) -> None:
        """`producer`: the one the commit protocol gives the task (`task_producer`), which
        stays the protocol's to close. `restored`: the task's stores (`task_store_parts`),
        already restored from their changelogs with `committed` (`restore_tasks`: the task
        manager restores every task of a rebalance with one consumer); the task takes them
        over, and closes them if it fails."""
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
        # a task reading several partitions buffers them until it may process (task idling,
        # kstream.runtime.idling); None: it processes each batch as it comes
        self.buffers: PartitionBuffers | None = None
        if len(self.tps) > 1 and ctx.config.max_task_idle_ms != IDLING_DISABLED:
            self.buffers = PartitionBuffers(self.tps, ctx.config.max_task_idle_ms)
            self.buffers.start = dict(self.committed)
        self._snapshot: tuple[int, list[tuple[Schedule, int]]] | None = None
        # the commit protocol's to replace (`recreate_producer`); the collector follows it
        self.producer = producer
        cfg = ctx.config
        self.marks: HighMarks | None = None
        self.marks_store: Any = None
        try:
            self.collector = Collector(self)
            # the stores as restored, without the metering layer: what a standby keeps
            self.restored_stores: list[Store] = [res.store for res in restored]
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
                error_handler=make_handler(
                    cfg, ctx.counts, self._raw, self.collector.send_raw, self.id
                ),
                global_stores=ctx.global_views,
                wall_clock_ms=int(time.time() * 1000),
            )
            if ctx.compat.drop_repeats:
                name = marks_spec(subtopology).name
                self.marks_store = ready.pop(name)
                self.marks_store.context = self.task
                self.task.stores[name] = self.marks_store
                self.marks = load_marks(self.marks_store)
        except BaseException:
            for res in restored or ():
                res.store.close()  # closing twice is harmless
            raise

    def _restored(self, res: RestoreResult) -> Any:
        """A store of this task fresh from its restore: logged, and inside the outer layers the
        config asks for (`RuntimeContext.store_layers`, kstream.state.build)."""
        name = res.store.name
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
        # Before the processors' init: aggregations take the store's fused accessors there,
        # and those must already be the timed ones. The layers are new objects around the
        # restored store, which `restored_stores` keeps for a standby.
        return build_store(
            res.store.spec,
            partition=res.store.partition,
            inner=res.store,
            layers=self.ctx.store_layers,
        )

    def __repr__(self) -> str:
        return f"RuntimeTask({self.id})"

    def _raw(self, topic: str | None, partition: int | None, offset: int | None) -> Any:
        if self.buffers is not None:
            return self.buffers.find_raw((topic, partition), offset)  # type: ignore[arg-type]
        for m in self.batch.get((topic, partition), ()):  # type: ignore[arg-type]
            if m.offset() == offset:
                return m
        return None

    # --- processing ------------------------------------------------------------------------

    def start_period(self) -> None:
        """Open the task's commit period: remember the stream time and punctuation schedule a
        rollback returns to. The commit protocol calls this (`CommitProtocol.begin`) before
        the task processes or punctuates, after beginning its transaction if it has one."""
        t = self.task
        self._snapshot = (t.stream_time, [(s, s.due) for s in t.schedules])
        self.open = True

    def process(self, parts: dict[TP, list[Message]]) -> None:
        """Process this batch's messages of the task's partitions, in stream-time order
        (within the period the commit protocol opened)."""
        self.batch = parts
        marks = self.marks
        dropped = marks.dropped if marks is not None else 0
        lists: list[list[Record]] = []
        for tp, msgs in parts.items():
            lists.append(self._records(tp, msgs))
            self.next_offsets[tp] = msgs[-1].offset() + 1  # type: ignore[operator]
        if marks is not None and marks.dropped != dropped:
            self.ctx.duplicates_dropped += marks.dropped - dropped
        try:
            self.task.process_queues(lists)  # stamped, then merged by head timestamp
            if marks is not None and marks.changed:
                self._save_marks(marks)
        finally:
            self.batch = {}

    def buffer(self, parts: dict[TP, list[Message]]) -> None:
        """Buffer this batch's messages until the task may process them (task idling: only
        tasks with `buffers`), stamped as they come, as Kafka's record queues are (within the
        period the commit protocol opened: a record an error handler sends to the
        dead-letter topic goes out in it)."""
        buffers = self.buffers
        assert buffers is not None
        marks = self.marks
        dropped = marks.dropped if marks is not None else 0
        for tp, msgs in parts.items():
            buffers.receive(tp, msgs)
            buffers.add(tp, self.task.stamp(self._records(tp, msgs)))
        if marks is not None:
            if marks.dropped != dropped:
                self.ctx.duplicates_dropped += marks.dropped - dropped
            if marks.changed:
                self._save_marks(marks)

    def process_ready(self, now_ms: int, lag_of: LagOf) -> int:
        """Process the buffered records while the task is ready (`PartitionBuffers.ready`
        at `now_ms`, with `lag_of` the consumer's fetched lags); the records processed. The
        offsets committed next are those of the records processed, not of those still
        buffered."""
        buffers = self.buffers
        assert buffers is not None
        done = 0
        try:
            while buffers.ready(now_ms, lag_of):
                records = buffers.take()
                done += len(records)
                self.task.process_ordered(records)
        finally:
            for tp in self.tps:
                upto = buffers.committable(tp)
                if upto is not None:
                    self.next_offsets[tp] = upto
        return done

    def _records(self, tp: TP, msgs: list[Message]) -> list[Record]:
        """`msgs` of `tp` as records (keys and values still bytes). Record(...) field by
        field: a third cheaper per message (see kstream.records). With high marks
        (broker_compat), a record with headers may be a repeat of one kstream wrote (its
        provenance id at or below the high mark of its source partition): dropped here."""
        topic, partition = tp
        new, ts_types = object.__new__, KAFKA_TIMESTAMP_TYPES
        marks = self.marks
        recs: list[Record] = []
        keep = recs.append
        for m in msgs:
            r = new(Record)
            r.key = m.key()
            r.value = m.value()
            ts_type, r.timestamp = m.timestamp()
            r.topic = topic
            r.partition = partition
            r.offset = m.offset()
            r.timestamp_type = ts_types[ts_type]
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
        return recs

    def _save_marks(self, marks: HighMarks) -> None:
        """Write the marks this batch moved (each with the record that moved it as its
        provenance, so a restore skips it if that record's offset was never committed), and
        forget marks not moved within `broker_compat_marks_retention` of stream time."""
        store, task = self.marks_store, self.task
        if task.stream_time >= 0:
            retention = self.ctx.config.broker_compat_marks_retention
            for mark in marks.expire(task.stream_time - retention):
                task.current = None
                store.delete(marks_key(mark))
        for mark, cause in marks.changed.items():
            task.current = cause
            store.put(marks_key(mark), marks_value(marks, mark))
        task.current = None
        marks.changed.clear()

    @property
    def punctuates_wall_clock(self) -> bool:
        """The task has wall-clock punctuations (`punctuate` then runs in a commit period)."""
        return any(s.type.value == "wall_clock" for s in self.task.schedules)

    def punctuate(self, now_ms: int) -> None:
        """Run the wall-clock punctuations due at `now_ms` (within an open period)."""
        self.task.punctuate_wall_clock(now_ms)

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
        """Queue the changelog records of the stores' pending writes (inside the transaction,
        before the input offsets). The record caches are flushed first: what they held back
        is forwarded now, so its outputs and the writes it causes downstream are in this
        commit too."""
        if self.ctx.record_cache.enabled:
            self.task.flush_caches()
        app_id = self.ctx.app_id
        produce = self.producer.produce
        # the client's produce call for the common case, as the collector's (positionally, see
        # kstream.kafka.producer.UNASSIGNED); what it raises (a full queue, a client error)
        # goes to the full call, which retries or names the error
        fast = getattr(self.producer, "client_produce", None)
        for store in self.task.stores.values():
            if not store.spec.changelog or not store.has_pending():
                continue
            records = changelog_records(store, app_id, provenance=self.collector.stamp)
            for topic, partition, key, value, headers, ts in records:
                if fast is not None:
                    try:
                        part = UNASSIGNED if partition is None else partition
                        fast(topic, value, key, part, None, None, ts or 0, headers or None)
                        continue
                    except Exception:
                        pass
                produce(topic, value, key, partition, ts, headers)

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

    def discard(self) -> None:
        """Drop the uncommitted work of the open period: empty the write caches, rewind
        stream time and the punctuation schedule, forget the period's offsets.

        The commit protocol aborts the transaction first (`CommitProtocol.rollback`); the
        caller seeks the task's partitions back to `committed`.
        """
        self.task.discard()
        if self.marks_store is not None:
            self.marks = load_marks(self.marks_store)  # the marks as last committed
        if self._snapshot is not None:
            st, scheds = self._snapshot
            self.task.stream_time = st
            for s, due in scheds:
                s.due = due
            self.task.schedules = [s for s, _ in scheds]
        if self.buffers is not None:
            self.buffers.reset(self.committed)  # read again from the committed offsets
        self.next_offsets = {}
        self.collector.counters.clear()
        self.open = False
        self._snapshot = None

    def close(self) -> None:
        """Close the task's stores (its producer is the commit protocol's to release)."""
        self.task.close()

    def close_keeping_stores(self) -> list[Store]:
        """Close the task's processors but not its stores, which it returns (their write
        caches emptied: nothing uncommitted goes on), for a standby to keep
        (kstream.runtime.standby)."""
        self.task.close(keep_stores=True)
        for store in self.restored_stores:
            store.discard()
        return list(self.restored_stores)
