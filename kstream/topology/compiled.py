"""A topology split into sub-topologies, with its internal topics resolved for one app id.

Sub-topologies are the connected parts of the graph: nodes joined by parent/child edges or by
a shared store. A topic written by one part and read by another (a repartition topic) is what
separates them. A task is (sub-topology, partition).

Sub-topologies are numbered as Kafka Streams numbers them (`InternalTopologyBuilder.
makeNodeGroups`): in the order of their first node, with a global store's part taking a number
too, in the order its nodes were added, so the ids (and the task ids `<id>_<partition>`) skip
the global stores' numbers. `CompiledTopology.subtopologies[i]` is the sub-topology with id i.

Each source node of a sub-topology also gets an execution mode. Records normally move through
the nodes a batch at a time; that gives the same results as Kafka Streams' one-record-at-a-time
depth-first order only when the nodes reachable from the source form a tree that shares no
store and writes each topic from one sink. Where that is not so (branches of one source merge
again, two branches of one source are joined, a store is used by two nodes on one path, two
sinks write one topic), the source is marked `depth_first` and its records are run one at a
time, in Kafka's order.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsIndex, overload

from kstream.errors import CoPartitioningError, TopologyError
from kstream.internal_topics import (
    WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION,
    changelog_config,
    repartition_config,
    versioned_changelog_config,
)
from kstream.topology.topology import (
    GlobalStoreDef,
    NodeDef,
    ProcessorDef,
    SinkDef,
    SourceDef,
    Topology,
)


@dataclass
class InternalTopic:
    """A topic the application creates: `kind` is "repartition" or "changelog".

    `partitions` is fixed when known at build time (a `repartition(partitions=N)`); otherwise it
    comes from `subtopology` (the writer's input for repartition topics, the owner for changelogs)
    in `CompiledTopology.resolve_partitions`. `retention` is the store's retention for the
    changelog of a time-bounded store (None otherwise): as in Kafka Streams'
    `WindowedChangelogTopicConfig`, the topic's `retention.ms` adds the app's
    `windowstore_changelog_additional_retention` to it when the topic is created, so it is
    kept here rather than as a finished config. `history_retention` is set for the changelog
    of a versioned store, compacted no sooner than that plus a day (Kafka's
    `VersionedChangelogTopicConfig`).
    """

    name: str
    kind: str
    subtopology: int
    partitions: int | None = None
    retention: int | None = None
    history_retention: int | None = None

    def topic_config(
        self, additional_retention: int = WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION
    ) -> dict[str, str]:
        """The configs to create the topic with (kstream.internal_topics)."""
        if self.kind == "repartition":
            return repartition_config()
        if self.history_retention is not None:
            return versioned_changelog_config(self.history_retention)
        return changelog_config(self.retention, additional_retention)


@dataclass
class SubTopology:
    id: int
    nodes: list[str]
    source_topics: list[str]
    sink_topics: list[str]
    stores: list[str]
    depth_first_sources: set[str]


class SubTopologies(list[SubTopology]):
    """The sub-topologies in id order; `[i]` is the one with id i, not the i-th.

    Ids skip the numbers of global stores' parts (see the module docstring), and the runtime
    finds a task's sub-topology by the id in the task id; iterating and `len` are a list's."""

    @overload
    def __getitem__(self, i: SupportsIndex) -> SubTopology: ...

    @overload
    def __getitem__(self, i: slice) -> list[SubTopology]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> SubTopology | list[SubTopology]:
        if isinstance(i, slice):
            return list(super().__getitem__(i))
        sid = operator.index(i)
        for s in self:
            if s.id == sid:
                return s
        raise IndexError(f"no sub-topology {sid}")


@dataclass
class CompiledTopology:
    topology: Topology
    app_id: str
    subtopologies: SubTopologies
    topic_of_node: dict[str, list[str]]
    repartition_topics: dict[str, InternalTopic]
    changelog_topics: dict[str, InternalTopic]
    global_stores: dict[str, GlobalStoreDef]
    _by_topic: dict[str, int] = field(default_factory=dict)
    # the id of each global store's part, in Kafka's numbering (`TopologyDescription`)
    global_store_ids: dict[str, int] = field(default_factory=dict)

    @property
    def source_topics(self) -> list[str]:
        return [t for s in self.subtopologies for t in s.source_topics]

    @property
    def global_topics(self) -> list[str]:
        return [g.topic for g in self.global_stores.values()]

    @property
    def external_source_topics(self) -> list[str]:
        return [t for t in self.source_topics if t not in self.repartition_topics]

    @property
    def internal_topics(self) -> dict[str, InternalTopic]:
        return {**self.repartition_topics, **self.changelog_topics}

    def node(self, name: str) -> NodeDef:
        return self.topology.nodes[name]

    def subtopology_for_topic(self, topic: str) -> SubTopology:
        try:
            return self.subtopologies[self._by_topic[topic]]
        except KeyError:
            raise TopologyError(f"topic {topic!r} is not read by the topology") from None

    def copartition_groups(self) -> list[list[str]]:
        """Topics that must have one partition count: the sources of each sub-topology."""
        return [list(s.source_topics) for s in self.subtopologies if len(s.source_topics) > 1]

    def resolve_partitions(self, external: Mapping[str, int]) -> dict[str, int]:
        """Partition counts of every source and internal topic, given the external topics' counts.

        Raises `CoPartitioningError` when topics read by one sub-topology differ, and
        `TopologyError` when an external topic's count is missing.
        """
        counts: dict[str, int] = {}
        for t in self.external_source_topics:
            if t not in external:
                raise TopologyError(f"source topic {t!r} does not exist (no partition count)")
            counts[t] = external[t]
        for t, it in self.repartition_topics.items():
            if it.partitions is not None:
                counts[t] = it.partitions
        fixed = set(counts)
        # As in Kafka Streams, a repartition topic read together with topics of fixed size (a
        # re-keyed stream joined with a table) takes their partition count, so that the join is
        # co-partitioned by construction.
        for s in self.subtopologies:
            sizes = [counts[t] for t in s.source_topics if t in fixed]
            if sizes:
                for t in s.source_topics:
                    if t not in counts:
                        counts[t] = max(sizes)
        # Other unknown repartition counts follow their writer's input; writers may themselves
        # read repartition topics, so iterate until nothing changes. Repartition topics read
        # together get the largest of their counts. A count waits for all its writer's inputs,
        # unless that leaves every unknown topic waiting on another: a cycle, as in a
        # foreign-key join of two tables that both come through repartition topics (each
        # side's sub-topology reads the topic the other writes). Then, as Kafka Streams'
        # `RepartitionTopics.computePartitionCount` does, the inputs known so far decide, and
        # the co-partitioning below lifts the topics read together to one count.
        partial = False
        for _ in range(2 * (len(self.repartition_topics) + len(self.subtopologies)) + 4):
            changed = False
            for t, it in self.repartition_topics.items():
                if t in counts:
                    continue
                writer = self.subtopologies[it.subtopology]
                # a writer may read its own repartition topic (a re-keyed stream joined with
                # the stream it came from): the other topics it reads decide the count
                inputs = [s for s in writer.source_topics if s != t]
                known = [counts[s] for s in inputs if s in counts]
                if known and (partial or len(known) == len(inputs)):
                    counts[t] = max(known)
                    changed = True
                    partial = False
            for s in self.subtopologies:
                inferred = [t for t in s.source_topics if t in counts and t not in fixed]
                if len(inferred) > 1:
                    top = max(counts[t] for t in inferred)
                    for t in inferred:
                        if counts[t] != top:
                            counts[t] = top
                            changed = True
            if not changed:
                if partial or all(t in counts for t in self.repartition_topics):
                    break
                partial = True
        for t in self.repartition_topics:
            if t not in counts:
                raise TopologyError(f"cannot determine the partition count of {t!r}")
        for s in self.subtopologies:
            self._check_copartitioned(s, counts)
        for t, it in self.changelog_topics.items():
            owner = self.subtopologies[it.subtopology]
            counts[t] = max(counts[x] for x in owner.source_topics)
        return counts

    def _check_copartitioned(self, s: SubTopology, counts: Mapping[str, int]) -> None:
        seen = {t: counts[t] for t in s.source_topics}
        if len(set(seen.values())) > 1:
            listing = ", ".join(f"{t}={n}" for t, n in seen.items())
            raise CoPartitioningError(
                f"sub-topology {s.id} reads topics that are not co-partitioned: {listing} "
                "(they must have the same number of partitions)"
            )

    def tasks(self, counts: Mapping[str, int]) -> list[tuple[int, int]]:
        """Every (sub-topology id, partition) task given resolved partition counts."""
        out: list[tuple[int, int]] = []
        for s in self.subtopologies:
            n = max(counts[t] for t in s.source_topics)
            out.extend((s.id, p) for p in range(n))
        return out


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _resolve(topic: str, topo: Topology, app_id: str) -> str:
    if topic in topo.repartition_topics:
        return f"{app_id}-{topic}" if app_id else topic
    return topic


def compile_topology(topo: Topology, app_id: str) -> CompiledTopology:
    if not topo.nodes:
        raise TopologyError("the topology is empty: add a source (or a DSL stream) first")
    uf = _UnionFind()
    for name, node in topo.nodes.items():
        uf.find(name)
        if not isinstance(node, SourceDef):
            for p in node.parents:
                uf.union(p, name)
    for users in topo.store_users.values():
        for u in users[1:]:
            uf.union(users[0], u)
    for store, users in topo.store_users.items():
        if not users:
            raise TopologyError(f"store {store!r} is not connected to any processor")

    groups: dict[str, list[str]] = {}
    for name in topo.nodes:
        groups.setdefault(uf.find(name), []).append(name)

    sub_ids, global_ids = _kafka_ids(topo, list(groups.values()))
    topic_of_node: dict[str, list[str]] = {}
    subs = SubTopologies()
    by_topic: dict[str, int] = {}
    repartition: dict[str, InternalTopic] = {}
    changelogs: dict[str, InternalTopic] = {}
    for sid, members in zip(sub_ids, groups.values(), strict=True):
        sources: list[str] = []
        sinks: list[str] = []
        stores: list[str] = []
        for n in members:
            node = topo.nodes[n]
            if isinstance(node, SourceDef):
                ts = [_resolve(t, topo, app_id) for t in node.topics]
                topic_of_node[n] = ts
                sources.extend(ts)
            elif isinstance(node, SinkDef):
                t = _resolve(node.topic, topo, app_id)
                topic_of_node[n] = [t]
                sinks.append(t)
            else:
                stores.extend(s for s in node.stores if s not in stores)
        if not sources:
            raise TopologyError(
                f"nodes {members} are not fed by any source (every processor needs a source)"
            )
        for t in sources:
            by_topic[t] = sid
        sub = SubTopology(sid, members, sources, sinks, stores, _depth_first(topo, members))
        subs.append(sub)
        for n in members:
            node = topo.nodes[n]
            if isinstance(node, SinkDef) and node.topic in topo.repartition_topics:
                rt = topo.repartition_topics[node.topic]
                full = topic_of_node[n][0]
                repartition[full] = InternalTopic(full, "repartition", sid, rt.partitions)
        for s in stores:
            spec = topo.stores[s]
            if getattr(spec, "changelog", True):
                name = _changelog_name(spec, app_id)
                retention_fn = getattr(spec, "changelog_retention", None)
                retention = retention_fn() if retention_fn else None
                versioned = getattr(spec, "kind", None) == "versioned_key_value"
                history = spec.retention if versioned else None
                changelogs[name] = InternalTopic(name, "changelog", sid, None, retention, history)
    for rt_name in topo.repartition_topics:
        full = f"{app_id}-{rt_name}" if app_id else rt_name
        if full not in repartition:
            raise TopologyError(f"repartition topic {rt_name!r} has no sink writing to it")
        if full not in by_topic:
            raise TopologyError(f"repartition topic {rt_name!r} has no source reading it")
    return CompiledTopology(
        topo,
        app_id,
        subs,
        topic_of_node,
        repartition,
        changelogs,
        dict(topo.global_stores),
        by_topic,
        global_ids,
    )


def _kafka_ids(topo: Topology, groups: list[list[str]]) -> tuple[list[int], dict[str, int]]:
    """The ids of the sub-topologies `groups` (each in node order, the groups in the order of
    their first node) and of the global stores' parts, numbered together in the order their
    first node was added to the topology."""
    index = {name: i for i, name in enumerate(topo.nodes)}
    # a global store added when the topology had `position` nodes comes before the group
    # whose first node is that node or a later one
    parts: list[tuple[float, str | None]] = [(index[members[0]], None) for members in groups]
    parts += [(g.position - 0.5, name) for name, g in topo.global_stores.items()]
    parts.sort(key=lambda part: part[0])
    sub_ids = [i for i, (_, name) in enumerate(parts) if name is None]
    global_ids = {name: i for i, (_, name) in enumerate(parts) if name is not None}
    return sub_ids, global_ids


def _changelog_name(spec: Any, app_id: str) -> str:
    fn = getattr(spec, "changelog_topic", None)
    if fn is not None and app_id:
        return str(fn(app_id))
    return f"{app_id}-{spec.name}-changelog" if app_id else f"{spec.name}-changelog"


def _depth_first(topo: Topology, members: list[str]) -> set[str]:
    """Source nodes whose reachable graph needs one-record-at-a-time execution."""
    out: set[str] = set()
    for n in members:
        if not isinstance(topo.nodes[n], SourceDef):
            continue
        reach: list[str] = []
        seen = {n}
        stack = [n]
        while stack:
            cur = stack.pop()
            reach.append(cur)
            for c in topo.children.get(cur, ()):
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        store_uses: dict[str, int] = {}
        sink_topics: set[str] = set()
        converges = False
        for r in reach:
            node = topo.nodes[r]
            if not isinstance(node, SourceDef) and sum(p in seen for p in node.parents) > 1:
                converges = True
            if isinstance(node, ProcessorDef):
                for s in node.stores:
                    store_uses[s] = store_uses.get(s, 0) + 1
                    if store_uses[s] > 1:
                        converges = True
            if isinstance(node, SinkDef):
                if node.topic in sink_topics:
                    converges = True
                sink_topics.add(node.topic)
        if converges:
            out.add(n)
    return out
