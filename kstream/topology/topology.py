"""The low-level graph users (and the DSL) build: sources, processors, sinks and stores.

A `Topology` only records definitions; nothing runs here. `compile()` turns it into the
sub-topologies the runtime and the test driver execute (see `kstream.topology.compiled`).

Internal topics (repartition topics) are named here without the application id, as Kafka
Streams does; `compile(app_id)` prefixes them (`<app_id>-<name>`), so one topology can run under
several application ids and its description does not depend on the id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kstream.errors import TopologyError
from kstream.records import Record
from kstream.serde import Serde, SerdeLike, serde
from kstream.topology.processor import ProcessorFactory

if TYPE_CHECKING:
    from kstream.topology.compiled import CompiledTopology
    from kstream.topology.describe import TopologyDescription

Partitioner = Callable[[Any, Any, int], int]

TimestampExtractor = Callable[[Record, int], int]
"""Kafka's `TimestampExtractor`: `(record, partition_time) -> timestamp in ms` of a source's
deserialized record, given the largest timestamp extracted on its partition so far (-1 before
the first); a negative result drops the record (see `kstream.topology.nodes.SourceNode.stamp`)."""


@dataclass
class SourceDef:
    """A source node; `timestamp_extractor` (None: the Kafka timestamp) gives each of its
    records the timestamp it counts with, before the task orders and processes it."""

    name: str
    topics: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde
    timestamp_extractor: TimestampExtractor | None = None


@dataclass
class ProcessorDef:
    name: str
    factory: ProcessorFactory
    parents: tuple[str, ...]
    stores: list[str] = field(default_factory=list)


@dataclass
class SinkDef:
    name: str
    topic: str
    parents: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde
    partitioner: Partitioner | None = None


NodeDef = SourceDef | ProcessorDef | SinkDef


@dataclass
class RepartitionTopicDef:
    """A repartition topic of the topology; `partitions=None` means "as its writer's input"."""

    name: str
    partitions: int | None = None


@dataclass
class GlobalStoreDef:
    """A store replicated in full on every instance, fed by `topic` through `processor`.

    `position` is how many nodes the topology had when the store was added: Kafka Streams
    numbers a global store's part among the sub-topologies in the order nodes were added."""

    spec: Any
    topic: str
    source: SourceDef
    processor: ProcessorDef
    position: int = 0


def _check_factory(what: str, factory: Any) -> None:
    """Reject what can be rejected before any task exists: a non-callable factory, or a class
    without `process` (a factory function is checked when a task first calls it)."""
    if not callable(factory):
        raise TopologyError(f"{what}: factory must be callable, got {factory!r}")
    if isinstance(factory, type) and not callable(getattr(factory, "process", None)):
        raise TopologyError(
            f"{what}: {factory.__name__} has no process(record) method "
            "(a processor needs process; init(ctx) and close() are optional)"
        )


def _check_extractor(what: str, extractor: TimestampExtractor | None) -> TimestampExtractor | None:
    if extractor is not None and not callable(extractor):
        raise TopologyError(
            f"{what}: timestamp_extractor must be a function (record, partition_time) -> ms, "
            f"got {extractor!r}"
        )
    return extractor


def _names(value: str | Iterable[str], what: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise TopologyError(f"{what} must be a non-empty string or list of strings, got {value!r}")
    return names


class Topology:
    """A graph of named nodes (Kafka Streams' `Topology`); every `add_*` returns the topology."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeDef] = {}
        self.children: dict[str, list[str]] = {}
        self.stores: dict[str, Any] = {}
        self.store_users: dict[str, list[str]] = {}
        self.repartition_topics: dict[str, RepartitionTopicDef] = {}
        self.global_stores: dict[str, GlobalStoreDef] = {}
        # stores kept for kstream's own bookkeeping beside the ones Kafka Streams has: they
        # work as any other (changelog included) but `describe()` leaves them out
        self.undescribed_stores: set[str] = set()
        self._topic_owner: dict[str, str] = {}

    # --- building ---------------------------------------------------------------------------

    def _check_new(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TopologyError(f"node name must be a non-empty string, got {name!r}")
        if name in self.nodes or any(
            g.source.name == name or g.processor.name == name for g in self.global_stores.values()
        ):
            raise TopologyError(f"node {name!r} is already in the topology")

    def _check_parents(self, name: str, parents: tuple[str, ...]) -> None:
        for p in parents:
            node = self.nodes.get(p)
            if node is None:
                raise TopologyError(f"node {name!r}: parent {p!r} is not in the topology")
            if isinstance(node, SinkDef):
                raise TopologyError(f"node {name!r}: parent {p!r} is a sink (no children)")

    def add_source(
        self,
        name: str,
        topics: str | Iterable[str],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> Topology:
        """Read `topics` into the graph; each topic may be read by one source only.

        `timestamp_extractor` replaces each record's Kafka timestamp, as Kafka's
        `addSource(TimestampExtractor, ...)`: the task applies it to the deserialized record
        before the record counts for stream time or for the choice of the next partition."""
        self._check_new(name)
        extractor = _check_extractor(f"source {name!r}", timestamp_extractor)
        names = _names(topics, f"source {name!r}: topics")
        for t in names:
            owner = self._topic_owner.get(t)
            if owner is not None:
                raise TopologyError(
                    f"source {name!r}: topic {t!r} is already read by source {owner!r}"
                )
        for t in names:
            self._topic_owner[t] = name
        self.nodes[name] = SourceDef(name, names, serde(key_serde), serde(value_serde), extractor)
        self.children[name] = []
        return self

    def set_timestamp_extractor(self, source: str, extractor: TimestampExtractor) -> Topology:
        """Give source node `source` a timestamp extractor (as `add_source`'s): how the DSL
        applies `Consumed.withTimestampExtractor` to the source it has made."""
        node = self.nodes.get(source)
        if not isinstance(node, SourceDef):
            raise TopologyError(f"timestamp extractor: {source!r} is not a source node")
        node.timestamp_extractor = _check_extractor(f"source {source!r}", extractor)
        return self

    def add_processor(
        self,
        name: str,
        factory: ProcessorFactory,
        parents: str | Sequence[str],
        stores: Iterable[str] = (),
    ) -> Topology:
        """Add a processor created by `factory()` once per task, fed by `parents`."""
        self._check_new(name)
        _check_factory(f"processor {name!r}", factory)
        ps = _names(parents, f"processor {name!r}: parents")
        self._check_parents(name, ps)
        self.nodes[name] = ProcessorDef(name, factory, ps)
        self.children[name] = []
        for p in ps:
            self.children[p].append(name)
        for s in stores:
            self.connect_processor_and_store(name, s)
        return self

    def add_sink(
        self,
        name: str,
        topic: str,
        parents: str | Sequence[str],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        partitioner: Partitioner | None = None,
    ) -> Topology:
        """Write the records of `parents` to `topic`."""
        self._check_new(name)
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"sink {name!r}: topic must be a non-empty string, got {topic!r}")
        ps = _names(parents, f"sink {name!r}: parents")
        self._check_parents(name, ps)
        ks, vs = serde(key_serde), serde(value_serde)
        self.nodes[name] = SinkDef(name, topic, ps, ks, vs, partitioner)
        for p in ps:
            self.children[p].append(name)
        return self

    def add_state_store(
        self, spec: Any, processors: str | Iterable[str] = (), *, described: bool = True
    ) -> Topology:
        """Register a store (a `kstream.stores` spec) and connect it to `processors`.

        `described=False` marks a store that a built-in operator keeps beside the stores Kafka
        Streams' operator has (a windowed aggregation's stream time, say): it is restored and
        changelogged as any store, but `describe()` omits it, so the description stays Kafka's.
        """
        name = getattr(spec, "name", None)
        if not isinstance(name, str) or not name:
            raise TopologyError(f"add_state_store expects a store spec with a name, got {spec!r}")
        if name in self.stores or name in self.global_stores:
            raise TopologyError(f"store {name!r} is already in the topology")
        self.stores[name] = spec
        self.store_users[name] = []
        if not described:
            self.undescribed_stores.add(name)
        for p in (processors,) if isinstance(processors, str) else processors:
            self.connect_processor_and_store(p, name)
        return self

    def connect_processor_and_store(self, processor: str, store: str) -> Topology:
        node = self.nodes.get(processor)
        if not isinstance(node, ProcessorDef):
            raise TopologyError(f"store {store!r}: no processor {processor!r} in the topology")
        if store not in self.stores:
            raise TopologyError(
                f"processor {processor!r}: store {store!r} is not in the topology "
                "(add it with add_state_store first)"
            )
        if store not in node.stores:
            node.stores.append(store)
            self.store_users[store].append(processor)
        return self

    def add_global_store(
        self,
        spec: Any,
        topic: str,
        key_serde: SerdeLike,
        value_serde: SerdeLike,
        processor_factory: ProcessorFactory,
        source_name: str | None = None,
        processor_name: str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> Topology:
        """Add a store every instance holds in full, kept up to date from `topic`.

        `processor_factory()` gets each record of the topic and is expected to write it into the
        store (`ctx.get_store(spec.name)`); the store has no changelog: the topic is one.
        `timestamp_extractor` as in `add_source` (a record it extracts negative is dropped).
        """
        name = getattr(spec, "name", None)
        if not isinstance(name, str) or not name:
            raise TopologyError(f"add_global_store expects a store spec with a name, got {spec!r}")
        if name in self.stores or name in self.global_stores:
            raise TopologyError(f"store {name!r} is already in the topology")
        src_name = source_name or f"{name}-global-source"
        proc_name = processor_name or f"{name}-global-processor"
        _check_factory(f"global store {name!r} processor {proc_name!r}", processor_factory)
        self._check_new(src_name)
        self._check_new(proc_name)
        owner = self._topic_owner.get(topic)
        if owner is not None:
            raise TopologyError(f"global store {name!r}: topic {topic!r} is read by {owner!r}")
        self._topic_owner[topic] = src_name
        extractor = _check_extractor(f"global store {name!r}", timestamp_extractor)
        src = SourceDef(src_name, (topic,), serde(key_serde), serde(value_serde), extractor)
        proc = ProcessorDef(proc_name, processor_factory, (src_name,), [name])
        self.global_stores[name] = GlobalStoreDef(spec, topic, src, proc, len(self.nodes))
        return self

    def add_repartition_topic(self, name: str, partitions: int | None = None) -> Topology:
        """Declare `name` an internal repartition topic (created by the app, id-prefixed)."""
        if name in self.repartition_topics:
            raise TopologyError(f"repartition topic {name!r} is already in the topology")
        if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
            raise TopologyError(f"repartition topic {name!r}: partitions must be >= 1")
        self.repartition_topics[name] = RepartitionTopicDef(name, partitions)
        return self

    # --- using ------------------------------------------------------------------------------

    def compile(self, app_id: str = "") -> CompiledTopology:
        """Split into sub-topologies and name internal topics for `app_id`."""
        from kstream.topology.compiled import compile_topology

        return compile_topology(self, app_id)

    def describe(self) -> TopologyDescription:
        from kstream.topology.describe import describe

        return describe(self.compile())

    def __repr__(self) -> str:
        return f"Topology({len(self.nodes)} nodes, {len(self.stores)} stores)"
