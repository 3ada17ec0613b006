"""How DSL operators add themselves to the topology: the internal API for operator modules.

The DSL writes straight into a low-level `Topology` as methods are called; `StreamBuilder.build()`
just returns it. Every operator (here and in the window, join, grouped-table and dedup modules)
follows the same steps, through the `InternalBuilder` that every `KStream`/`KTable` carries as
`._builder`:

1. Name its nodes with `b.name(OP)` -> `"KSTREAM-<OP>-0000000007"` (one counter per builder,
   incremented by every generated name, so the same program gives the same names on every
   run: a restart finds the same stores and topics). A user-given name wins:
   `b.name(OP, given)`. Store names: `b.store_name(OP, given)` ->
   `"KSTREAM-<OP>-STATE-STORE-0000000008"`, or normalise a `store=` argument (a name or a
   `kstream.stores` spec) with `b.store_spec(store, OP, kind=..., key_serde=..., ...)`.
2. Add processors with `b.processor(name, factory, parents, stores=(...))`. The factory is
   called once per task and returns a `kstream.topology.Processor`; built-ins subclass
   `kstream.dsl.processors.BuiltinProcessor`, override `process_batch(records)` and forward with
   `self.ctx.forward_batch(list)`; `self.task.current = record` before a store write keeps the
   write's provenance. Stores: `b.add_store(spec, [processor names])`; a processor reading a
   store owned by another (a join reading a table's store) uses `b.connect(processor, store)`:
   that also puts both in one sub-topology, so their topics must be co-partitioned.
3. Repartition before a stateful operator when the input stream has `_repartition_required`
   (set by key-changing operators: map, flat_map, select_key, group_by, process):
   `source = b.repartition(stream._node, base_name, key_serde=..., value_serde=...,
   drop_null_keys=True)` adds a null-key filter, a sink, the internal topic
   `<base>-repartition` (`<app_id>-<base>-repartition` at run time) and a source, and returns
   the source's node name to attach to. The three nodes take Kafka's names: generated ones
   when `base` is (`KSTREAM-MAP-0000000004`), else `<base>-repartition-filter`, `-sink`,
   `-source`. Use the `base` Kafka uses for the operator (an aggregation's store name, a
   join's upstream node, ...): it names an internal topic, which is part of an app's state.
   `KStream._ensure_partitioned(base)` wraps this and returns the node name to read from (the
   stream's own node when no repartition is needed).
   An aggregation's store comes from `b.timestamped_store_spec(...)` (same arguments as
   `store_spec`): its values also keep the result's timestamp, read and written with
   `kstream.dsl.processors.timestamped_access(store)`.
   A left or outer join calls `b.keep_null_keys_upstream(node)` for its stream inputs, so a
   `KStream.repartition()` above keeps null-key records (Kafka 3.7+, KIP-962); a processor
   added below a table filter that is not a filter, map_values or to_stream makes the filter
   send old values (Kafka's `enableSendingOldValues`), which `b.processor` detects itself.
4. Return a new handle. An operator returning a handle of the kind it was given makes it
   with the handle's own class, `type(stream)(b, node, key_serde, value_serde,
   repartition_required)` or `type(table)(b, node, key_serde, value_serde, getter)`; one
   returning the other kind asks for its class (`stream._tables()`, `table._streams()`,
   `grouped._tables()`): the operator modules never name `KStream` or `KTable`, which
   `kstream.dsl.api` defines above them (kstream.dsl.handles). Table operators emit
   `kstream.dsl.processors.Change(new, old)` values; a table's `_getter` (a `ValueGetter`) reads
   the table's current value for a key inside another processor: `getter.stores` names the
   stores to connect, `getter.bind(ctx)` returns `get(key) -> value | None`.

Operators implemented in another module are plain functions that the handle methods call:
`KStream.join` -> `kstream.dsl.joins.join_stream`, `KTable.join` -> `joins.join_tables`,
`KGroupedStream.windowed_by` -> `kstream.dsl.windowed_ops.windowed_by`, `KTable.group_by` ->
`kstream.dsl.grouped_table_ops.group_table`, `KStream.deduplicate` ->
`kstream.dsl.dedup.deduplicate`.
They import downward only (this module, kstream.dsl.handles, the processors), at module
level; the handles' modules import them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from kstream.dsl.processors import table as tp
from kstream.dsl.processors.stateless import DropNullKeysProcessor, NullKeyPolicy
from kstream.errors import TopologyError
from kstream.serde import BUILTIN, Serde, serde
from kstream.state.keyvalue import timestamped
from kstream.topology.processor import Processor, ProcessorFactory
from kstream.topology.topology import Partitioner, Topology

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec

# a name the counter generated (Kafka's test for it, `KStreamImpl.createRepartitionedSource`)
_GENERATED = re.compile(r"KSTREAM.*-[0-9]{10}")

StoreLike: TypeAlias = "str | StoreSpec | None"
"""An operator's `store=` argument: None (a generated name), a store name, or a
`kstream.stores` spec (to choose the backend, serdes, retention or caching)."""


class Handle:
    """What every DSL handle (KStream, KTable, KGroupedStream, ...) carries: the builder it
    belongs to, the node its records come from and the serdes known for them (None: not known,
    the "auto" serde is used where one is needed)."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._node})"


AUTO: Serde = BUILTIN["auto"]


class InternalBuilder:
    """Owns the topology being built and the counter of generated names."""

    def __init__(self) -> None:
        self.topology = Topology()
        self._index = 0
        self._null_key_policies: dict[str, Any] = {}
        # (stream node, base) -> (repartition source, its filter's null-key policy)
        self._join_repartitions: dict[tuple[str, str], tuple[str, Any]] = {}
        self._old_value_flags: dict[str, tuple[Any, ...]] = {}
        # store -> the MaterializedOnDemand of the table keeping it (see `on_demand`)
        self._on_demand: dict[str, Any] = {}

    # --- names ------------------------------------------------------------------------------

    def name(self, op: str, given: str | None = None, prefix: str = "KSTREAM") -> str:
        """A node name: `given`, or `<prefix>-<op>-<10-digit index>`.

        The index is taken even for a given name, as Kafka's `NamedInternal` burns one, so that
        naming one operator leaves the generated names of the others as they were.
        """
        n = f"{prefix}-{op}-{self._index:010d}"
        self._index += 1
        return n if given is None else given

    def store_name(self, op: str, given: str | None = None, prefix: str = "KSTREAM") -> str:
        """A store name: `given` (taking no index, as in Kafka's `MaterializedInternal`), or
        `<prefix>-<op>-STATE-STORE-<index>` (Kafka's pattern)."""
        return given if given is not None else self.name(f"{op}-STATE-STORE", None, prefix)

    def store_spec(
        self,
        store: StoreLike,
        op: str,
        *,
        kind: str = "key_value",
        key_serde: Any = None,
        value_serde: Any = None,
        prefix: str = "KSTREAM",
        **spec_kwargs: Any,
    ) -> StoreSpec:
        """A store spec from a `store=` argument: None (generated name), a name, or a spec.

        Serdes the spec leaves unset are filled with `key_serde`/`value_serde` (None: "auto").
        """
        from kstream import stores

        if store is None or isinstance(store, str):
            name = self.store_name(op, store, prefix)
            factory = getattr(stores, kind)
            spec: StoreSpec = factory(name, **spec_kwargs)
        elif hasattr(store, "with_default_serdes"):
            spec = store
            if spec.kind != kind:
                raise TopologyError(
                    f"store {spec.name!r}: this operator needs a {kind} store, got {spec.kind}"
                )
        else:
            raise TopologyError(f"store= must be a name or a kstream.stores spec, got {store!r}")
        return spec.with_default_serdes(key_serde, value_serde)

    def timestamped_store_spec(self, store: StoreLike, op: str, **kwargs: Any) -> StoreSpec:
        """`store_spec` for an aggregation: its values also keep their result's timestamp
        (see `kstream.state.keyvalue.TimestampedSerde`)."""
        spec = self.store_spec(store, op, **kwargs)
        inner = AUTO if spec.value_serde is None else serde(spec.value_serde)
        return dataclasses.replace(spec, value_serde=timestamped(inner))

    # --- nodes ------------------------------------------------------------------------------

    def source(
        self,
        topics: str | Sequence[str],
        key_serde: Serde | None,
        value_serde: Serde | None,
        name: str | None = None,
        op: str = "SOURCE",
        prefix: str = "KSTREAM",
    ) -> str:
        """Add a source node reading `topics` (step 2 of the module docstring); returns its name."""
        n = self.name(op, name, prefix)
        self.topology.add_source(n, topics, key_serde, value_serde)
        return n

    def processor(
        self,
        name: str,
        factory: ProcessorFactory,
        parents: str | Sequence[str],
        stores: Iterable[str] = (),
    ) -> str:
        """Add processor `name` below `parents`, connected to `stores`; returns `name`.

        Also switches on old values in table filters above it when it is a consumer that needs
        them (see `table_operator`).
        """
        self.topology.add_processor(name, factory, parents, stores)
        if self._old_value_flags:
            self._maybe_send_old_values(factory, parents)
        return name

    def table_operator(self, node: str, parent: str, flag: Any = None) -> None:
        """Record that table node `node` (a filter when `flag` is its `SendOldValues`, else a
        map_values) derives from `parent` without a store of its own."""
        above = self._old_value_flags.get(parent, ())
        self._old_value_flags[node] = above if flag is None else (*above, flag)

    def on_demand(self, flag: Any) -> None:
        """Register the `MaterializedOnDemand` of a table Kafka materializes on demand (an
        unnamed source table, an unnamed foreign-key join result): the first of its table's
        old-value flags (an operator below that forces old values switches it on), switched on
        too when another processor connects to its store (`connect`: Kafka's value getter)."""
        self.table_operator(flag.node, flag.node, flag)
        self._on_demand[flag.store] = flag

    def _maybe_send_old_values(self, factory: Any, parents: str | Sequence[str]) -> None:
        """A consumer other than filter, map_values or to_stream needs old values from the
        table filters above it (Kafka's `enableSendingOldValues`, e.g. by groupBy or joins)."""
        cls = getattr(factory, "processor_class", factory)
        if cls in (tp.TableFilterProcessor, tp.TableMapValuesProcessor, tp.TableToStreamProcessor):
            return
        for parent in (parents,) if isinstance(parents, str) else parents:
            for flag in self._old_value_flags.get(parent, ()):
                flag.enabled = True

    def sink(
        self,
        topic: str,
        parents: str | Sequence[str],
        key_serde: Serde | None,
        value_serde: Serde | None,
        partitioner: Partitioner | None = None,
        name: str | None = None,
    ) -> str:
        """Add a sink writing `parents`' records to `topic`; returns the sink's name."""
        n = self.name("SINK", name)
        self.topology.add_sink(n, topic, parents, key_serde, value_serde, partitioner)
        return n

    def add_store(
        self, spec: StoreSpec, processors: Iterable[str] = (), *, described: bool = True
    ) -> None:
        """Add the store `spec` to the topology, owned by `processors` (changelogged unless the
        spec says otherwise). `described=False`: a store of kstream's own that Kafka's operator
        does not have, left out of `describe()` (see `Topology.add_state_store`).
        """
        self.topology.add_state_store(spec, list(processors), described=described)

    def connect(self, processor: str, store: str) -> None:
        """Let `processor` read `store`, owned by another processor (both join one sub-topology).
        A table Kafka materializes on demand is materialized by a reader (`on_demand`)."""
        self.topology.connect_processor_and_store(processor, store)
        flag = self._on_demand.get(store)
        if flag is not None and processor != flag.node:
            flag.enabled = True

    def repartition(
        self,
        parent: str,
        base: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        partitions: int | None = None,
        drop_null_keys: bool = True,
        relaxable: bool = False,
    ) -> str:
        """Route `parent` through the internal topic `<base>-repartition`; returns its source.

        Named as Kafka names a repartition (`KStreamImpl.createRepartitionedSource`): a sink,
        a filter and a source take a name from the counter each, in that order, whatever their
        names; they keep those generated names when `base` is itself a generated name
        (`KSTREAM-...-0123456789`), otherwise they are `<topic>-sink`, `-filter`, `-source`.
        The filter drops null-key records, unless `drop_null_keys` is False (a join that takes
        them: Kafka 3.7+, KIP-962) or `relaxable` and such a join is added downstream later (see
        `keep_null_keys_upstream`).
        """
        policy = NullKeyPolicy() if relaxable or not drop_null_keys else None
        if policy is not None:
            policy.keep = not drop_null_keys
        return self._repartition(
            parent, base, key_serde, value_serde, partitions, policy, relaxable=relaxable
        )

    def _repartition(
        self,
        parent: str,
        base: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        partitions: int | None,
        policy: Any,
        *,
        relaxable: bool = False,
    ) -> str:
        """The nodes and topic of `repartition`; the filter keeps null keys as `policy` says
        (None: it drops them), and a join added later may relax it when `relaxable`."""
        topic = f"{base}-repartition"
        self.topology.add_repartition_topic(topic, partitions)
        sink, filter_, src = self.name("SINK"), self.name("FILTER"), self.name("SOURCE")
        if not _GENERATED.fullmatch(base):
            sink, filter_, src = f"{topic}-sink", f"{topic}-filter", f"{topic}-source"
        self.processor(filter_, processor_factory(DropNullKeysProcessor, policy), parent)
        if relaxable:
            self._null_key_policies[filter_] = policy
        ks, vs = key_serde or AUTO, value_serde or AUTO
        self.topology.add_sink(sink, topic, filter_, ks, vs, None)
        self.topology.add_source(src, topic, ks, vs)
        return src

    def join_repartition(
        self,
        parent: str,
        base: str,
        *,
        key_serde: Serde | None,
        value_serde: Serde | None,
        keep_null_keys: bool,
    ) -> str:
        """`repartition` for a join reading `parent`: Kafka (`KStreamImpl.repartitionForJoin`)
        repartitions a stream once for every join that names the topic alike (unnamed joins
        name it after the stream's node), so a second join of the stream reads the same
        topic; it still takes the three names a repartition takes from the counter. The filter
        keeps null-key records once one of the joins takes them (a left or outer join)."""
        found = self._join_repartitions.get((parent, base))
        if found is not None:
            for op in ("SINK", "FILTER", "SOURCE"):
                self.name(op)
            src, policy = found
            policy.keep = policy.keep or keep_null_keys
            return src
        policy = NullKeyPolicy()
        policy.keep = keep_null_keys
        src = self._repartition(parent, base, key_serde, value_serde, None, policy)
        self._join_repartitions[(parent, base)] = (src, policy)
        return src

    def regroup_repartition(
        self,
        parent: str,
        base: str,
        *,
        key_serde: Serde,
        value_serde: Serde,
        name: str | None = None,
    ) -> str:
        """Route a regrouped table's updates through `<base>-repartition`; returns its source.

        As Kafka's `GroupedTableOperationRepartitionNode`: a sink and a source with generated
        names, or `<name>-sink` and `<name>-source` for an aggregation named `name`
        (KGroupedTableImpl), and no filter (the regroup processor above drops None keys).
        """
        topic = f"{base}-repartition"
        self.topology.add_repartition_topic(topic, None)
        # a given name still takes its index (Kafka's NamedInternal.suffixWithOrElseGet)
        sink = self.name("SINK", None if name is None else f"{name}-sink")
        src = self.name("SOURCE", None if name is None else f"{name}-source")
        self.topology.add_sink(sink, topic, parent, key_serde, value_serde, None)
        self.topology.add_source(src, topic, key_serde, value_serde)
        return src

    def keep_null_keys_upstream(self, node: str) -> None:
        """A left or outer join reads from `node`: every relaxable repartition filter above it
        (across repartition topics too) keeps null-key records, as Kafka 3.7+ does (KIP-962,
        `InternalStreamsBuilder`'s null-key filter is only enabled with no such join below)."""
        if not self._null_key_policies:
            return
        topo = self.topology
        writers: dict[str, list[str]] = {}
        for n, d in topo.nodes.items():
            topic = getattr(d, "topic", None)
            if topic is not None:
                writers.setdefault(topic, []).append(n)
        seen: set[str] = set()
        todo = [node]
        while todo:
            n = todo.pop()
            if n in seen or n not in topo.nodes:
                continue
            seen.add(n)
            policy = self._null_key_policies.get(n)
            if policy is not None:
                policy.keep = True
            d = topo.nodes[n]
            todo.extend(getattr(d, "parents", ()))
            for topic in getattr(d, "topics", ()):
                todo.extend(writers.get(topic, ()))


def processor_factory(cls: type[Processor], *args: Any) -> ProcessorFactory:
    """A factory building `cls(*args)` per task (one instance per task, never shared).

    The factory remembers `cls` and `args` (`processor_class`, `processor_args`) so that other
    engines (the Spark runner) can tell which operator a node is without running it.
    """

    def factory() -> Processor:
        return cls(*args)

    factory.processor_class = cls  # type: ignore[attr-defined]
    factory.processor_args = args  # type: ignore[attr-defined]
    return factory
