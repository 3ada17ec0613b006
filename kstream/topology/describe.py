"""Human- and tool-readable descriptions of a topology: text (Kafka's layout), Mermaid, DOT.

The text form follows Kafka Streams' `TopologyDescription` so that people used to it read it at
a glance; Mermaid renders in GitHub and Grafana, DOT in Graphviz.
"""

from __future__ import annotations

from dataclasses import dataclass

from kstream.topology.compiled import CompiledTopology
from kstream.topology.topology import ProcessorDef, SinkDef, SourceDef


@dataclass(frozen=True)
class NodeDescription:
    name: str
    kind: str  # "source" | "processor" | "sink"
    topics: tuple[str, ...]
    stores: tuple[str, ...]
    predecessors: tuple[str, ...]
    successors: tuple[str, ...]


@dataclass(frozen=True)
class SubTopologyDescription:
    id: int
    nodes: tuple[NodeDescription, ...]


@dataclass(frozen=True)
class GlobalStoreDescription:
    id: int
    store: str
    topic: str
    source: str
    processor: str


class TopologyDescription:
    """What `Topology.describe()` returns: `str()` for text, `to_mermaid()`, `to_dot()`."""

    def __init__(
        self,
        subtopologies: list[SubTopologyDescription],
        global_stores: list[GlobalStoreDescription],
    ) -> None:
        self.subtopologies = subtopologies
        self.global_stores = global_stores

    def __str__(self) -> str:
        lines = ["Topologies:"]
        for s in self.subtopologies:
            lines.append(f"   Sub-topology: {s.id}")
            for n in s.nodes:
                if n.kind == "source":
                    lines.append(f"    Source: {n.name} (topics: [{', '.join(n.topics)}])")
                elif n.kind == "sink":
                    lines.append(f"    Sink: {n.name} (topic: {n.topics[0]})")
                else:
                    lines.append(f"    Processor: {n.name} (stores: [{', '.join(n.stores)}])")
                if n.successors:
                    lines.append(f"      --> {', '.join(n.successors)}")
                if n.predecessors:
                    lines.append(f"      <-- {', '.join(n.predecessors)}")
        for g in self.global_stores:
            lines.append(f"   Global Store: {g.id} (store: {g.store})")
            lines.append(f"    Source: {g.source} (topics: [{g.topic}])")
            lines.append(f"      --> {g.processor}")
            lines.append(f"    Processor: {g.processor} (stores: [{g.store}])")
            lines.append(f"      <-- {g.source}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return str(self)

    def _ids(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        nodes: dict[str, str] = {}
        topics: dict[str, str] = {}
        stores: dict[str, str] = {}
        for s in self.subtopologies:
            for n in s.nodes:
                nodes[n.name] = f"n{len(nodes)}"
                for t in n.topics:
                    topics.setdefault(t, f"t{len(topics)}")
                for st in n.stores:
                    stores.setdefault(st, f"s{len(stores)}")
        for g in self.global_stores:
            nodes[g.source] = f"n{len(nodes)}"
            nodes[g.processor] = f"n{len(nodes)}"
            topics.setdefault(g.topic, f"t{len(topics)}")
            stores.setdefault(g.store, f"s{len(stores)}")
        return nodes, topics, stores

    def to_mermaid(self) -> str:
        """A Mermaid flowchart: a box per sub-topology, topics as stadiums, stores as cylinders."""
        nid, tid, sid = self._ids()
        out = ["flowchart TD"]
        edges: list[str] = []
        for s in self.subtopologies:
            out.append(f'  subgraph sub{s.id}["Sub-topology {s.id}"]')
            for n in s.nodes:
                out.append(f'    {nid[n.name]}["{_mm(n.name)}"]')
                for c in n.successors:
                    edges.append(f"  {nid[n.name]} --> {nid[c]}")
                for t in n.topics:
                    if n.kind == "source":
                        edges.append(f"  {tid[t]} --> {nid[n.name]}")
                    else:
                        edges.append(f"  {nid[n.name]} --> {tid[t]}")
                for st in n.stores:
                    edges.append(f"  {nid[n.name]} -.- {sid[st]}")
            out.append("  end")
        for g in self.global_stores:
            out.append(f'  subgraph glob{g.id}["Global store {_mm(g.store)}"]')
            out.append(f'    {nid[g.source]}["{_mm(g.source)}"]')
            out.append(f'    {nid[g.processor]}["{_mm(g.processor)}"]')
            out.append("  end")
            edges.append(f"  {tid[g.topic]} --> {nid[g.source]}")
            edges.append(f"  {nid[g.source]} --> {nid[g.processor]}")
            edges.append(f"  {nid[g.processor]} -.- {sid[g.store]}")
        for t, i in tid.items():
            out.append(f'  {i}(["{_mm(t)}"])')
        for st, i in sid.items():
            out.append(f'  {i}[("{_mm(st)}")]')
        return "\n".join(out + edges) + "\n"

    def to_dot(self) -> str:
        """A Graphviz digraph: clusters per sub-topology, topics as ellipses, stores cylinders."""
        out = ["digraph topology {", "  rankdir=LR;", "  node [fontname=Helvetica];"]
        edges: list[str] = []
        topics: set[str] = set()
        stores: set[str] = set()
        for s in self.subtopologies:
            out.append(f"  subgraph cluster_{s.id} {{")
            out.append(f'    label="Sub-topology {s.id}";')
            for n in s.nodes:
                out.append(f"    {_dq(n.name)} [shape=box];")
                for c in n.successors:
                    edges.append(f"  {_dq(n.name)} -> {_dq(c)};")
                for t in n.topics:
                    topics.add(t)
                    if n.kind == "source":
                        edges.append(f"  {_dq('topic:' + t)} -> {_dq(n.name)};")
                    else:
                        edges.append(f"  {_dq(n.name)} -> {_dq('topic:' + t)};")
                for st in n.stores:
                    stores.add(st)
                    edges.append(f"  {_dq(n.name)} -> {_dq('store:' + st)} [style=dashed];")
            out.append("  }")
        for g in self.global_stores:
            out.append(f"  subgraph cluster_global_{g.id} {{")
            out.append(f"    label={_dq('Global store ' + g.store)};")
            out.append(f"    {_dq(g.source)} [shape=box];")
            out.append(f"    {_dq(g.processor)} [shape=box];")
            out.append("  }")
            topics.add(g.topic)
            stores.add(g.store)
            edges.append(f"  {_dq('topic:' + g.topic)} -> {_dq(g.source)};")
            edges.append(f"  {_dq(g.source)} -> {_dq(g.processor)};")
            edges.append(f"  {_dq(g.processor)} -> {_dq('store:' + g.store)} [style=dashed];")
        for t in sorted(topics):
            out.append(f"  {_dq('topic:' + t)} [shape=ellipse, label={_dq(t)}];")
        for st in sorted(stores):
            out.append(f"  {_dq('store:' + st)} [shape=cylinder, label={_dq(st)}];")
        return "\n".join([*out, *edges, "}"]) + "\n"


def _mm(text: str) -> str:
    return text.replace('"', "#quot;")


def _dq(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def describe(compiled: CompiledTopology) -> TopologyDescription:
    topo = compiled.topology
    subs = []
    for s in compiled.subtopologies:
        nodes = []
        for name in s.nodes:
            node = topo.nodes[name]
            kids = tuple(topo.children.get(name, ()))
            if isinstance(node, SourceDef):
                nodes.append(NodeDescription(name, "source", node.topics, (), (), kids))
            elif isinstance(node, SinkDef):
                nodes.append(NodeDescription(name, "sink", (node.topic,), (), node.parents, ()))
            else:
                assert isinstance(node, ProcessorDef)
                nodes.append(
                    NodeDescription(name, "processor", (), tuple(node.stores), node.parents, kids)
                )
        subs.append(SubTopologyDescription(s.id, tuple(nodes)))
    globs = [
        GlobalStoreDescription(len(subs) + i, name, g.topic, g.source.name, g.processor.name)
        for i, (name, g) in enumerate(compiled.global_stores.items())
    ]
    return TopologyDescription(subs, globs)
