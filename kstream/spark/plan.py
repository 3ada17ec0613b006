"""The fast path: which nodes of a topology become which Spark step, decided before any query
starts.

A topology this plan accepts runs on Spark as one streaming query. Its nodes fall into three kinds:
- stateless processors (filter, map, branch, table filter/map_values, ...) run as they are,
  batch-wise, inside the Python function of the step that reaches them (the first of which
  runs inside the source's read tasks);
- key-value aggregations (count, reduce, aggregate, to_table, table sources) run in one
  `applyInPandasWithState` step (Spark allows one per query), grouped by bucket of record keys
  (`execute.STATE_BUCKETS`), each running its own processor over a store kept in Spark's state;
- sinks to user topics are written by the transactional sink; repartition topics disappear
  (the grouping of the next stateful step is the shuffle).
Anything else is rejected here, naming the operator; `kstream.spark.run` then runs the topology
on the task path instead (`kstream.spark.tasks`: kstream's own processors, one task per
sub-topology and partition), which has its own build-time checks.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from kstream.config import Config
from kstream.dsl import processors as p
from kstream.errors import TopologyError
from kstream.serde import BUILTIN, Serde
from kstream.topology.topology import ProcessorDef, SinkDef, SourceDef, Topology

STATELESS: frozenset[type] = frozenset(
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
        p.TableToStreamProcessor,
        p.TableFilterProcessor,
        p.TableMapValuesProcessor,
    }
)
KEYED_STATEFUL: frozenset[type] = frozenset({p.AggregateProcessor, p.TableSourceProcessor})

ENTRY = "__entry__"
_GENERATED = re.compile(r"^(?:KSTREAM|KTABLE)-(.+)-\d{10}$")


@dataclass
class Plan:
    """The topology's nodes plus what the Spark steps need to know about them.

    The plan travels to Spark's Python workers by pickle. Built-in serdes are sent by name:
    their functions close over objects that do not pickle, and the workers have them anyway.
    """

    nodes: dict[str, Any]
    repartition_topics: set[str]
    external_topics: list[str]
    source_of_topic: dict[str, str]
    stateful: list[str]
    children: dict[str, list[str]]
    sink_topics: list[str]
    feeds: dict[str, list[str]] = field(default_factory=dict)
    reaches_sink: set[str] = field(default_factory=set)
    sink_partitions: dict[str, int] = field(default_factory=dict)
    # the error policies the steps apply (`kstream.spark.policy.policy_config`)
    policies: Config = field(default_factory=Config)

    def processor_class(self, node: str) -> type | None:
        return processor_class(self.nodes[node])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["nodes"] = {n: _portable(nd) for n, nd in self.nodes.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["nodes"] = {n: _restored(nd) for n, nd in state["nodes"].items()}
        self.__dict__.update(state)


class _BuiltinSerde:
    def __init__(self, name: str) -> None:
        self.name = name


def _portable(node: Any) -> Any:
    if isinstance(node, SourceDef | SinkDef):
        return dataclasses.replace(
            node, key_serde=_by_name(node.key_serde), value_serde=_by_name(node.value_serde)
        )
    return node


def _restored(node: Any) -> Any:
    if isinstance(node, SourceDef | SinkDef):
        return dataclasses.replace(
            node, key_serde=_from_name(node.key_serde), value_serde=_from_name(node.value_serde)
        )
    return node


def _by_name(s: Any) -> Any:
    if isinstance(s, Serde) and BUILTIN.get(s.name) is s:
        return _BuiltinSerde(s.name)
    return s


def _from_name(s: Any) -> Any:
    return BUILTIN[s.name] if isinstance(s, _BuiltinSerde) else s


def processor_class(node: Any) -> type | None:
    """The built-in class behind a processor node, or None for a user's own processor."""
    if not isinstance(node, ProcessorDef):
        return None
    f = node.factory
    if isinstance(f, type):
        return f
    cls = getattr(f, "processor_class", None)
    return cls if isinstance(cls, type) else None


def operator_label(node: ProcessorDef) -> str:
    m = _GENERATED.match(node.name)
    cls = processor_class(node)
    op = m.group(1) if m else node.name
    if cls is None:
        what = "a user Processor"
    elif cls.__module__.startswith("kstream."):
        what = cls.__name__
    else:
        what = f"a user Processor {cls.__name__}"
    return f"{op} (node {node.name!r}, {what})"


def build_plan(topology: Topology) -> Plan:
    """Classify every node; raise `TopologyError` naming the first operator Spark cannot run."""
    topo = topology
    if not topo.nodes:
        raise TopologyError("the topology is empty: add a source (or a DSL stream) first")
    if topo.global_stores:
        names = ", ".join(sorted(topo.global_stores))
        raise TopologyError(
            f"global tables cannot run on Spark yet (global stores: {names}); "
            "use the native runtime for this topology"
        )
    stateful: list[str] = []
    for name, node in topo.nodes.items():
        if not isinstance(node, ProcessorDef):
            continue
        cls = processor_class(node)
        if cls in STATELESS and not node.stores:
            continue
        if cls in KEYED_STATEFUL:
            for s in node.stores:
                users = topo.store_users.get(s, [])
                if users != [name]:
                    others = [u for u in users if u != name]
                    raise TopologyError(
                        f"operator {operator_label(node)} cannot run on Spark: its store {s!r} "
                        f"is also read by {others} (table joins are not supported on Spark yet)"
                    )
            stateful.append(name)
            continue
        raise TopologyError(f"operator {operator_label(node)} cannot run on Spark yet")

    repartition_source: dict[str, str] = {}
    source_of_topic: dict[str, str] = {}
    for name, node in topo.nodes.items():
        if isinstance(node, SourceDef):
            for t in node.topics:
                if t in topo.repartition_topics:
                    repartition_source[t] = name
                else:
                    source_of_topic[t] = name
    children: dict[str, list[str]] = {}
    sink_topics: list[str] = []
    for name, node in topo.nodes.items():
        if isinstance(node, SinkDef):
            if node.topic in topo.repartition_topics:
                children[name] = [repartition_source[node.topic]]
            else:
                children[name] = []
                if node.topic not in sink_topics:
                    sink_topics.append(node.topic)
        else:
            children[name] = list(topo.children.get(name, []))

    plan = Plan(
        dict(topo.nodes),
        set(topo.repartition_topics),
        sorted(source_of_topic),
        source_of_topic,
        [],
        children,
        sink_topics,
    )
    stateful_set = set(stateful)
    starts = {ENTRY: sorted(set(source_of_topic.values()))}
    starts.update({s: children[s] for s in stateful})
    reached: dict[str, set[str]] = {}
    for seg, roots in starts.items():
        dests: set[str] = set()
        stack = list(roots)
        seen: set[str] = set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in stateful_set:
                dests.add(n)
                continue
            node = topo.nodes[n]
            if isinstance(node, SinkDef) and node.topic not in topo.repartition_topics:
                plan.reaches_sink.add(seg)
                continue
            stack.extend(children[n])
        reached[seg] = dests
    for seg in stateful:
        if reached[seg]:
            nxt = topo.nodes[sorted(reached[seg])[0]]
            here = topo.nodes[seg]
            assert isinstance(nxt, ProcessorDef) and isinstance(here, ProcessorDef)
            raise TopologyError(
                f"operator {operator_label(nxt)} reads the output of the stateful operator "
                f"{operator_label(here)}: chained stateful operators cannot run on Spark yet "
                "(a query runs one stateful step)"
            )
    plan.stateful = stateful
    plan.feeds = {s: [seg for seg, d in reached.items() if s in d] for s in stateful}
    return plan
