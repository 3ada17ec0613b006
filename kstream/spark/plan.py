"""How a topology becomes Spark queries: the task plan, made on the driver.

The topology is compiled for the app id, exactly as the native runtime compiles it; every
sub-topology becomes one streaming query, but for a re-keying one that feeds a stateful one
through a repartition topic only it writes, which runs in that one's query (`fused`:
`kstream.spark.fusion`). `build_task_plan` finds which sub-topologies need Spark state
(`TaskPlan.stateful`), which feed one another (`loops`: a foreign-key join's two sides) and
the order their queries start in under `availableNow` (`order`, `upstream`). The plan
travels to Spark's Python workers pickled (`TaskPlan.blob`) and is unpickled once per worker
(`plan_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kstream.config import Config
from kstream.errors import TopologyError
from kstream.kafka.supplier import ClientSupplier
from kstream.spark.wire import dumps, loads
from kstream.topology.compiled import CompiledTopology, compile_topology
from kstream.topology.topology import ProcessorDef, Topology

__all__ = ["TaskPlan", "build_task_plan", "fusable", "plan_of", "tasks_write"]


@dataclass
class TaskPlan:
    """The compiled topology and how its sub-topologies become queries.

    `order` lists sub-topology ids upstream first, `upstream` the sub-topologies each one reads
    from (through repartition topics) outside the loop it is in, `loops` the sub-topologies that
    feed one another (see `kstream.spark.queries.TaskQueries`); `stateful` those that need Spark
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
    # `broker_compat` on: outputs stamped with provenance ids, repeats dropped by high marks
    # (kstream.broker_compat); Apache Kafka needs neither (docs/spark.md, "Exactly-once")
    provenance: bool = False
    # config `gc_pause`: Python's cyclic collector paused while a task runs a batch
    gc_pause: bool = True
    # a stateful sub-topology -> the stateless one that feeds it through a repartition topic
    # in its own query's read tasks, the hop being Spark's shuffle (`kstream.spark.fusion`)
    fused: dict[int, int] = field(default_factory=dict)

    def read_topics(self, sid: int) -> list[str]:
        """The topics sub-topology `sid`'s query reads: its upstream's when fused."""
        return self.sources[self.fused.get(sid, sid)]

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

    def unfuse(self, upstream: set[int]) -> None:
        """Give the fused sub-topologies in `upstream` their own query again (before the one
        they feed), as a checkpoint written before their hop was fused has it."""
        for sid, up in list(self.fused.items()):
            if up in upstream:
                del self.fused[sid]
                self.order.insert(self.order.index(sid), up)
                self.upstream[up] = self.upstream[sid]
                self.upstream[sid] = {up}

    def blob(self) -> bytes:
        """The plan as bytes for Spark's workers (see `dumps`)."""
        return dumps(self)


_PLANS: dict[bytes, TaskPlan] = {}


def plan_of(blob: bytes) -> TaskPlan:
    """The plan of `blob`, unpickled once per Python worker."""
    plan = _PLANS.get(blob)
    if plan is None:
        if len(_PLANS) > 16:
            _PLANS.clear()
        plan = _PLANS[blob] = loads(blob)
    return plan


# --- planning (driver) ------------------------------------------------------------------------


def build_task_plan(topology: Topology, app_id: str) -> TaskPlan:
    """Compile `topology` for `app_id` into per-sub-topology queries, or raise `TopologyError`.
    A repartition hop that Spark's shuffle can do is fused (`fusable`)."""
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
            # a built-in operator that keeps nothing between records says so (its class's
            # `stateless` flag); any other processor may keep state, so it gets a task
            if node.stores or not getattr(_processor_class(node), "stateless", False):
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
    for sid, up in fusable(plan).items():
        plan.fused[sid] = up
        plan.order.remove(up)
        plan.upstream[sid] = plan.upstream.pop(up)
    try:
        loads(plan.blob())
    except Exception as e:
        raise TopologyError(
            f"the topology cannot be sent to Spark's Python workers: {type(e).__name__}: {e} "
            "(functions and serdes in it must pickle)"
        ) from e
    return plan


def fusable(plan: TaskPlan) -> dict[int, int]:
    """Each stateful sub-topology whose repartition hop can be Spark's shuffle -> the stateless
    sub-topology that feeds it (`kstream.spark.fusion`): its only input is one repartition
    topic, which one stateless sub-topology writes (and nothing else) and nobody else reads,
    neither of them in a loop, the upstream reading only external topics."""
    internal = set(plan.repartition_topics)
    writers: dict[str, list[int]] = {}
    readers: dict[str, list[int]] = {}
    for sid, topics in plan.sinks.items():
        for t in topics:
            writers.setdefault(t, []).append(sid)
    for sid, topics in plan.sources.items():
        for t in topics:
            readers.setdefault(t, []).append(sid)
    looped = {sid for loop in plan.loops for sid in loop}
    out: dict[int, int] = {}
    for sid in plan.order:
        topics = plan.sources.get(sid, [])
        if sid not in plan.stateful or sid in looped or len(topics) != 1:
            continue
        (topic,) = topics
        if topic not in internal or readers.get(topic) != [sid]:
            continue
        ups = writers.get(topic, [])
        if len(ups) != 1:
            continue
        (up,) = ups
        if up == sid or up in plan.stateful or up in looped or plan.sinks.get(up) != [topic]:
            continue
        if any(t in writers for t in plan.sources.get(up, [])):
            continue  # it reads what another sub-topology writes: keep its query's turn
        out[sid] = up
    return out


def tasks_write(plan: TaskPlan, sid: int) -> bool:
    """Whether stateful sub-topology `sid`'s tasks can write their own outputs, each in a
    transaction of its own, with no write-slot stage after them (`kstream.spark.sink`): the
    app reads none of the topics it writes (no other sub-topology's source, no global table's,
    no loop), and no sink of it picks its topic per record (a chooser may name any topic).

    Write slots exist for the order within a partition that several tasks write: a slot merges
    their rows by timestamp, as the next sub-topology of a Kafka Streams app would take them.
    Where nothing in the app reads a topic, that order is nobody's input: Kafka Streams' own
    tasks interleave their writes to a shared partition however their threads run."""
    if sid not in plan.stateful or any(sid in loop for loop in plan.loops):
        return False
    read = {t for topics in plan.sources.values() for t in topics} | set(plan.global_topics)
    if any(t in read for t in plan.sinks.get(sid, ())):
        return False
    topo = plan.compiled.topology
    for sub in (sid, plan.fused.get(sid)):
        if sub is None:
            continue
        for n in plan.compiled.subtopologies[sub].nodes:
            node = topo.nodes[n]
            if isinstance(node, ProcessorDef) and hasattr(
                _processor_class(node), "topic_name_extractor"
            ):
                return False
    return True


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
