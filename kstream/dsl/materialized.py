"""`materialized=` for table operators whose result has no store of its own (Kafka's
`Materialized.as(...)` on `filter`, `mapValues`, `transformValues` and table-table joins).

Materialized, the result table keeps its current value per key in a store of its own: the
store is queryable by name (`KTable.store_name`), changelogged unless its spec says otherwise,
and later joins read it instead of replaying the operator on the parent's store. Filter,
map_values and transform_values write the store in their own processor
(`kstream.dsl.table_processors`); a join's result is written by its merge node, wrapped here.
All of them forward their updates through the record cache (`cache_max_bytes`) when it is on
and the store's spec allows it, as Kafka's processors do over a caching store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kstream.dsl.graph import AUTO, InternalBuilder, StoreLike, ValueGetter, processor_factory
from kstream.dsl.processors import BuiltinProcessor, Change, cached_forwarding
from kstream.records import Record
from kstream.serde import Serde, serde
from kstream.topology.processor import ProcessorContext, ProcessorFactory, as_processor
from kstream.topology.topology import ProcessorDef

if TYPE_CHECKING:
    from kstream.dsl.table import KTable
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


class _StoringContext:
    """The context the wrapped node sees: forwarding a `Change` first writes its new value."""

    def __init__(self, ctx: ProcessorContext, owner: MaterializingProcessor) -> None:
        self._ctx = ctx
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def forward(self, record: Record, to: str | None = None) -> None:
        self.forward_batch([record], to)

    def forward_batch(self, records: list[Record], to: str | None = None) -> None:
        out = self._owner.store_all(records)
        if out:  # none when the record cache holds them back
            self._ctx.forward_batch(out, to)


class MaterializingProcessor(BuiltinProcessor):
    """Runs a table node's processor and keeps the table it emits in `store` (Kafka's
    `KTableKTableJoinMerger` with a queryable name): each `Change`'s new value is written
    (None deletes) before the change is forwarded. With the record cache on, the changes go
    to the cache instead, each with the value the store held before its write as old value
    (the merger's `TimestampedTupleForwarder`: a flush forwards the store's values, not the
    join's old ones); the merge sends old values, as it does uncached."""

    def __init__(self, factory: ProcessorFactory, store: str, node: str) -> None:
        self.inner = as_processor(factory(), node)
        self.store_name = store

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        self.cached = cached_forwarding(self.store, ctx)
        self.inner.init(_StoringContext(ctx, self))

    def process_batch(self, records: Sequence[Record]) -> None:
        self.inner.process_batch(list(records))

    def store_all(self, records: list[Record]) -> list[Record]:
        """Write `records`' new values; returns those to forward now (none when cached)."""
        store, task, on_error, cached = self.store, self.task, self.ctx.on_error, self.cached
        out = []
        for r in records:
            ch = r.value
            new = ch.new if isinstance(ch, Change) else ch
            if task is not None:
                task.current = r
            try:
                stored = None if cached is None else store.get(r.key)
                store.put(r.key, new)
            except Exception as e:
                on_error(e, r)
                continue
            finally:
                if task is not None:
                    task.current = None
            if cached is None:
                out.append(r)
            else:
                cached(r.with_value(Change(new, stored)))
        return out

    def close(self) -> None:
        self.inner.close()


def materialize_node(table: KTable, materialized: StoreLike, op: str) -> KTable:
    """`table` (a join's result) kept in a store of its own, written by its own node: the
    node's processor is wrapped, so the topology keeps Kafka's node names."""
    from kstream.dsl.table import KTable

    b = table._builder
    spec = table_store(b, materialized, op, table._key_serde, table._value_serde)
    nodes = b.topology.nodes
    d = nodes[table._node]
    assert isinstance(d, ProcessorDef)
    factory = processor_factory(MaterializingProcessor, d.factory, spec.name, table._node)
    nodes[table._node] = dataclasses.replace(d, factory=factory)
    b.add_store(spec, [table._node])
    vs = value_serde_of(spec, table._value_serde)
    return KTable(b, table._node, table._key_serde, vs, ValueGetter(spec.name), True)
