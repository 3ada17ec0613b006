"""`KGroupedStream`: a stream grouped by key, ready for count / reduce / aggregate."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from kstream.dsl import processors as p
from kstream.dsl.graph import Handle, InternalBuilder, StoreLike, ValueGetter, processor_factory
from kstream.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream, windowed_by
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.serde import Serde, SerdeLike, serde

if TYPE_CHECKING:
    from kstream.dsl.table import KTable

LONG = serde("long")


class KGroupedStream(Handle):
    """Records grouped by their key; aggregations repartition first if the key changed."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        repartition_required: bool,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self._repartition_required = repartition_required

    def _source(self, base: str) -> str:
        """The node to aggregate from, through `<base>-repartition` when the key changed."""
        if not self._repartition_required:
            return self._node
        return self._builder.repartition(
            self._node, base, key_serde=self._key_serde, value_serde=self._value_serde
        )

    def _aggregate(
        self,
        op: str,
        step: Callable[[Any, Any, Any], Any],
        store: StoreLike,
        value_serde: Serde | None,
        name: str | None,
    ) -> KTable:
        from kstream.dsl.table import KTable

        b = self._builder
        node = b.name(op, name)
        spec = b.timestamped_store_spec(
            store, op, key_serde=self._key_serde, value_serde=value_serde
        )
        parent = self._source(spec.name)
        b.processor(node, processor_factory(p.AggregateProcessor, spec.name, step), parent)
        b.add_store(spec, [node])
        return KTable(b, node, self._key_serde, value_serde, ValueGetter(spec.name))

    def count(self, store: StoreLike = None, name: str | None = None) -> KTable:
        """Records per key (a table of ints; its value serde is "long")."""
        return self._aggregate("AGGREGATE", p.count_step, store, LONG, name)

    def reduce(
        self, reducer: Callable[[Any, Any], Any], store: StoreLike = None, name: str | None = None
    ) -> KTable:
        """`reducer(agg, value)`; the first value of a key is its initial aggregate."""
        return self._aggregate("REDUCE", p.reduce_step(reducer), store, self._value_serde, name)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> KTable:
        """`aggregator(key, value, agg)` starting from `initializer()` per key."""
        vs = None if value_serde is None else serde(value_serde)
        step = p.aggregate_step(initializer, aggregator)
        return self._aggregate("AGGREGATE", step, store, vs, name)

    @overload
    def windowed_by(self, windows: TimeWindows | SlidingWindows) -> TimeWindowedKStream: ...

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedKStream | SessionWindowedKStream:
        """A windowed view (time, sliding or session windows) with the same aggregations."""
        return windowed_by(self, windows)
