"""Sub-topologies run by kstream's own `Task` on Spark: the one Spark engine, for any operator.

Every topology Spark runs (stateless chains, aggregations, windowed aggregations with grace and
emit final, deduplicate, stream-table, stream-stream and global-table joins, KTable re-grouping,
chained stateful operators, user processors) runs here, with the real kstream processors, so
it forwards the same updates as the native engine:

- the topology is compiled for the app id, exactly as the native runtime compiles it. Every
  sub-topology becomes one streaming query that reads the sub-topology's source topics (external
  ones and repartition topics) and writes through the transactional sink; repartition topics are
  real Kafka topics (`<app_id>-<name>`, created with the partition count the native runtime
  gives them), so the hop between sub-topologies is the same as in Kafka Streams;
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

Repeats of records a broker still shows after an aborted transaction: a task drops an input
record whose provenance id is at or below the highest id it has seen from the same source
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
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kstream.broker_compat import HighMarks
from kstream.config import Config
from kstream.dsl import processors as p
from kstream.errors import TopologyError
from kstream.kafka.chosen_topic import partitions_from_metadata
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.records import Headers, Record
from kstream.spark.failure import in_worker
from kstream.spark.packing import output_batch, pack_by_slot
from kstream.spark.policy import Origin, RecordPolicy
from kstream.spark.sink import destination
from kstream.spark.wire import (
    ROW_ARROW_SCHEMA,
    ROW_SCHEMA,
    dumps,
    encode_headers,
    input_records,
    loads,
)
from kstream.state.caching import RecordCache
from kstream.state.provenance import HEADER, header_value
from kstream.topology.compiled import CompiledTopology, compile_topology
from kstream.topology.processor import PunctuationType
from kstream.topology.topology import ProcessorDef, Topology

__all__ = [
    "ROW_SCHEMA",
    "TaskPlan",
    "TaskRun",
    "build_task_plan",
    "partition_queues",
    "stateless_function",
]

_STATELESS: frozenset[type] = frozenset(
    {
        p.FilterProcessor,
        p.MapProcessor,
        p.MapValuesProcessor,
        p.SelectKeyProcessor,
        p.FlatMapProcessor,
        p.FlatMapValuesProcessor,
        p.PeekProcessor,
        p.PassThroughProcessor,
        p.BranchProcessor,
        p.DropNullKeysProcessor,
    }
)
_GLOBAL_WAIT_S = 30.0


@dataclass
class TaskPlan:
    """The compiled topology and how its sub-topologies become queries.

    `order` lists sub-topology ids upstream first, `upstream` the sub-topologies each one reads
    from (through repartition topics) outside the loop it is in, `loops` the sub-topologies that
    feed one another (see `kstream.spark.runner.TaskQueries`); `stateful` those that need Spark
    state
    (stores, global stores, a processor that is not a built-in stateless one, or several input
    topics, whose records a task merges by timestamp). `partitions`
    (every source, sink and internal topic's partition count) is filled in when the query
    starts, as are the connection settings the global-table readers use and the error
    policies.
    """

    app_id: str
    compiled: CompiledTopology
    order: list[int]
    sources: dict[int, list[str]]
    sinks: dict[int, list[str]]
    stateful: set[int]
    global_topics: list[str]
    upstream: dict[int, set[int]] = field(default_factory=dict)
    # sub-topologies that feed one another through topics (a foreign-key join's two sides, a
    # sub-topology reading what it writes), each loop's in id order
    loops: list[list[int]] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)
    bootstrap_servers: str = ""
    kafka: dict[str, Any] = field(default_factory=dict)
    # the error policies the tasks apply (`kstream.spark.policy.policy_config`)
    policies: Config = field(default_factory=Config)
    # where the global-table reads get their consumer (None: Kafka's; pickled with the plan)
    client_supplier: ClientSupplier | None = None
    # the record cache's budget of each task (config `cache_max_bytes`; 0: off)
    cache_max_bytes: int = 0

    @property
    def repartition_topics(self) -> list[str]:
        return sorted(self.compiled.repartition_topics)

    @property
    def external_topics(self) -> list[str]:
        return sorted(set(self.compiled.external_source_topics) | set(self.global_topics))

    @property
    def user_sink_topics(self) -> list[str]:
        internal = set(self.compiled.repartition_topics)
        return sorted({t for s in self.sinks.values() for t in s if t not in internal})

    def blob(self) -> bytes:
        """The plan as bytes for Spark's workers (see `dumps`)."""
        return dumps(self)


_PLANS: dict[bytes, TaskPlan] = {}


def _plan(blob: bytes) -> TaskPlan:
    """The plan of `blob`, unpickled once per Python worker."""
    plan = _PLANS.get(blob)
    if plan is None:
        if len(_PLANS) > 16:
            _PLANS.clear()
        plan = _PLANS[blob] = loads(blob)
    return plan


# --- planning (driver) ------------------------------------------------------------------------


def build_task_plan(topology: Topology, app_id: str) -> TaskPlan:
    """Compile `topology` for `app_id` into per-sub-topology queries, or raise `TopologyError`."""
    compiled = compile_topology(topology, app_id)
    topo = compiled.topology
    for node in topo.nodes.values():
        # an operator the Spark engine cannot run says why (e.g. a sink choosing its topic)
        if isinstance(node, ProcessorDef):
            refusal = getattr(_processor_class(node), "spark_refusal", None)
            if refusal:
                raise TopologyError(f"node {node.name!r}: {refusal}")
    subs = compiled.subtopologies
    writers: dict[str, list[int]] = {}
    for s in subs:
        for t in s.sink_topics:
            writers.setdefault(t, []).append(s.id)
    feeds: dict[int, set[int]] = {s.id: set() for s in subs}  # writer -> its readers
    for s in subs:
        for t in s.source_topics:
            for w in writers.get(t, ()):
                feeds[w].add(s.id)
    components = _components(sorted(feeds), feeds)
    comp_of = {sid: i for i, comp in enumerate(components) for sid in comp}
    # what feeds each sub-topology from outside the loop it is in (itself, when in none)
    upstream: dict[int, set[int]] = {
        sid: {w for w in feeds if sid in feeds[w] and comp_of[w] != comp_of[sid]} for sid in feeds
    }
    loops = [comp for comp in components if len(comp) > 1 or comp[0] in feeds[comp[0]]]
    # upstream first, in waves (each wave: every component whose upstream is done, by id)
    order: list[int] = []
    left = sorted(components)
    while left:
        done = set(order)
        wave = [c for c in left if all(u in done for sid in c for u in upstream[sid])]
        order.extend(sid for c in wave for sid in c)
        left = [c for c in left if c not in wave]
    stateful: set[int] = set()
    internal = set(compiled.repartition_topics)
    for s in subs:
        if internal & set(s.source_topics):
            # its input is what this runner's sink wrote: a batch the sink aborted before a
            # crash may still be shown, so the task keeps the provenance high marks in state
            stateful.add(s.id)
            continue
        if len(s.source_topics) > 1:
            # a task merges its partitions' records by timestamp (Kafka Streams' order): the
            # read tasks each read one topic partition, so the merge needs the task's grouping
            stateful.add(s.id)
            continue
        for n in s.nodes:
            node = topo.nodes[n]
            if not isinstance(node, ProcessorDef):
                continue
            if node.stores or _processor_class(node) not in _STATELESS:
                stateful.add(s.id)
                break
    plan = TaskPlan(
        app_id,
        compiled,
        order,
        {s.id: list(s.source_topics) for s in subs},
        {s.id: list(s.sink_topics) for s in subs},
        stateful,
        sorted(compiled.global_topics),
        upstream,
        loops=loops,
    )
    try:
        loads(plan.blob())
    except Exception as e:
        raise TopologyError(
            f"the topology cannot be sent to Spark's Python workers: {type(e).__name__}: {e} "
            "(functions and serdes in it must pickle)"
        ) from e
    return plan


def _components(nodes: list[int], feeds: Mapping[int, set[int]]) -> list[list[int]]:
    """The strongly connected components of the graph `feeds` (node -> the nodes it feeds),
    upstream first, each's nodes sorted (Tarjan's algorithm, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(feeds[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(feeds[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                out.append(sorted(comp))
    out.reverse()  # Tarjan finds a component after every one it feeds
    return out


def _processor_class(node: ProcessorDef) -> type | None:
    f = node.factory
    if isinstance(f, type):
        return f
    cls = getattr(f, "processor_class", None)
    return cls if isinstance(cls, type) else None


# --- running one task (workers) ---------------------------------------------------------------


class _Collector:
    """Where the task's sinks write: rows of `wire.ROW_SCHEMA`, provenance kept.

    The rows are ready for the sink's slots as they are (packed per slot, `TransactionalSink`
    needs no window to rank them): `ptopic`, `ppart`, `poff` and `seq` make the row's
    provenance id, and `part` is the partition the row goes to wherever it is known (its own,
    else its key's).

    A row's id is its input record's (topic, partition, offset) and its rank among the rows of
    that record, but ids must grow, per source partition, in the order the task writes them:
    a reader of what this task wrote (the next sub-topology's task, `HighMarks`) drops an id at
    or below the highest it has seen from that partition as a repeat. Some rows carry the
    context of an older record than others written before them: an update a record cache or
    a suppress buffer held back, a window closing, a join result found late, or a batch taken
    through one child of a node before the next. Such a row takes the next id after the highest
    this task has written for its source partition (`high`, kept in the task's metadata across
    batches), so ids grow in write order and a replay gives the same ones.
    """

    def __init__(
        self,
        partitions: Mapping[str, int],
        partition: int = 0,
        look_up: Callable[[str], int] | None = None,
        high: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    ) -> None:
        # the topics counted at start-up, and those a topic chooser named since (`look_up`)
        self.partitions = dict(partitions)
        self.look_up = look_up
        self.cols: dict[str, list[Any]] = {n: [] for n in ROW_ARROW_SCHEMA.names}
        self.task: Any = None
        # outputs of no input record (a punctuation before any record): the task's own id
        self.fallback: tuple[str, int, int] = ("", partition, 0)
        # the highest (offset, rank) of the ids written per source (topic, partition)
        self.high: dict[tuple[str, int], tuple[int, int]] = dict(high or {})

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        src = self.task.source() if self.task is not None else None
        self._row(
            src if src is not None else self.fallback,
            topic,
            key,
            value,
            timestamp,
            headers,
            partition,
        )

    def dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        origin: Origin,
    ) -> None:
        """A dead-letter copy of the failed record `origin`: its provenance is that record's."""
        t, part, off = origin
        prov = (t, part, off) if t is not None and part is not None and off is not None else None
        self._row(prov or self.fallback, topic, key, value, timestamp, headers, None)

    def _row(
        self,
        prov: tuple[str, int, int],
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        src_topic, src_part, offset = prov
        last = self.high.get((src_topic, src_part))
        if last is None or offset > last[0]:
            rank = 0
        else:  # at or below an id already written for this partition: the next one after it
            offset, rank = last[0], last[1] + 1
        self.high[(src_topic, src_part)] = (offset, rank)
        if partition is None:
            placed = destination(topic, key, None, self.partitions)
            n = self.partitions.get(topic)
            if placed < 0 and key is None and n:
                # no key (a left foreign-key join's row without a foreign key, a stream's
                # keyless record): Kafka's producer picks any partition, so the task picks its
                # own (modulo the count). Left to the producer, the row could land in a
                # partition another write slot writes in the same batch, in another
                # transaction: the ids in that partition would no longer grow in write order
                # and a reader (`HighMarks`) would drop the later ones as repeats.
                placed = self.fallback[1] % n
            # a topic counted nowhere (a missing sink topic) is left to the producer's
            # partitioner, as on the native runtime
            partition = placed if placed >= 0 else None
        c = self.cols
        c["topic"].append(topic)
        c["k"].append(key)
        c["v"].append(value)
        c["ts"].append(timestamp)
        c["part"].append(partition)
        c["ptopic"].append(src_topic)
        c["ppart"].append(src_part)
        c["poff"].append(offset)
        c["seq"].append(rank)
        c["h"].append(_outgoing_headers(headers))

    def partitions_for(self, topic: str) -> int:
        """The partition count of `topic`: counted at start-up for the topology's topics; a
        topic only a topic chooser names is looked up (`chosen_topic_partitions`) and counted
        from then on, as the native runtime's collector does (so its records are placed by
        their keys here, and each partition is written by one slot)."""
        n = self.partitions.get(topic)
        if n is None:
            n = self.partitions[topic] = self.look_up(topic) if self.look_up is not None else 1
        return n

    def take(self) -> dict[str, list[Any]]:
        out, self.cols = self.cols, {n: [] for n in ROW_ARROW_SCHEMA.names}
        return out


_CHOSEN: dict[tuple[str, str], int] = {}


def chosen_topic_partitions(plan: TaskPlan, topic: str) -> int:
    """The partition count of a topic a topic chooser named (`KStream.to(chooser)`) that the
    plan did not count at start-up: looked up once per Python worker through a producer's
    metadata, as the native runtime's collector looks it up (on a broker that creates topics
    on demand, that request creates it, as a Kafka Streams producer's does). Raises
    TopicError naming the topic if the cluster does not have it."""
    key = (plan.bootstrap_servers, topic)
    n = _CHOSEN.get(key)
    if n is None:
        n = _CHOSEN[key] = _look_up_topic(plan, topic)
    return n


def _look_up_topic(plan: TaskPlan, topic: str) -> int:
    supplier = plan.client_supplier or KafkaClientSupplier()
    producer = supplier.producer(ClientConfig(plan.bootstrap_servers, plan.kafka))
    try:
        return partitions_from_metadata(producer, topic, 30.0)
    finally:
        producer.close()


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
        self.collector = _Collector(
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
        # a repeat is told by its input partition's marks, so each queue is checked alone
        ordered = self.task.order_queues([self._drop_seen(q) for q in partition_queues(records)])
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


def _outgoing_headers(headers: Headers) -> bytes | None:
    """The headers a sink record keeps (encoded): the sink adds its own provenance id."""
    if not headers:
        return None
    return encode_headers([h for h in headers if h[0] != HEADER])


def stateless_function(
    blob: bytes, sub: int, slots: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Function of a sub-topology without state, run inside the read: a task per partition.

    Its outputs leave packed per write slot (`kstream.spark.packing.OUTPUT_SCHEMA`).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plan = _plan(blob)
        tasks: dict[int, TaskRun] = {}
        try:
            with in_worker():
                for batch in batches:
                    by_part: dict[int, list[Record]] = {}
                    for r in input_records(batch):
                        by_part.setdefault(r.partition or 0, []).append(r)
                    for part, records in by_part.items():
                        task = tasks.get(part)
                        if task is None:
                            task = tasks[part] = TaskRun(plan, sub, part, {})
                        cols = task.run(records)
                        if cols["seq"]:
                            yield output_batch(pack_by_slot(cols, slots))
        finally:
            for task in tasks.values():
                task.close()

    return run
