"""`StreamBuilder`: where a DSL program starts (Kafka Streams' StreamsBuilder)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kstream.dsl.api import KStream, KTable
from kstream.dsl.global_table import GlobalKTable
from kstream.dsl.graph import InternalBuilder, StoreLike, processor_factory
from kstream.dsl.materialized import source_table
from kstream.dsl.processors import table as tp
from kstream.dsl.timestamps import TimestampExtractor
from kstream.dsl.versioned import (
    VERSIONED,
    versioned_spec,
)
from kstream.duration import DurationLike
from kstream.errors import TopologyError
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
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> KStream:
        """A stream of the records of `topics` (one topic or several).

        Serdes default to bytes. Each record keeps its Kafka timestamp (the producer's, or the
        broker's on a LogAppendTime topic), which drives windows and joins downstream, unless
        `timestamp_extractor(record, partition_time) -> ms` (Kafka's `TimestampExtractor`, see
        `kstream.dsl.timestamps`) gives another; a negative one drops the record. Records may
        have None keys or values: stateful operators drop them as Kafka Streams does (see each
        operator).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> orders = b.stream(
            ...     "orders", "str", "json", timestamp_extractor=lambda r, t: r.value["at"]
            ... )
            >>> orders.to("out")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("orders", "str", "json").pipe("o1", {"at": 42}, timestamp=7)
            ...     d.output_topic("out", "str", "json").read_record().timestamp
            42
        """
        ks, vs = serde(key_serde), serde(value_serde)
        node = self._builder.source(topics, ks, vs, name)
        node = _extracting(self._builder, node, timestamp_extractor)
        return KStream(self._builder, node, ks, vs)

    def table(
        self,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        store: StoreLike = None,
        backend: str | Backend | None = None,
        name: str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        versioned: DurationLike | None = None,
    ) -> KTable:
        """A table of `topic`: the latest value per key, materialized in `store` (queryable).

        A None value (tombstone) deletes the key; a record with a None key is dropped. The topic is
        read as the table's changelog, so it should be compacted. `backend` picks the store backend
        (see `kstream.stores`) when `store` is only a name; `timestamp_extractor` as in
        `stream`.

        `versioned=history_retention` (or `store=kstream.stores.versioned_key_value(...)`)
        keeps every value each key had for that long (KIP-889, kstream.dsl.versioned): an
        update older than the key's latest goes into history without being forwarded, and a
        stream joined with the table reads it as of each stream record's timestamp (KIP-914).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> prices = b.table("prices", "str", "json", versioned="1h")
            >>> orders = b.stream("orders", "str", "json")
            >>> orders.join(prices, lambda o, p: o["qty"] * p).to("totals", "str", "json")
            >>> with TopologyTestDriver(b) as d:
            ...     price = d.input_topic("prices", "str", "json")
            ...     order = d.input_topic("orders", "str", "json")
            ...     price.pipe("apple", 3, timestamp=10)
            ...     price.pipe("apple", 5, timestamp=20)
            ...     order.pipe("apple", {"qty": 2}, timestamp=15)  # joins the price as of 15
            ...     price.pipe("apple", 4, timestamp=12)  # late: history only, forwards nothing
            ...     order.pipe("apple", {"qty": 2}, timestamp=13)
            ...     d.output_topic("totals", "str", "json").read_values()
            [6, 8]
        """
        b = self._builder
        ks, vs = serde(key_serde), serde(value_serde)
        # Kafka names an unnamed store first (`MaterializedInternal`), then the two nodes
        spec = _spec(b, store, f"{topic}", backend, ks, vs, versioned)
        src = b.source(topic, ks, vs, None if name is None else f"{name}-source")
        src = _extracting(b, src, timestamp_extractor)
        node = b.name("SOURCE", name, prefix="KTABLE")
        return source_table(KTable, b, node, src, spec, store is not None, ks, vs)

    def global_table(
        self,
        topic: str,
        key_serde: SerdeLike = None,
        value_serde: SerdeLike = None,
        store: StoreLike = None,
        backend: str | Backend | None = None,
        name: str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> GlobalKTable:
        """A table of `topic` held in full by every instance, for stream joins by any key.

        Each instance reads every partition of `topic` (no co-partitioning needed): join it
        with `stream.join(global_table, key_selector, joiner)`. A None value deletes the key.
        `timestamp_extractor` as in `stream` (a record it extracts negative is not loaded).

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> countries = b.global_table("countries", "str", "str")
            >>> orders = b.stream("orders", "str", "str")  # value: a country code
            >>> orders.join(countries, lambda k, o: o, lambda o, c: c).to("out", "str", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("countries", "str", "str").pipe("no", "Norway")
            ...     d.input_topic("orders", "str", "str").pipe("o1", "no")
            ...     d.output_topic("out", "str", "str").read_key_values()
            [('o1', 'Norway')]
        """
        b = self._builder
        ks, vs = serde(key_serde), serde(value_serde)
        spec = _spec(b, store, topic, backend, ks, vs)  # named first, as in `table`
        src = b.name("SOURCE", None if name is None else f"{name}-source")
        proc = b.name("SOURCE", name, prefix="KTABLE")
        if spec.kind == VERSIONED:
            raise TopologyError(
                f"global_table {topic!r}: a global table cannot be versioned (as in Kafka "
                "Streams); join a versioned table with a stream instead"
            )
        spec = dataclasses.replace(spec, changelog=False)
        b.topology.add_global_store(
            spec,
            topic,
            ks,
            vs,
            processor_factory(tp.GlobalTableProcessor, spec.name),
            source_name=src,
            processor_name=proc,
            timestamp_extractor=_checked(timestamp_extractor),
        )
        return GlobalKTable(spec.name, topic, ks, vs)

    def build(self) -> Topology:
        """The `Topology` to run, or to test with `kstream.testing.driver.TopologyTestDriver`.

        Example:
            >>> b = StreamBuilder()
            >>> b.stream("in", "str", "str").filter(lambda k, v: v).to("out")
            >>> print(str(b.build().describe()).strip())
            Topologies:
               Sub-topology: 0
                Source: KSTREAM-SOURCE-0000000000 (topics: [in])
                  --> KSTREAM-FILTER-0000000001
                Processor: KSTREAM-FILTER-0000000001 (stores: [])
                  --> KSTREAM-SINK-0000000002
                  <-- KSTREAM-SOURCE-0000000000
                Sink: KSTREAM-SINK-0000000002 (topic: out)
                  <-- KSTREAM-FILTER-0000000001
        """
        return self._builder.topology


def _checked(extractor: TimestampExtractor | None) -> TimestampExtractor | None:
    if extractor is not None and not callable(extractor):
        raise TopologyError(
            f"timestamp_extractor must be a function (record, partition_time) -> ms, "
            f"got {extractor!r}"
        )
    return extractor


def _extracting(b: InternalBuilder, source: str, extractor: TimestampExtractor | None) -> str:
    """`source`, given `extractor` as its timestamp extractor (the task applies it, as Kafka's
    `Consumed.withTimestampExtractor`: no node of its own)."""
    checked = _checked(extractor)
    if checked is not None:
        b.topology.set_timestamp_extractor(source, checked)
    return source


def _spec(
    b: InternalBuilder,
    store: StoreLike,
    topic: str,
    backend: str | Backend | None,
    ks: Serde,
    vs: Serde,
    versioned: DurationLike | None = None,
) -> StoreSpec:
    # Kafka's generated name for a table's store: "<topic>-STATE-STORE-0000000001".
    if store is None:
        store = b.name("STATE-STORE", None, prefix=topic)
    spec = versioned_spec(b, store, versioned, "TABLE", ks, vs) or b.store_spec(
        store, "TABLE", key_serde=ks, value_serde=vs
    )
    if backend is not None and spec.backend is None:
        spec = dataclasses.replace(spec, backend=backend)
    return spec
