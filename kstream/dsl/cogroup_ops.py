"""`KGroupedStream.cogroup`: several grouped streams folded into one aggregate per key (KIP-150).

Each input brings its own aggregator; all of them update the same store, so one table holds
the combined result. The topology is Kafka's (`CogroupedStreamAggregateBuilder`): one aggregate
processor per input (`COGROUPKSTREAM-AGGREGATE-<n>`, or `<name>-cogroup-agg-<i>`), all owning
the one store, then a pass-through merge node (`COGROUPKSTREAM-MERGE-<n>`, `<name>-cogroup-merge`)
that the resulting table hangs from. Every input record updates the shared aggregate and is
forwarded at once, as in Kafka. An input whose key changed upstream goes through its own
`<store>-repartition` topic first; the inputs must be co-partitioned.

The operators are here (`CogroupedOps` and the windowed ones), generic in the classes they
make; the classes users name (`CogroupedKStream`, `TimeWindowedCogroupedKStream`,
`SessionWindowedCogroupedKStream`) bind them to `KTable` in `kstream.dsl.api`, and are
importable from `kstream.dsl.cogroup` as before.

Windowed cogroups (`windowed_by`) work the same way over a window or session store. As in Kafka,
each input's processor keeps its own stream time (a record is late for the input it came from),
and results are emitted on every update.

Example:
    >>> from kstream.dsl import StreamBuilder
    >>> from kstream.testing import TopologyTestDriver
    >>> b = StreamBuilder()
    >>> clicks = b.stream("clicks", "string", "long").group_by_key()
    >>> views = b.stream("views", "string", "long").group_by_key()
    >>> totals = clicks.cogroup(lambda k, v, agg: agg + v).cogroup(
    ...     views, lambda k, v, agg: agg - v).aggregate(lambda: 0, name="totals")
    >>> totals.to_stream().to("out", "string", "long")
    >>> with TopologyTestDriver(b) as d:
    ...     d.input_topic("clicks", "string", "long").pipe("a", 5, timestamp=1)
    ...     d.input_topic("views", "string", "long").pipe("a", 2, timestamp=2)
    ...     d.output_topic("out", "string", "long").read_key_values()
    [('a', 5), ('a', 3)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

from kstream.dsl import processors as p
from kstream.dsl.graph import InternalBuilder, StoreLike, processor_factory
from kstream.dsl.handles import GroupedHandle, TableT
from kstream.dsl.processors.cogroup import (
    CogroupSessionWindowAggregateProcessor,
    CogroupSlidingWindowAggregateProcessor,
    CogroupTimeWindowAggregateProcessor,
)
from kstream.dsl.processors.getter import ValueGetter, WindowedValueGetter
from kstream.dsl.processors.windowed import (
    stream_time_store,
)
from kstream.dsl.windowed_ops import (
    _add_stream_time_store,
    _timestamped,
    check_session_store,
    check_window_store,
    session_windowed_serde,
    time_windowed_serde,
)
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.errors import TopologyError
from kstream.serde import Serde, SerdeLike, serde

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec

__all__ = [
    "CogroupedOps",
    "SessionWindowedCogroupedOps",
    "TimeWindowedCogroupedOps",
]

#: the classes a cogroup's `windowed_by` makes (`kstream.dsl.api` binds them)
TimeCogroupT = TypeVar("TimeCogroupT", bound="TimeWindowedCogroupedOps[Any]")
SessionCogroupT = TypeVar("SessionCogroupT", bound="SessionWindowedCogroupedOps[Any]")

Aggregator = Callable[[Any, Any, Any], Any]

AGGREGATE = "AGGREGATE"  # Kafka's CogroupedKStreamImpl.AGGREGATE_NAME, prefix COGROUPKSTREAM
MERGE = "MERGE"
PREFIX = "COGROUPKSTREAM"


class CogroupedOps(Generic[TableT, TimeCogroupT, SessionCogroupT]):
    """`CogroupedKStream`'s operators: grouped streams with one aggregator each, aggregated
    together into one table (of the class `TableT`).

    From `KGroupedStream.cogroup(aggregator)`; add inputs with `cogroup(grouped, aggregator)`
    (a grouped stream given twice keeps its last aggregator, as Kafka's map of patterns does).
    All inputs must have the same key type; their values may differ.
    """

    def __init__(self, first: GroupedHandle[TableT], aggregator: Aggregator) -> None:
        self._builder: InternalBuilder = first._builder
        self._patterns: dict[GroupedHandle[TableT], Aggregator] = {}
        self.cogroup(first, aggregator)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(g._node for g in self._patterns)})"

    def _time_windowed(self) -> type[TimeCogroupT]:
        """The class `windowed_by` makes for time and sliding windows
        (`kstream.dsl.api.TimeWindowedCogroupedKStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no time-windowed cogroups")

    def _session_windowed(self) -> type[SessionCogroupT]:
        """The class `windowed_by` makes for session windows
        (`kstream.dsl.api.SessionWindowedCogroupedKStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no session-windowed cogroups")

    @property
    def _key_serde(self) -> Serde | None:
        return next(iter(self._patterns))._key_serde

    def cogroup(self, grouped: GroupedHandle[TableT], aggregator: Aggregator) -> Self:
        """Add `grouped`, folded in with `aggregator(key, value, agg) -> agg`; returns self.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> b = StreamBuilder()
            >>> a = b.stream("a").group_by_key()
            >>> c = a.cogroup(lambda k, v, n: n + 1).cogroup(b.stream("b").group_by_key(),
            ...                                             lambda k, v, n: n + 10)
            >>> c
            CogroupedKStream(KSTREAM-SOURCE-0000000000, KSTREAM-SOURCE-0000000001)
        """
        if not callable(aggregator):
            raise TopologyError("cogroup needs aggregator(key, value, agg) -> agg")
        if grouped._builder is not self._builder:
            raise TopologyError("cogroup: the grouped streams belong to different builders")
        self._patterns[grouped] = aggregator
        return self

    def aggregate(
        self,
        initializer: Callable[[], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> TableT:
        """The table of the combined aggregates: each key starts from `initializer()` and every
        record of every input updates it with its input's aggregator, then is forwarded.

        `store` names the store (or is a `kstream.stores` key-value spec) as `materialized` does
        in Kafka; `name` names the processors (`<name>-cogroup-agg-<i>`, `<name>-cogroup-merge`).
        Records with a None key or value are dropped and counted.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> a = b.stream("a", "string", "string").group_by_key()
            >>> c = b.stream("c", "string", "string").group_by_key()
            >>> t = a.cogroup(lambda k, v, s: s + v).cogroup(c, lambda k, v, s: s + v.upper())
            >>> t.aggregate(str, store="letters").to_stream().to("out", "string", "string")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("a", "string", "string").pipe("k", "x")
            ...     d.input_topic("c", "string", "string").pipe("k", "y")
            ...     d.output_topic("out", "string", "string").read_values()
            ...     d.get_store("letters").get("k")
            ['x', 'xY']
            'xY'
        """
        b = self._builder
        vs = None if value_serde is None else serde(value_serde)
        spec = b.timestamped_store_spec(
            store, AGGREGATE, key_serde=self._key_serde, value_serde=vs, prefix=PREFIX
        )
        parents = self._sources(spec.name)
        nodes = []
        for i, (parent, aggregator) in enumerate(
            zip(parents, self._patterns.values(), strict=True)
        ):
            node = _agg_name(b, name, i)
            step = p.aggregate_step(initializer, aggregator)
            factory = processor_factory(p.AggregateProcessor, spec.name, step, initializer)
            nodes.append(b.processor(node, factory, parent))
        b.add_store(spec, nodes)
        return self._merge(nodes, name, vs, ValueGetter(spec.name))

    @overload
    def windowed_by(self, windows: TimeWindows | SlidingWindows) -> TimeCogroupT: ...

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionCogroupT: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeCogroupT | SessionCogroupT:
        """The same cogroup aggregated per window: time and sliding windows give a
        `TimeWindowedCogroupedKStream`, session windows a `SessionWindowedCogroupedKStream`.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> from kstream.dsl.windows import TimeWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> a = b.stream("a", "string", "long").group_by_key()
            >>> c = b.stream("c", "string", "long").group_by_key()
            >>> w = a.cogroup(lambda k, v, n: n + v).cogroup(c, lambda k, v, n: n + 100 * v)
            >>> t = w.windowed_by(TimeWindows.of(10)).aggregate(lambda: 0)
            >>> t.to_stream(lambda wk, v: f"{wk.key}@{wk.start}").to("out", "string", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("a", "string", "long").pipe("k", 1, timestamp=3)
            ...     d.input_topic("c", "string", "long").pipe("k", 1, timestamp=12)
            ...     d.input_topic("a", "string", "long").pipe("k", 2, timestamp=5)
            ...     d.output_topic("out", "string", "long").read_key_values()
            [('k@0', 1), ('k@10', 100), ('k@0', 3)]
        """
        if isinstance(windows, TimeWindows | SlidingWindows):
            return self._time_windowed()(self, windows)
        if isinstance(windows, SessionWindows):
            return self._session_windowed()(self, windows)
        raise TopologyError(
            "windowed_by expects TimeWindows, SlidingWindows or SessionWindows, "
            f"got {type(windows).__name__}: {windows!r}"
        )

    # --- building ---------------------------------------------------------------------------

    def _sources(self, store: str) -> list[str]:
        """The node each input aggregates from: for a re-keyed input, its repartition topic,
        `<grouping name>-repartition` or else `<store>-repartition` (as Kafka's
        `processRepartitions`: two re-keyed inputs without a grouping name would collide)."""
        return [g._source(store) for g in self._patterns]

    def _merge(
        self,
        nodes: list[str],
        name: str | None,
        value_serde: Serde | None,
        getter: ValueGetter,
        key_serde: Serde | None = None,
    ) -> TableT:
        """The pass-through merge node below the per-input processors (Kafka's
        `KTablePassThrough`) and the table it is: `key_serde` None is the inputs' key serde."""
        b = self._builder
        merge = b.name(MERGE, None if name is None else f"{name}-cogroup-merge", PREFIX)
        b.processor(merge, p.PassThroughProcessor, nodes)
        ks = self._key_serde if key_serde is None else key_serde
        return next(iter(self._patterns))._tables()(b, merge, ks, value_serde, getter)


def _agg_name(b: InternalBuilder, name: str | None, i: int) -> str:
    return b.name(AGGREGATE, None if name is None else f"{name}-cogroup-agg-{i}", PREFIX)


# --- windowed cogroups -------------------------------------------------------------------------


class _WindowedCogroup(Generic[TableT]):
    def __init__(
        self,
        cogrouped: CogroupedOps[TableT, Any, Any],
        windows: TimeWindows | SlidingWindows | SessionWindows,
    ) -> None:
        self._cogrouped = cogrouped
        self._windows = windows

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._cogrouped!r}, {self._windows!r})"

    def _value_serde(self, value_serde: SerdeLike) -> Serde | None:
        return None if value_serde is None else serde(value_serde)

    def _finish(self, spec: StoreSpec, nodes: list[str]) -> None:
        b = self._cogrouped._builder
        _add_stream_time_store(b, spec.name, nodes[0])
        for n in nodes[1:]:
            b.connect(n, stream_time_store(spec.name))


class TimeWindowedCogroupedOps(_WindowedCogroup[TableT]):
    """`TimeWindowedCogroupedKStream`'s operators: a cogroup over time windows (tumbling,
    hopping) or sliding windows."""

    _windows: TimeWindows | SlidingWindows

    def aggregate(
        self,
        initializer: Callable[[], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> TableT:
        """A table keyed by `Windowed(key, start, end)`: each window's aggregate starts from
        `initializer()` and every record of every input updates the windows it falls in.

        Records later than a window's end + grace (in the stream time of their input) are
        dropped and counted, as in `TimeWindowedKStream`.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> from kstream.dsl.windows import SlidingWindows
            >>> b = StreamBuilder()
            >>> a, c = b.stream("a").group_by_key(), b.stream("c").group_by_key()
            >>> w = a.cogroup(lambda k, v, n: n + 1).cogroup(c, lambda k, v, n: n - 1)
            >>> w.windowed_by(SlidingWindows.of(10)).aggregate(int, name="net")
            KTable(net-cogroup-merge)
        """
        co = self._cogrouped
        b = co._builder
        w = self._windows
        vs = self._value_serde(value_serde)
        sliding = isinstance(w, SlidingWindows)
        size = w.max_difference_ms if isinstance(w, SlidingWindows) else w.size_ms
        retention = (2 * size + 1 if sliding else size) + w.grace_ms
        spec = b.store_spec(
            store,
            AGGREGATE,
            kind="window",
            key_serde=co._key_serde,
            value_serde=vs,
            retention=retention,
            window_size=size,
            prefix=PREFIX,
        )
        check_window_store(spec, size, retention)
        parents = co._sources(spec.name)
        nodes = []
        cls: type = (
            CogroupSlidingWindowAggregateProcessor
            if sliding
            else CogroupTimeWindowAggregateProcessor
        )
        for i, (parent, aggregator) in enumerate(zip(parents, co._patterns.values(), strict=True)):
            step = p.aggregate_step(initializer, aggregator)
            factory = processor_factory(cls, i, spec.name, step, w, False, None)
            nodes.append(b.processor(_agg_name(b, name, i), factory, parent))
        b.add_store(_timestamped(spec), nodes)
        self._finish(spec, nodes)
        getter = WindowedValueGetter(spec.name, session=False)
        return co._merge(nodes, name, vs, getter, time_windowed_serde(co._key_serde, size))


class SessionWindowedCogroupedOps(_WindowedCogroup[TableT]):
    """`SessionWindowedCogroupedKStream`'s operators: a cogroup over session windows."""

    _windows: SessionWindows

    def aggregate(
        self,
        initializer: Callable[[], Any],
        merger: Callable[[Any, Any, Any], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> TableT:
        """A table keyed by the sessions' `Windowed(key, start, end)`: every record of every
        input starts from `initializer()`, merges in each session it joins with
        `merger(key, agg1, agg2)` and is added with its input's aggregator. Merged sessions
        are deleted downstream, as in `SessionWindowedKStream.aggregate`.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> from kstream.dsl.windows import SessionWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> a = b.stream("a", "string", "long").group_by_key()
            >>> c = b.stream("c", "string", "long").group_by_key()
            >>> w = a.cogroup(lambda k, v, n: n + v).cogroup(c, lambda k, v, n: n - v)
            >>> t = w.windowed_by(SessionWindows.with_gap(5)).aggregate(
            ...     lambda: 0, lambda k, x, y: x + y)
            >>> t.to_stream(lambda wk, v: f"{wk.start}-{wk.end}").to("out", "string", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("a", "string", "long").pipe("k", 7, timestamp=1)
            ...     d.input_topic("c", "string", "long").pipe("k", 2, timestamp=4)
            ...     d.output_topic("out", "string", "long").read_key_values()
            [('1-1', 7), ('1-1', None), ('1-4', 5)]
        """
        if not callable(merger):
            raise TopologyError("session aggregate needs merger(key, agg1, agg2)")
        co = self._cogrouped
        b = co._builder
        w = self._windows
        vs = self._value_serde(value_serde)
        retention = w.gap_ms + w.grace_ms
        spec = b.store_spec(
            store,
            AGGREGATE,
            kind="session",
            key_serde=co._key_serde,
            value_serde=vs,
            retention=retention,
            prefix=PREFIX,
        )
        check_session_store(spec, retention)
        parents = co._sources(spec.name)
        nodes = []
        for i, (parent, aggregator) in enumerate(zip(parents, co._patterns.values(), strict=True)):
            factory = processor_factory(
                CogroupSessionWindowAggregateProcessor,
                i,
                spec.name,
                initializer,
                aggregator,
                merger,
                w,
                False,
                None,
            )
            nodes.append(b.processor(_agg_name(b, name, i), factory, parent))
        b.add_store(spec, nodes)
        self._finish(spec, nodes)
        getter = WindowedValueGetter(spec.name, session=True)
        return co._merge(nodes, name, vs, getter, session_windowed_serde(co._key_serde))
