"""`KGroupedStream`'s operators: a stream grouped by key, ready for count / reduce / aggregate,
windowing and cogrouping.

`GroupedStreamOps` is generic in the classes it makes (the table, the two windowed streams and
the cogroup) and names none of them: it asks for each through a hook (`_tables()`,
`_time_windowed()`, ...). `kstream.dsl.api.KGroupedStream` binds them, so the class users
name is not generic and is annotated bare.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from kstream.dsl import processors as p
from kstream.dsl.cogroup_ops import CogroupedOps
from kstream.dsl.graph import StoreLike, processor_factory
from kstream.dsl.handles import GroupedHandle, TableT
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.windowed_ops import SessionWinT, TimeWinT, windowed_by
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.serde import Serde, SerdeLike, serde

LONG = serde("long")


#: the cogroup class a grouped stream's `cogroup` makes (`kstream.dsl.api` binds it)
CogroupT = TypeVar("CogroupT", bound="CogroupedOps[Any, Any, Any]")


#: the grouped-stream class a stream's `group_by_key`/`group_by` makes (`kstream.dsl.api`)
GroupedStreamT = TypeVar("GroupedStreamT", bound="GroupedStreamOps[Any, Any, Any, Any]")


class GroupedStreamOps(GroupedHandle[TableT], Generic[TableT, TimeWinT, SessionWinT, CogroupT]):
    """`KGroupedStream`'s operators: each aggregation returns a table (`TableT`) and
    repartitions first if the key changed upstream; `windowed_by` returns a `TimeWinT` or a
    `SessionWinT`, `cogroup` a `CogroupT`."""

    def _time_windowed(self) -> type[TimeWinT]:
        """The class `windowed_by` makes for time and sliding windows
        (`kstream.dsl.api.TimeWindowedKStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no time-windowed streams")

    def _session_windowed(self) -> type[SessionWinT]:
        """The class `windowed_by` makes for session windows
        (`kstream.dsl.api.SessionWindowedKStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no session-windowed streams")

    def _cogrouped(self) -> type[CogroupT]:
        """The class `cogroup` makes (`kstream.dsl.api.CogroupedKStream`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no cogroups")

    def _aggregate(
        self,
        op: str,
        step: Callable[[Any, Any, Any], Any],
        store: StoreLike,
        value_serde: Serde | None,
        name: str | None,
        initial: Callable[[], Any] | None = None,
    ) -> TableT:
        b = self._builder
        node = b.name(op, name)
        spec = b.timestamped_store_spec(
            store, op, key_serde=self._key_serde, value_serde=value_serde
        )
        parent = self._source(spec.name)
        factory = processor_factory(p.AggregateProcessor, spec.name, step, initial)
        b.processor(node, factory, parent)
        b.add_store(spec, [node])
        return self._tables()(b, node, self._key_serde, value_serde, ValueGetter(spec.name))

    def count(self, store: StoreLike = None, name: str | None = None) -> TableT:
        """Count the records per key: a table of ints (value serde "long"), updated on every record.

        Records with a None key or value are dropped (counted as `null_key`/`null_value`), as Kafka
        Streams skips them. A result carries the largest timestamp of the records counted so far.
        Repartitions first if the key changed upstream; the store is named after `store` (or
        generated) and can be queried.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "str")
            >>> counts = clicks.group_by_key().count(store="clicks-per-user")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("clicks", "str", "str").pipe_many([("ann", "/"), ("ann", "/a")])
            ...     d.get_store("clicks-per-user").get("ann")
            2
        """
        return self._aggregate("AGGREGATE", p.count_step, store, LONG, name, p.count_initial)

    def reduce(
        self, reducer: Callable[[Any, Any], Any], store: StoreLike = None, name: str | None = None
    ) -> TableT:
        """Combine the values of each key with `reducer(agg, value) -> agg`.

        The first value of a key is its initial aggregate (the reducer is not called for it). None
        keys and values are dropped, as in `count`; the result's value serde is the stream's.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> amounts = b.stream("amounts", "str", "long")
            >>> totals = amounts.group_by_key().reduce(lambda total, v: total + v)
            >>> totals.to_stream().to("totals")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("amounts", "str", "long").pipe_many([("ann", 5), ("ann", 7)])
            ...     d.output_topic("totals", "str", "long").read_key_values()
            [('ann', 5), ('ann', 12)]
        """
        return self._aggregate("REDUCE", p.reduce_step(reducer), store, self._value_serde, name)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> TableT:
        """Fold the values of each key: `aggregator(key, value, agg) -> agg`, from `initializer()`.

        `initializer()` is called for the first value of a key; None keys and values are dropped,
        as in `count`. Pass `value_serde` when the aggregate's type differs from the values'.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "str").group_by_key()
            >>> seen = clicks.aggregate(list, lambda k, v, pages: [*pages, v], value_serde="json")
            >>> seen.to_stream().to("pages")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("clicks", "str", "str").pipe_many([("ann", "/"), ("ann", "/a")])
            ...     d.output_topic("pages", "str", "json").read_values()
            [['/'], ['/', '/a']]
        """
        vs = None if value_serde is None else serde(value_serde)
        step = p.aggregate_step(initializer, aggregator)
        return self._aggregate("AGGREGATE", step, store, vs, name, initializer)

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupT:
        """Start a cogroup (KIP-150): this stream folded in with `aggregator(key, value, agg)`,
        other grouped streams added with `.cogroup(grouped, aggregator)`, all aggregated into
        one table with `.aggregate(initializer)` (or per window after `.windowed_by(...)`).

        See `kstream.dsl.cogroup`.

        Example:
            >>> from kstream.dsl import StreamBuilder
            >>> b = StreamBuilder()
            >>> g = b.stream("in").group_by_key()
            >>> g.cogroup(lambda k, v, n: n + 1).aggregate(int)
            KTable(COGROUPKSTREAM-MERGE-0000000003)
        """
        return self._cogrouped()(self, aggregator)

    @overload
    def windowed_by(self, windows: TimeWindows | SlidingWindows) -> TimeWinT: ...

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWinT: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWinT | SessionWinT:
        """A windowed view with the same aggregations, each key aggregated per window.

        `TimeWindows` (tumbling or hopping) and `SlidingWindows` give a `TimeWindowedKStream`,
        `SessionWindows` a `SessionWindowedKStream`. Results are tables keyed by
        `Windowed(key, start, end)`; records later than their window's end + grace (in stream time)
        are dropped and counted.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> from kstream.dsl.windows import TimeWindows
            >>> clicks = b.stream("clicks", "str", "str").group_by_key()
            >>> per_minute = clicks.windowed_by(TimeWindows.of("1m", grace="10s")).count()
            >>> per_minute.to_stream(lambda w, n: (w.key, w.start, w.end)).to("out", "json")
            >>> with TopologyTestDriver(b) as d:
            ...     src = d.input_topic("clicks", "str", "str")
            ...     src.pipe_many([("a", "/", 5), ("a", "/", 65_000)])
            ...     d.output_topic("out", "json", "long").read_key_values()
            [(['a', 0, 60000], 1), (['a', 60000, 120000], 1)]
        """
        return windowed_by(self, windows, self._time_windowed(), self._session_windowed())
