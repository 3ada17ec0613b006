"""`materialized=` for table operators whose result has no store of its own (Kafka's
`Materialized.as(...)` on `filter`, `mapValues`, `transformValues` and table-table joins).

Materialized, the result table keeps its current value per key in a store of its own: the
store is queryable by name (`KTable.store_name`), changelogged unless its spec says otherwise,
and later joins read it instead of replaying the operator on the parent's store. Filter,
map_values and transform_values write the store in their own processor
(`kstream.dsl.processors.table`); a join's result is written by its merge node, wrapped here.
All of them forward their updates through the record cache (`cache_max_bytes`) when it is on
and the store's spec allows it, as Kafka's processors do over a caching store.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kstream.dsl.graph import AUTO, InternalBuilder, StoreLike, processor_factory
from kstream.dsl.handles import TableT
from kstream.dsl.processors import table as tp
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.table import MaterializingProcessor
from kstream.dsl.processors.versioned import VersionedTableSourceProcessor, VersionedValueGetter
from kstream.dsl.versioned import VERSIONED
from kstream.serde import Serde, serde
from kstream.topology.topology import ProcessorDef

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec


def table_store(
    b: InternalBuilder,
    materialized: StoreLike,
    op: str,
    key_serde: Serde | None,
    value_serde: Serde | None,
) -> StoreSpec:
    """The key-value store spec of a `materialized=` argument (a name or a store spec); the
    serdes it leaves unset are the table's."""
    return b.store_spec(
        materialized, op, key_serde=key_serde, value_serde=value_serde, prefix="KTABLE"
    )


def value_serde_of(spec: StoreSpec, known: Serde | None) -> Serde | None:
    """The value serde of a materialized table: its store's, else the one known upstream."""
    vs = spec.value_serde
    if vs is None or vs is AUTO:
        return known
    return serde(vs)


def materialize_node(table: TableT, materialized: StoreLike, op: str) -> TableT:
    """`table` (a join's result) kept in a store of its own, written by its own node: the
    node's processor is wrapped, so the topology keeps Kafka's node names."""

    b = table._builder
    spec = table_store(b, materialized, op, table._key_serde, table._value_serde)
    nodes = b.topology.nodes
    d = nodes[table._node]
    assert isinstance(d, ProcessorDef)
    factory = processor_factory(MaterializingProcessor, d.factory, spec.name, table._node)
    nodes[table._node] = dataclasses.replace(d, factory=factory)
    b.add_store(spec, [table._node])
    vs = value_serde_of(spec, table._value_serde)
    return type(table)(b, table._node, table._key_serde, vs, ValueGetter(spec.name), True)


def source_table(
    tables: type[TableT],
    b: InternalBuilder,
    node: str,
    parent: str,
    spec: Any,
    named: bool,
    key_serde: Serde | None,
    value_serde: Serde | None,
) -> TableT:
    """The table processor `node` under `parent`, keeping its upserts in `spec`'s store: the
    one shape of `StreamBuilder.table` and `KStream.to_table`, as a `tables` (the
    `KTable` class).

    Kafka's record cache holds back a source table's updates only when it is materialized:
    given a store name (`named`), or on demand (`tp.MaterializedOnDemand`: operators below
    that need its values or old values switch it on). A versioned store is always named."""
    getter: ValueGetter
    on_demand = None
    versioned = spec.kind == VERSIONED
    if versioned:
        factory = processor_factory(VersionedTableSourceProcessor, spec.name)
        getter = VersionedValueGetter(spec.name, spec.retention or 0)
    else:
        if not named:
            on_demand = tp.MaterializedOnDemand(node, spec.name, b.topology)
        factory = processor_factory(tp.TableSourceProcessor, spec.name, on_demand)
        getter = ValueGetter(spec.name)
    b.processor(node, factory, parent)
    # Kafka adds the store of a table it materializes on demand only once it is: `describe()`
    # shows it from then on (`MaterializedOnDemand.enabled`)
    b.add_store(spec, [node], described=on_demand is None)
    if on_demand is not None:
        b.on_demand(on_demand)
    return tables(b, node, key_serde, value_serde, getter, named or versioned, on_demand)
