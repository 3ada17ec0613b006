"""The execution core: one `Task` runs one sub-topology for one partition.

The runtime and the test driver both run topologies through this module, so what the driver
shows is what production does.

How records move
----------------
`Task.process(records)` takes a time-ordered list of input records whose key and value are still
bytes (`Task.process_queues` takes one list per input partition and merges them by head
timestamp, as Kafka's `PartitionGroup`). A source with a timestamp extractor first deserializes
its records and stamps each with its extracted timestamp (`SourceNode.stamp`, Kafka's
`RecordQueue`), so the merge and stream time follow those timestamps. `process` then cuts the
list into runs of consecutive records of one source node (and, when stream-time punctuations
are scheduled, at the points where stream time reaches the next one), and hands each run to its
source node, which deserializes the run (unless stamping did) and passes the resulting list to
its children. Every node takes a list and hands lists on:

- built-in processors override `Processor.process_batch` and forward with `ctx.forward_batch`;
- user processors get one `process(record)` call per record; what they `ctx.forward` is
  collected and handed to the children as one list after the run;
- sinks serialize the list and give each record to the `RecordCollector`.

Batching changes the order in which nodes see records, never the order of records on one path.
That is invisible except where the graph of one source re-converges or shares a store on one
path; `compile` marks such sources `depth_first` (see `kstream.topology.compiled`) and their
records are run one at a time, each completely, forwards included, before the next: Kafka
Streams' order.

Nodes never modify a record they receive (the same list may go to several children): they make
new records (`Record.with_value` etc.). Source nodes are the exception: they own the input
records and fill in the deserialized key and value in place.

Errors
------
A record whose key or value cannot be deserialized, and a record on which user code raises,
are reported as `DeserializationError` / `ProcessingError` (naming the input topic, partition
and offset) to the task's `error_handler`. The handler raises to fail, or returns to skip the
record at the node where it failed; the default handler raises.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kstream.errors import (
    ProcessingError,
    RecordError,
    StoreError,
    TopologyError,
)
from kstream.records import Headers, Record, merge_by_head
from kstream.topology.compiled import CompiledTopology
from kstream.topology.nodes import Node, NodeContext, ProcessorNode, SinkNode, SourceNode
from kstream.topology.processor import (
    PunctuationType,
    as_processor,
)
from kstream.topology.schedule import Schedule
from kstream.topology.topology import NodeDef, ProcessorDef, SinkDef, SourceDef

log = logging.getLogger(__name__)

NO_LIMIT = sys.maxsize
"""`Task.future_limit` when nothing watches for far-future timestamps (the test driver)."""
FutureWatch = Callable[["Task", list[Record]], None]


class RecordCollector(Protocol):
    """Where sinks send records (the runtime's producer, the test driver's topics).

    A collector may also take a sink's records a slice at a time, `send_many(topic, records,
    keys, values, partitions)` (the records, for their origin, timestamp and headers; their
    serialized keys and values; the partitions, or None for the partitioner's): the runtime's
    does, which saves a call per record. Sinks send one record a call to the others
    (`kstream.topology.nodes.send_each`).
    """

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None: ...

    def partitions_for(self, topic: str) -> int: ...


ErrorHandler = Callable[[RecordError, Record], None]
StoreOpener = Callable[[Any, int], Any]


def fail_on_error(error: RecordError, record: Record) -> None:
    """The default error handler: stop processing."""
    raise error


class Task:
    """Runs one sub-topology (or the global stores) for one partition.

    `open_store(spec, partition)` opens a store; by default `kstream.state.open_store` with
    `state_dir` and `default_backend`. `global_stores` are the instance's global stores,
    readable by every processor.
    """

    def __init__(
        self,
        compiled: CompiledTopology,
        subtopology: int | None,
        partition: int,
        *,
        collector: RecordCollector,
        app_id: str | None = None,
        state_dir: str = "",
        default_backend: str = "memory",
        open_store: StoreOpener | None = None,
        error_handler: ErrorHandler = fail_on_error,
        global_stores: Mapping[str, Any] | None = None,
        wall_clock_ms: int = 0,
    ) -> None:
        self.compiled = compiled
        self.app_id = compiled.app_id if app_id is None else app_id
        self.subtopology = subtopology
        self.partition = partition
        self.id = f"{subtopology}_{partition}" if subtopology is not None else "global"
        self.collector = collector
        self.error_handler = error_handler
        self.global_stores: Mapping[str, Any] = global_stores or {}
        self.stream_time = -1
        # The runtime sets `future_limit` (its wall clock plus `future_timestamp_warning`) for
        # each batch; stream time about to move past it calls `on_future(task, run)` first
        # (kstream.runtime.future_timestamps), which finds, counts and reports the records.
        # Checked only when stream time advances: once per run of records, not per record.
        self.future_limit = NO_LIMIT
        self.on_future: FutureWatch | None = None
        self.wall_clock = wall_clock_ms
        self.punctuation_time = -1
        self.current: Record | None = None
        self.depth_first = False
        self.commit_requested = False
        self.dropped: dict[str, int] = {}
        self.schedules: list[Schedule] = []
        self._state_dir = state_dir
        self._default_backend = default_backend
        self._open = open_store or self._default_open

        topo = compiled.topology
        if subtopology is None:
            defs: list[NodeDef] = []
            specs = {}
            for name, g in compiled.global_stores.items():
                defs += [g.source, g.processor]
                specs[name] = g.spec
            topics = {g.source.name: [g.topic] for g in compiled.global_stores.values()}
            children = {g.source.name: [g.processor.name] for g in compiled.global_stores.values()}
            self._depth_first_sources: set[str] = set()
        else:
            sub = compiled.subtopologies[subtopology]
            defs = [topo.nodes[n] for n in sub.nodes]
            specs = {s: topo.stores[s] for s in sub.stores}
            topics = compiled.topic_of_node
            children = topo.children
            self._depth_first_sources = sub.depth_first_sources

        self.stores: dict[str, Any] = {}
        try:
            for name, spec in specs.items():
                store = self._open(spec, partition)
                if hasattr(store, "context"):
                    store.context = self  # its writes note `current` (kstream.state.base)
                self.stores[name] = store
            self.nodes: dict[str, Node] = {}
            self._sources: dict[str, SourceNode] = {}
            self._extracting: list[SourceNode] = []
            for d in defs:
                self.nodes[d.name] = self._make_node(d, topics)
            for d in defs:
                node = self.nodes[d.name]
                node.children = [self.nodes[c] for c in children.get(d.name, ()) if c in self.nodes]
            self._grant_input_ownership()
            for node in self.nodes.values():
                if isinstance(node, ProcessorNode):
                    self.current = None
                    node.processor.init(node.ctx)
        except BaseException:
            for s in self.stores.values():
                s.close()
            raise

    def _grant_input_ownership(self) -> None:
        """Let a processor that can change its input records in place (`owns_input`: map,
        map_values) do so when nobody else sees them: every node from their source to it hands
        its records to one child only, and is the source (whose records are made for the
        batch) or a built-in that forwards records it made or the ones it got (`forwards`).
        Copying each record instead cost a map a fifth of its time."""
        parents: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            for child in node.children:
                parents.setdefault(child.name, []).append(node)
        owned: dict[str, bool] = {}

        def hands_on_own(node: Node) -> bool:
            """The records `node` forwards are its one child's alone."""
            if node.name not in owned:
                owned[node.name] = False  # a cycle, should there be one, owns nothing
                if len(node.children) != 1:
                    found = False
                elif isinstance(node, SourceNode):
                    found = True
                elif isinstance(node, ProcessorNode):
                    kind = getattr(node.processor, "forwards", None)
                    found = kind == "new" or (kind == "given" and gets_own(node))
                else:
                    found = False
                owned[node.name] = found
            return owned[node.name]

        def gets_own(node: Node) -> bool:
            ps = parents.get(node.name, [])
            return len(ps) == 1 and hands_on_own(ps[0])

        for node in self.nodes.values():
            if isinstance(node, ProcessorNode) and hasattr(node.processor, "owns_input"):
                node.processor.owns_input = gets_own(node)

    def _default_open(self, spec: Any, partition: int) -> Any:
        from kstream.state import open_store

        return open_store(
            spec,
            app_id=self.app_id,
            partition=partition,
            state_dir=self._state_dir,
            default_backend=self._default_backend,
        )

    def _make_node(self, d: NodeDef, topics: Mapping[str, list[str]]) -> Node:
        if isinstance(d, SourceDef):
            node = SourceNode(d.name, self, d.key_serde, d.value_serde, d.timestamp_extractor)
            if d.timestamp_extractor is not None:
                self._extracting.append(node)
            for t in topics[d.name]:
                self._sources[t] = node
            return node
        if isinstance(d, SinkDef):
            return SinkNode(
                d.name, self, topics[d.name][0], d.key_serde, d.value_serde, d.partitioner
            )
        assert isinstance(d, ProcessorDef)
        proc = as_processor(d.factory(), d.name)
        return ProcessorNode(d.name, self, proc, list(d.stores))

    # --- provenance and errors -------------------------------------------------------------

    def source(self) -> tuple[str, int, int] | None:
        cur = self.current
        if cur is None or cur.topic is None or cur.partition is None or cur.offset is None:
            return None
        return (cur.topic, cur.partition, cur.offset)

    def record_time(self) -> int:
        """The time of what is being processed, Kafka's record-context timestamp: the current
        record's, a punctuation's time in a punctuation, else stream time. A store write
        takes it for its changelog record."""
        cur = self.current
        if cur is not None:
            return cur.timestamp
        return self.punctuation_time if self.punctuation_time >= 0 else self.stream_time

    def report(self, exc: BaseException, record: Record, where: str) -> None:
        """Turn an exception on `record` into a `ProcessingError` for the error handler."""
        if isinstance(exc, RecordError | TopologyError | StoreError):
            # Already reported (a handler re-raised it further down), a bug in the topology
            # that skipping records cannot fix, or a store that failed: not the record's fault.
            # A store that lost or rolled back its data is rebuilt and the batch retried; one
            # that does not answer stops the app, instead of every record of the outage being
            # skipped or dead-lettered.
            raise exc
        self.fail_record(
            ProcessingError, f"{where} failed on a record: {type(exc).__name__}: {exc}", record, exc
        )

    def fail_record(
        self, kind: type[RecordError], message: str, record: Record, cause: BaseException
    ) -> None:
        """Hand the error policy a `kind` error naming where `record` came from."""
        err = kind(message, topic=record.topic, partition=record.partition, offset=record.offset)
        err.__cause__ = cause
        self.error_handler(err, record)

    def record_dropped(self, reason: str, record: Record | None, node: str) -> None:
        """A node dropped a record on purpose: count it by reason and log where it came from."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        if log.isEnabledFor(logging.DEBUG):
            where = (
                f"topic {record.topic!r} partition {record.partition} offset {record.offset}"
                if record is not None and record.topic is not None
                else "a punctuation"
            )
            log.debug(
                "task %s: %s dropped a record (%s) from %s, timestamp %s",
                self.id,
                node,
                reason,
                where,
                None if record is None else record.timestamp,
            )

    # --- processing ------------------------------------------------------------------------

    @property
    def source_topics(self) -> list[str]:
        return list(self._sources)

    def process_queues(self, queues: list[list[Record]]) -> None:
        """Process the new records of each input partition (each list one partition's, in
        offset order; keys and values still bytes), as Kafka's `PartitionGroup` takes them:
        each record first gets the timestamp it counts with (`stamp`), then the partitions
        are merged by the timestamps of their heads (`kstream.records.merge_by_head`)."""
        self._process(self.order_queues(queues))

    def order_queues(self, queues: list[list[Record]]) -> list[Record]:
        """The records of `queues` stamped (`stamp`) and merged by head timestamps, in the
        order `process_queues` processes them; `process_ordered` then processes them (for an
        engine that needs the order first, as Spark's task does for provenance)."""
        if self._extracting:
            queues = [self.stamp(q) for q in queues]
        queues = [q for q in queues if q]
        if not queues:
            return []
        return queues[0] if len(queues) == 1 else merge_by_head(queues, _timestamp)

    def process_ordered(self, records: list[Record]) -> None:
        """Process records `order_queues` gave, in that order (already stamped)."""
        self._process(records)

    def process(self, records: list[Record]) -> None:
        """Process a time-ordered list of input records (key and value still bytes), each
        stamped first (`stamp`). Records of several partitions are taken in the order given:
        `process_queues` orders them as Kafka does, by extracted timestamps."""
        self._process(self.stamp(records) if self._extracting else records)

    def stamp(self, records: list[Record]) -> list[Record]:
        """`records` with the timestamps they count with: those of a source with a timestamp
        extractor deserialized and stamped, the ones it drops left out (see
        `SourceNode.stamp`); the others as they are."""
        if not self._extracting:
            return records
        out: list[Record] = []
        sources = self._sources
        n = len(records)
        i = 0
        while i < n:
            src = sources.get(records[i].topic)  # type: ignore[arg-type]
            j = i + 1
            while j < n and sources.get(records[j].topic) is src:  # type: ignore[arg-type]
                j += 1
            run = records[i:j]
            out += run if src is None else src.stamp(run)  # no source: `_process` refuses it
            i = j
        return out

    def _process(self, records: list[Record]) -> None:
        n = len(records)
        i = 0
        sources = self._sources
        while i < n:
            topic = records[i].topic
            src = sources.get(topic)  # type: ignore[arg-type]
            if src is None:
                raise TopologyError(
                    f"task {self.id}: got a record of topic {topic!r}, which it does not read "
                    f"(it reads {sorted(sources)})"
                )
            j = i + 1
            while j < n and (records[j].topic == topic or sources.get(records[j].topic) is src):  # type: ignore[arg-type]
                j += 1
            self._run(src, records[i:j] if (i or j != n) else records)
            i = j

    def _run(self, src: SourceNode, run: list[Record]) -> None:
        stream_scheds = [s for s in self.schedules if s.type is PunctuationType.STREAM_TIME]
        if src.name in self._depth_first_sources:
            for r in run:
                self._one(src, [r], r.timestamp)
                self._punctuate_stream_time(stream_scheds)
            return
        if not stream_scheds:
            hi = self.stream_time
            for r in run:
                if r.timestamp > hi:
                    hi = r.timestamp
            self._one(src, run, hi)
            return
        # Cut the run where stream time reaches the next punctuation, so it fires between the
        # same records as it would one record at a time.
        start = 0
        hi = self.stream_time
        for k, r in enumerate(run):
            if r.timestamp > hi:
                hi = r.timestamp
            due = min((s.due for s in stream_scheds if not s.cancelled), default=None)
            if due is not None and hi >= due:
                self._one(src, run[start : k + 1], hi)
                self._punctuate_stream_time(stream_scheds)
                stream_scheds = [s for s in self.schedules if s.type is PunctuationType.STREAM_TIME]
                start = k + 1
        if start < len(run):
            self._one(src, run[start:], hi)

    def _one(self, src: SourceNode, run: list[Record], stream_time: int) -> None:
        self.depth_first = src.name in self._depth_first_sources
        if stream_time > self.stream_time:
            if stream_time > self.future_limit and self.on_future is not None:
                self.on_future(self, run)  # before the move: it compares with the old time
            self.stream_time = stream_time
        self.current = run[0] if len(run) == 1 else None
        try:
            src.process_batch(run)
        finally:
            self.current = None
            self.depth_first = False

    # --- punctuation -----------------------------------------------------------------------

    def add_schedule(
        self,
        ctx: NodeContext,
        interval: int,
        kind: PunctuationType,
        callback: Callable[[int], None],
    ) -> Schedule:
        # Stream time: fire as soon as there is data, then on the grid of `interval` from 0.
        # Wall clock: first after one interval.
        due = 0 if kind is PunctuationType.STREAM_TIME else self.wall_clock + interval
        sched = Schedule(ctx, interval, kind, callback, due)
        self.schedules.append(sched)
        return sched

    def _fire(self, scheds: Iterable[Schedule], now: int) -> None:
        for s in sorted(scheds, key=Schedule.order):
            if s.cancelled or now < s.due:
                continue
            s.advance(now)
            self.current = None
            self.punctuation_time = now
            ctx = s.ctx
            try:
                s.callback(now)
            finally:
                self.punctuation_time = -1
            if ctx.pending or ctx.pending_to:
                ctx.flush()
        self.schedules = [s for s in self.schedules if not s.cancelled]

    def _punctuate_stream_time(self, scheds: list[Schedule]) -> None:
        if self.stream_time >= 0:
            self._fire(scheds, self.stream_time)

    def punctuate_wall_clock(self, now_ms: int) -> None:
        """Advance the wall clock to `now_ms` and fire the wall-clock punctuations now due."""
        if now_ms > self.wall_clock:
            self.wall_clock = now_ms
        self._fire(
            [s for s in self.schedules if s.type is PunctuationType.WALL_CLOCK], self.wall_clock
        )

    # --- state -----------------------------------------------------------------------------

    def flush_caches(self) -> None:
        """Forward what the stores' record caches hold back (kstream.state.caching), before
        a commit. Stores are flushed in topology order; an update forwarded may fill a cache
        further down, so this repeats until every cache is clean."""
        flushers = [f for s in self.stores.values() if (f := getattr(s, "flush_cache", None))]
        for _ in range(len(flushers) + 1):
            if not any([f() for f in flushers]):
                return

    def flush_stores(
        self, checkpoints: Mapping[str, dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Apply every store's write cache; returns `{store: [ChangelogEntry, ...]}`."""
        out = {}
        for name, store in self.stores.items():
            cp = checkpoints.get(name) if checkpoints is not None else None
            out[name] = store.flush(cp)
        for src in self._extracting:
            src.committed_times = dict(src.partition_times)
        self.commit_requested = False
        return out

    def discard(self) -> None:
        """Drop the pending writes of every store (the batch is being retried).

        Processors that keep state in memory beside their stores (a windowed aggregation's
        stream time, a join's) get `after_discard()` to take it back to what the stores
        hold: else a retried batch's records look late against a stream time that the
        rolled-back batch had advanced, and are dropped. Sources with a timestamp extractor
        take their partition times back to the last commit's."""
        for store in self.stores.values():
            store.discard()
        for src in self._extracting:  # the partition times of the last commit
            src.partition_times = dict(src.committed_times)
        for node in self.nodes.values():
            if isinstance(node, ProcessorNode):
                hook = getattr(node.processor, "after_discard", None)
                if hook is not None:
                    hook()

    def close(self, keep_stores: bool = False) -> None:
        """Close processors, then stores (pending writes are not flushed); `keep_stores`:
        leave the stores open (the runtime keeps them for a standby replica)."""
        first: BaseException | None = None
        for node in self.nodes.values():
            if isinstance(node, ProcessorNode):
                try:
                    node.processor.close()
                except Exception as e:
                    first = first or e
        for store in () if keep_stores else self.stores.values():
            try:
                store.close()
            except Exception as e:
                first = first or e
        if first is not None:
            raise first

    def __repr__(self) -> str:
        return f"Task({self.id})"


def _timestamp(r: Record) -> int:
    return r.timestamp
