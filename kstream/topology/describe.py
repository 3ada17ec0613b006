"""Human- and tool-readable descriptions of a topology: text (Kafka's layout), Mermaid, DOT.

The text form follows Kafka Streams' `TopologyDescription` so that people used to it read it at
a glance; Mermaid renders in GitHub and Grafana, DOT in Graphviz.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kstream.topology.compiled import CompiledTopology
from kstream.topology.topology import ProcessorDef, SinkDef, SourceDef


@dataclass(frozen=True)
class NodeDescription:
    """One node. A sink that picks its topic per record (`KStream.to(chooser)`) has no topics
    and its chooser as `topic_name_extractor`, as Kafka's `TopologyDescription.Sink`."""

    name: str
    kind: str  # "source" | "processor" | "sink"
    topics: tuple[str, ...]
    stores: tuple[str, ...]
    predecessors: tuple[str, ...]
    successors: tuple[str, ...]
    topic_name_extractor: object | None = None


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
        """Kafka Streams' `TopologyDescription.toString()`, character for character: parts in
        id order (a global store's part says so), each followed by a blank line except a global
        store's; nodes (and the names after `-->` and `<--`) ordered as Kafka orders them."""
        parts: list[tuple[int, str]] = [(s.id, _subtopology_text(s)) for s in self.subtopologies]
        parts += [(g.id, _global_store_text(g)) for g in self.global_stores]
        parts.sort(key=lambda part: part[0])
        return "Topologies:\n " + "".join("  " + text for _, text in parts)

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


def _subtopology_text(s: SubTopologyDescription) -> str:
    order, successors, predecessors = _kafka_layout(s.nodes)
    by_name = {n.name: n for n in s.nodes}
    lines = [f"Sub-topology: {s.id}"]
    for name in order:
        n = by_name[name]
        succ = ", ".join(successors[name]) or "none"
        pred = ", ".join(predecessors[name]) or "none"
        if n.kind == "source":
            lines.append(f"    Source: {n.name} (topics: [{', '.join(n.topics)}])")
            lines.append(f"      --> {succ}")
        elif n.kind == "sink":
            lines.append(f"    Sink: {n.name} ({_sink_target(n)})")
            lines.append(f"      <-- {pred}")
        else:
            lines.append(f"    Processor: {n.name} (stores: [{', '.join(_java_set(n.stores))}])")
            lines.append(f"      --> {succ}")
            lines.append(f"      <-- {pred}")
    return "\n".join(lines) + "\n\n"


def _sink_target(n: NodeDescription) -> str:
    """Kafka's `InternalTopologyBuilder.Sink.toString`: `topic: <topic>`, or for a sink with a
    `TopicNameExtractor` `extractor class: ` and the extractor's string form (Java's
    `toString()`, here `str()`)."""
    if n.topic_name_extractor is not None:
        return f"extractor class: {n.topic_name_extractor}"
    return f"topic: {n.topics[0]}"


def _topic_name_extractor(node: ProcessorDef) -> object | None:
    """The chooser of a processor that is a sink picking its topic per record, else None.

    Such a processor's class (built with `kstream.dsl.graph.processor_factory`, which keeps
    `processor_class` and `processor_args` on the factory) names it with
    `topic_name_extractor(*args)`."""
    pick = getattr(getattr(node.factory, "processor_class", None), "topic_name_extractor", None)
    if pick is None:
        return None
    chooser: object = pick(*getattr(node.factory, "processor_args", ()))
    return chooser


def _global_store_text(g: GlobalStoreDescription) -> str:
    return (
        f"Sub-topology: {g.id} for global store (will not generate tasks)\n"
        f"    Source: {g.source} (topics: [{g.topic}])\n"
        f"      --> {g.processor}\n"
        f"    Processor: {g.processor} (stores: [{g.store}])\n"
        "      --> none\n"
        f"      <-- {g.source}\n"
    )


def _kafka_layout(
    nodes: tuple[NodeDescription, ...],
) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """The order Kafka prints a sub-topology's nodes in, and each node's successors and
    predecessors in the order it prints them (`InternalTopologyBuilder.describeSubtopology`).

    Kafka orders by a node's "size" (descending), then by name. A node's size is 1 plus the
    sizes of its successors, added up as Kafka connects the nodes: in the iteration order of a
    `HashMap` of the nodes (added in the order the topology got them), each node to its
    predecessors, adding its size so far to each predecessor and theirs. The successor and
    predecessor lists are `TreeSet`s that sort each node by its size when it is added, so they
    are built here as Kafka's red-black trees are, with the sizes of the moment."""
    names = [n.name for n in nodes]
    by_name = {n.name: n for n in nodes}
    size = dict.fromkeys(names, 1)

    def less(a: str, b: str) -> bool:
        return (-size[a], a) < (-size[b], b)

    succ = {name: _TreeSet(less) for name in names}
    pred = {name: _TreeSet(less) for name in names}

    def grow(name: str, delta: int) -> None:
        size[name] += delta
        for p in pred[name].items():
            grow(p, delta)

    # `nodes` come in the order they were added to the topology, as Kafka's node groups
    for name in _java_hash_order(names):
        for parent in by_name[name].predecessors:
            if parent not in by_name:
                continue
            pred[name].add(parent)
            succ[parent].add(name)
            grow(parent, size[name])
    order = sorted(names, key=lambda n: (-size[n], n))
    return (
        order,
        {n: succ[n].items() for n in names},
        {n: pred[n].items() for n in names},
    )


def _java_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def _java_hash_order(items: list[str]) -> list[str]:
    """`items` in the order a `java.util.HashSet` (or `HashMap`) they were added to in this
    order iterates: by bucket of the spread `String.hashCode`, then by insertion."""
    capacity = 16
    while len(items) > capacity * 3 // 4:
        capacity *= 2

    def bucket(text: str) -> int:
        h = _java_hash(text)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)


class _TreeSet:
    """A `java.util.TreeSet` of names with a comparator that may change after an insert (Kafka
    sorts by sizes that grow): a red-black tree as `java.util.TreeMap` builds it, so that its
    order is the one Kafka prints."""

    def __init__(self, less: Callable[[str, str], bool]) -> None:
        self.less = less
        self.root: _RBNode | None = None

    def add(self, key: str) -> None:
        parent: _RBNode | None = None
        node = self.root
        go_left = False
        while node is not None:
            if node.key == key:
                return
            parent = node
            go_left = self.less(key, node.key)
            node = node.left if go_left else node.right
        new = _RBNode(key, parent)
        if parent is None:
            self.root = new
        elif go_left:
            parent.left = new
        else:
            parent.right = new
        self._fix(new)

    def items(self) -> list[str]:
        out: list[str] = []

        def walk(n: _RBNode | None) -> None:
            if n is not None:
                walk(n.left)
                out.append(n.key)
                walk(n.right)

        walk(self.root)
        return out

    def _rotate_left(self, p: _RBNode) -> None:
        r = p.right
        assert r is not None
        p.right = r.left
        if r.left is not None:
            r.left.parent = p
        r.parent = p.parent
        if p.parent is None:
            self.root = r
        elif p.parent.left is p:
            p.parent.left = r
        else:
            p.parent.right = r
        r.left = p
        p.parent = r

    def _rotate_right(self, p: _RBNode) -> None:
        left = p.left
        assert left is not None
        p.left = left.right
        if left.right is not None:
            left.right.parent = p
        left.parent = p.parent
        if p.parent is None:
            self.root = left
        elif p.parent.right is p:
            p.parent.right = left
        else:
            p.parent.left = left
        left.right = p
        p.parent = left

    def _fix(self, x: _RBNode) -> None:
        # TreeMap.fixAfterInsertion
        x.red = True
        while x is not self.root and x.parent is not None and x.parent.red:
            parent = x.parent
            grand = parent.parent
            assert grand is not None
            if parent is grand.left:
                uncle = grand.right
                if uncle is not None and uncle.red:
                    parent.red, uncle.red, grand.red = False, False, True
                    x = grand
                else:
                    if x is parent.right:
                        x = parent
                        self._rotate_left(x)
                    assert x.parent is not None and x.parent.parent is not None
                    x.parent.red, x.parent.parent.red = False, True
                    self._rotate_right(x.parent.parent)
            else:
                uncle = grand.left
                if uncle is not None and uncle.red:
                    parent.red, uncle.red, grand.red = False, False, True
                    x = grand
                else:
                    if x is parent.left:
                        x = parent
                        self._rotate_right(x)
                    assert x.parent is not None and x.parent.parent is not None
                    x.parent.red, x.parent.parent.red = False, True
                    self._rotate_left(x.parent.parent)
        assert self.root is not None
        self.root.red = False


class _RBNode:
    def __init__(self, key: str, parent: _RBNode | None) -> None:
        self.key = key
        self.parent = parent
        self.left: _RBNode | None = None
        self.right: _RBNode | None = None
        self.red = False


def _java_set(items: tuple[str, ...]) -> list[str]:
    """A processor's stores in the order Kafka prints them (from a `java.util.HashSet`)."""
    return _java_hash_order(list(dict.fromkeys(items)))


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
                chooser = _topic_name_extractor(node)
                if chooser is not None:
                    nodes.append(NodeDescription(name, "sink", (), (), node.parents, (), chooser))
                    continue
                stores = tuple(s for s in node.stores if s not in topo.undescribed_stores)
                nodes.append(NodeDescription(name, "processor", (), stores, node.parents, kids))
        subs.append(SubTopologyDescription(s.id, tuple(nodes)))
    globs = [
        GlobalStoreDescription(
            compiled.global_store_ids[name], name, g.topic, g.source.name, g.processor.name
        )
        for name, g in compiled.global_stores.items()
    ]
    return TopologyDescription(subs, globs)
