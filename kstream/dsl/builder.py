"""`StreamBuilder`: where a DSL program starts (Kafka Streams' StreamsBuilder)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kstream.dsl import processors as p
from kstream.dsl.graph import InternalBuilder, StoreLike, ValueGetter, processor_factory
from kstream.dsl.stream import KStream
from kstream.dsl.table import GlobalKTable, KTable
from kstream.serde import Serde, SerdeLike, serde
from kstream.topology.topology import Topology

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec
    from store_backends import Backend


class StreamBuilder:
    """Declares streams and tables from topics; `build()` returns the `Topology`."""

    def __init__(self) -> None:
        self._builder = InternalBuilder()

    @property
    def topology(self) -> Topology:
        """The topology built so far (the same object `build()` returns)."""
        return self._builder.topology

    def stream(
        self,
        topics: str | Sequence[str],
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> KStream:
        """A stream of the records of `topics` (one topic or several).

        Serdes default to bytes. Each record keeps its Kafka timestamp, which drives windows and
        joins downstream. Records may have None keys or values: stateful operators drop them as
        Kafka Streams does (see each operator).

        Example:
            b = StreamBuilder()
            orders = b.stream("orders", key_serde="str", value_serde="json")
        """
        ks, vs = serde(key_serde), serde(value_serde)
        node = self._builder.source(topics, ks, vs, name)
        return KStream(self._builder, node, ks, vs)

    def table(
        self,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        store: StoreLike = None,
        backend: str | Backend | None = None,
        name: str | None = None,
    ) -> KTable:
        """A table of `topic`: the latest value per key, materialized in `store` (queryable).

        A None value (tombstone) deletes the key; a record with a None key is dropped. The topic is
        read as the table's changelog, so it should be compacted. `backend` picks the store backend
        (see `kstream.stores`) when `store` is only a name.

        Example:
            users = b.table("users", key_serde="str", value_serde="json", store="users")
        """
        b = self._builder
        ks, vs = serde(key_serde), serde(value_serde)
        src = b.source(topic, ks, vs, None if name is None else f"{name}-source")
        node = b.name("SOURCE", name, prefix="KTABLE")
        spec = _spec(b, store, f"{topic}", backend, ks, vs)
        b.processor(node, processor_factory(p.TableSourceProcessor, spec.name), src)
        b.add_store(spec, [node])
        # Kafka materializes a source table given a store name; an unnamed one only on demand
        return KTable(b, node, ks, vs, ValueGetter(spec.name), sends_old_values=store is not None)

    def global_table(
        self,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        store: StoreLike = None,
        backend: str | Backend | None = None,
        name: str | None = None,
    ) -> GlobalKTable:
        """A table of `topic` held in full by every instance, for stream joins by any key.

        Each instance reads every partition of `topic` (no co-partitioning needed): join it
        with `stream.join(global_table, key_selector, joiner)`. A None value deletes the key.

        Example:
            countries = b.global_table("countries", key_serde="str", value_serde="json")
        """
        b = self._builder
        ks, vs = serde(key_serde), serde(value_serde)
        src = b.name("SOURCE", None if name is None else f"{name}-source")
        proc = b.name("SOURCE", name, prefix="KTABLE")
        spec = _spec(b, store, topic, backend, ks, vs)
        spec = dataclasses.replace(spec, changelog=False)
        b.topology.add_global_store(
            spec,
            topic,
            ks,
            vs,
            processor_factory(p.GlobalTableProcessor, spec.name),
            source_name=src,
            processor_name=proc,
        )
        return GlobalKTable(spec.name, topic, ks, vs)

    def build(self) -> Topology:
        """The `Topology` to run, or to test with `kstream.testing.driver.TopologyTestDriver`.

        Example:
            topology = b.build()
            print(topology.describe())
        """
        return self._builder.topology


def _spec(
    b: InternalBuilder,
    store: StoreLike,
    topic: str,
    backend: str | Backend | None,
    ks: Serde,
    vs: Serde,
) -> StoreSpec:
    # Kafka's generated name for a table's store: "<topic>-STATE-STORE-0000000001".
    if store is None:
        store = b.name("STATE-STORE", None, prefix=topic)
    spec = b.store_spec(store, "TABLE", key_serde=ks, value_serde=vs)
    if backend is not None and spec.backend is None:
        spec = dataclasses.replace(spec, backend=backend)
    return spec
