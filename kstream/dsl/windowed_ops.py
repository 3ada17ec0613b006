"""Windowed streams: `KGroupedStream.windowed_by(windows)` and their count/reduce/aggregate.

The operators are here (`TimeWindowedOps`, `SessionWindowedOps`), generic in the table class
they make; the classes users name, `TimeWindowedKStream` and `SessionWindowedKStream`, bind it
to `KTable` in `kstream.dsl.api` (and are importable from `kstream.dsl.windowed` as before).

Results are tables keyed by `Windowed(key, start, end)`, materialized in a window store (time
and sliding windows) or a session store, so they can be queried. They follow Kafka Streams
record for record: keys, values, result timestamps (the largest record timestamp of the
window) and the order of updates. How windows close, what is late and how `emit="final"` also
closes windows on the wall clock is described in `kstream.dsl.processors.windowed`.

The window store of a time or sliding aggregation keeps each window's largest record
timestamp next to its aggregate (`kstream.state.window.TimestampedSerde`); queries of the
store still return bare aggregates.

The result tables' key serde writes Kafka's windowed formats (`time_windowed_serde`,
`session_windowed_serde`), so Java consumers read them with `WindowedSerdes`.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from kstream.dsl import processors as p
from kstream.dsl.graph import InternalBuilder, StoreLike, processor_factory
from kstream.dsl.handles import GroupedHandle, TableT
from kstream.dsl.processors.getter import WindowedValueGetter
from kstream.dsl.processors.windowed import (
    SessionWindowAggregateProcessor,
    SlidingWindowAggregateProcessor,
    TimeWindowAggregateProcessor,
    stream_time_store,
)
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError, TopologyError
from kstream.records import Windowed
from kstream.serde import BUILTIN, Serde, SerdeLike, null_safe_serde, serde
from kstream.state.window import TimestampedSerde

if TYPE_CHECKING:
    from kstream.state.spec import StoreSpec

LONG = serde("long")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")

__all__ = [
    "SessionWindowedOps",
    "TimeWindowedOps",
    "session_windowed_serde",
    "time_windowed_serde",
    "windowed_by",
]

#: the classes a grouped stream's `windowed_by` makes (`kstream.dsl.api` binds them)
TimeWinT = TypeVar("TimeWinT", bound="TimeWindowedOps[Any]")
SessionWinT = TypeVar("SessionWinT", bound="SessionWindowedOps[Any]")


@overload
def windowed_by(
    grouped: GroupedHandle[Any],
    windows: TimeWindows | SlidingWindows,
    time_windowed: type[TimeWinT],
    session_windowed: type[SessionWinT],
) -> TimeWinT: ...


@overload
def windowed_by(
    grouped: GroupedHandle[Any],
    windows: SessionWindows,
    time_windowed: type[TimeWinT],
    session_windowed: type[SessionWinT],
) -> SessionWinT: ...


def windowed_by(
    grouped: GroupedHandle[Any],
    windows: TimeWindows | SlidingWindows | SessionWindows,
    time_windowed: type[TimeWinT],
    session_windowed: type[SessionWinT],
) -> TimeWinT | SessionWinT:
    """What `KGroupedStream.windowed_by` returns: the windowed stream for `windows`' kind, of
    the class the grouped stream makes for it (`time_windowed` or `session_windowed`)."""
    if isinstance(windows, TimeWindows | SlidingWindows):
        return time_windowed(grouped, windows)
    if isinstance(windows, SessionWindows):
        return session_windowed(grouped, windows)
    raise TopologyError(
        "windowed_by expects TimeWindows, SlidingWindows or SessionWindows, "
        f"got {type(windows).__name__}: {windows!r}"
    )


# --- serdes ----------------------------------------------------------------------------------


def time_windowed_serde(inner: SerdeLike, window_size: DurationLike) -> Serde:
    """Kafka's time-windowed key format: inner key bytes + 8-byte start (end = start + size)."""
    ks = serde(inner)
    size = duration(window_size, name="window_size")
    kser, kde, pack, unpack_from = ks.to_bytes, ks.from_bytes, _Q.pack, _Q.unpack_from
    kc = ks.c_to_bytes  # the inner serde's C function, the full one when it raises (see Serde)

    def ser(w: Windowed | None) -> bytes | None:
        if w is None:
            return None
        k = w.key
        if k is not None and kc is not None:
            try:
                return kc(k) + pack(w.start)
            except Exception:
                pass
        return (kser(k) or b"") + pack(w.start)

    def de(b: bytes | None) -> Windowed | None:
        if b is None:
            return None
        start = unpack_from(b, len(b) - 8)[0]
        return Windowed(kde(bytes(b[:-8])), start, start + size)

    return null_safe_serde(ser, de, f"time_windowed({ks.name})")


def session_windowed_serde(inner: SerdeLike) -> Serde:
    """Kafka's session-windowed key format: inner key bytes + 8-byte end + 8-byte start."""
    ks = serde(inner)
    kser, kde, pack, unpack_from = ks.to_bytes, ks.from_bytes, _QQ.pack, _QQ.unpack_from

    def ser(w: Windowed | None) -> bytes | None:
        if w is None:
            return None
        kb = kser(w.key)
        return (kb or b"") + pack(w.end, w.start)

    def de(b: bytes | None) -> Windowed | None:
        if b is None:
            return None
        end, start = unpack_from(b, len(b) - 16)
        return Windowed(kde(bytes(b[:-16])), start, end)

    return null_safe_serde(ser, de, f"session_windowed({ks.name})")


# --- reading a windowed table from another processor -----------------------------------------


# --- the windowed streams --------------------------------------------------------------------

_EMITS = ("update", "final")


def _check_emit(emit: str) -> bool:
    if emit not in _EMITS:
        raise ConfigError(f'emit must be "update" or "final", got {emit!r}')
    return emit == "final"


def _idle_close(idle_close: DurationLike | None) -> int | None:
    if idle_close is None:
        return None
    ms = duration(idle_close, name="idle_close")
    if ms <= 0:
        raise ConfigError(
            f"idle_close must be > 0 (or None to close on stream time only), got {ms}"
        )
    return ms


def _opt_serde(s: SerdeLike) -> Serde | None:
    return None if s is None else serde(s)


def _sum_merger(_k: Any, a: Any, b: Any) -> Any:
    return a + b


def _zero() -> int:
    return 0


def _plus_one(_k: Any, _v: Any, n: int) -> int:
    return n + 1


def _none() -> None:
    return None


def _timestamped(spec: StoreSpec) -> StoreSpec:
    """`spec` with a value serde that keeps each window's largest record timestamp."""
    vs = spec.value_serde
    if isinstance(vs, TimestampedSerde):
        return spec
    inner = BUILTIN["auto"] if vs is None else serde(vs)
    return dataclasses.replace(spec, value_serde=TimestampedSerde(inner))


class _Windowed(Generic[TableT]):
    def __init__(
        self, grouped: GroupedHandle[TableT], windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> None:
        self._grouped = grouped
        self._windows = windows

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._grouped._node}, {self._windows!r})"

    def _source(self, base: str) -> str:
        return self._grouped._source(base)


class TimeWindowedOps(_Windowed[TableT]):
    """`TimeWindowedKStream`'s operators: a grouped stream over time windows (tumbling,
    hopping) or sliding windows, aggregated into tables of the class `TableT`."""

    _windows: TimeWindows | SlidingWindows

    def count(
        self,
        store: StoreLike = None,
        emit: str = "update",
        name: str | None = None,
        idle_close: DurationLike | None = "1s",
    ) -> TableT:
        """Count the records per key and window: a table keyed by `Windowed(key, start, end)`.

        `emit="update"` forwards every change of a window's aggregate; `emit="final"` forwards each
        window once, when stream time passes its end + grace; it also closes windows on the wall
        clock, one to two `idle_close` after the input goes quiet (None: stream time only).

        A result carries the largest record timestamp of its window. Records with a None key or
        value, and records too late for every window, are dropped and counted.

        Example:
            >>> from kstream.dsl.windows import TimeWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "str").group_by_key()
            >>> counts = clicks.windowed_by(TimeWindows.of("1m")).count(emit="final")
            >>> counts.to_stream(lambda w, n: f"{w.key}@{w.start}").to("out", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     src = d.input_topic("clicks", "str", "str")
            ...     src.pipe_many([("a", "/", 0), ("a", "/", 30_000)])
            ...     src.pipe("a", "/", 60_000)  # stream time reaches the end of [0, 1m)
            ...     d.output_topic("out", "str", "long").read_key_values()
            [('a@0', 2)]
        """
        return self._build("COUNT", p.count_step, store, LONG, emit, name, idle_close)

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        store: StoreLike = None,
        emit: str = "update",
        name: str | None = None,
        idle_close: DurationLike | None = "1s",
    ) -> TableT:
        """Combine each key's values per window with `reducer(agg, value)`.

        A window's first value is its initial aggregate.

        `emit="update"` forwards every change of a window's aggregate; `emit="final"` forwards each
        window once, when stream time passes its end + grace; it also closes windows on the wall
        clock, one to two `idle_close` after the input goes quiet (None: stream time only).

        Example:
            >>> from kstream.dsl.windows import TimeWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> amounts = b.stream("amounts", "str", "long").group_by_key()
            >>> hourly = amounts.windowed_by(TimeWindows.of("1h")).reduce(lambda a, v: a + v)
            >>> hourly.to_stream(lambda w, n: f"{w.key}@{w.start}").to("out", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("amounts", "str", "long").pipe_many([("a", 5, 0), ("a", 7, 10)])
            ...     d.output_topic("out", "str", "long").read_key_values()
            [('a@0', 5), ('a@0', 12)]
        """
        vs = self._grouped._value_serde
        return self._build("REDUCE", p.reduce_step(reducer), store, vs, emit, name, idle_close)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        emit: str = "update",
        name: str | None = None,
        idle_close: DurationLike | None = "1s",
    ) -> TableT:
        """Fold each key's values per window: `aggregator(key, value, agg)` from `initializer()`.

        `emit="update"` forwards every change of a window's aggregate; `emit="final"` forwards each
        window once, when stream time passes its end + grace; it also closes windows on the wall
        clock, one to two `idle_close` after the input goes quiet (None: stream time only).

        Example:
            >>> from kstream.dsl.windows import SlidingWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> temps = b.stream("temps", "str", "long").group_by_key()
            >>> w = temps.windowed_by(SlidingWindows.of(10))
            >>> maxima = w.aggregate(lambda: 0, lambda k, v, m: max(m, v), value_serde="long")
            >>> maxima.to_stream(lambda w, m: f"{w.start}..{w.end}").to("out", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("temps", "str", "long").pipe_many([("k", 3, 20), ("k", 5, 25)])
            ...     d.output_topic("out", "str", "long").read_key_values()
            [('10..20', 3), ('21..31', 5), ('15..25', 5)]
        """
        step = p.aggregate_step(initializer, aggregator)
        vs = _opt_serde(value_serde)
        return self._build("AGGREGATE", step, store, vs, emit, name, idle_close)

    def _build(
        self,
        op: str,
        step: Callable[[Any, Any, Any], Any],
        store: StoreLike,
        value_serde: Serde | None,
        emit: str,
        name: str | None,
        idle_close: DurationLike | None,
    ) -> TableT:
        final = _check_emit(emit)
        idle = _idle_close(idle_close)
        g = self._grouped
        b = g._builder
        w = self._windows
        sliding = isinstance(w, SlidingWindows)
        size = w.max_difference_ms if isinstance(w, SlidingWindows) else w.size_ms
        # a new sliding window may start from the aggregate of one up to 2 * size before it
        retention = (2 * size + 1 if sliding else size) + w.grace_ms
        # Kafka's processor names: KSTREAM-AGGREGATE (count, aggregate) or KSTREAM-REDUCE
        node = b.name(_kafka_op(op), name)
        spec = b.store_spec(
            store,
            f"{'SLIDING' if sliding else 'TIME'}-WINDOW-{op}",
            kind="window",
            key_serde=g._key_serde,
            value_serde=value_serde,
            retention=retention,
            window_size=size,
        )
        check_window_store(spec, size, retention)
        parent = self._source(spec.name)
        if isinstance(w, SlidingWindows):
            factory = processor_factory(
                SlidingWindowAggregateProcessor, spec.name, step, w, final, idle
            )
        else:
            factory = processor_factory(
                TimeWindowAggregateProcessor, spec.name, step, w, final, idle
            )
        b.processor(node, factory, parent)
        b.add_store(_timestamped(spec), [node])
        _add_stream_time_store(b, spec.name, node)
        ks = time_windowed_serde(g._key_serde, size)
        getter = WindowedValueGetter(spec.name, session=False)
        return self._grouped._tables()(b, node, ks, value_serde, getter)


class SessionWindowedOps(_Windowed[TableT]):
    """`SessionWindowedKStream`'s operators: a grouped stream over session windows,
    aggregated into tables of the class `TableT`."""

    _windows: SessionWindows

    def count(
        self,
        store: StoreLike = None,
        emit: str = "update",
        name: str | None = None,
        idle_close: DurationLike | None = "1s",
    ) -> TableT:
        """Count the records per key and session (records at most `gap` apart share a session).

        `emit="update"` forwards every change of a window's aggregate; `emit="final"` forwards each
        window once, when stream time passes its end + grace; it also closes windows on the wall
        clock, one to two `idle_close` after the input goes quiet (None: stream time only).

        When a record merges sessions, a delete is forwarded for every merged session, then the new
        session's count, as in Kafka Streams. A session's result timestamp is its end.

        Example:
            >>> from kstream.dsl.windows import SessionWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> clicks = b.stream("clicks", "str", "str").group_by_key()
            >>> visits = clicks.windowed_by(SessionWindows.with_gap(10)).count()
            >>> visits.to_stream(lambda w, n: f"{w.start}..{w.end}").to("out", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("clicks", "str", "str").pipe_many([("a", "/", 0), ("a", "/", 5)])
            ...     d.output_topic("out", "str", "long").read_key_values()
            [('0..0', 1), ('0..0', None), ('0..5', 2)]
        """
        return self._build(
            "COUNT", _zero, _plus_one, _sum_merger, store, LONG, emit, name, idle_close
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        store: StoreLike = None,
        emit: str = "update",
        name: str | None = None,
        idle_close: DurationLike | None = "1s",
    ) -> TableT:
        """Combine each key's values per session with `reducer(agg, value)`.

        When a record brings sessions together their aggregates combine as
        `reducer(older, newer)`.

        `emit="update"` forwards every change of a window's aggregate; `emit="final"` forwards each
        window once, when stream time passes its end + grace; it also closes windows on the wall
        clock, one to two `idle_close` after the input goes quiet (None: stream time only).

        Example:
            >>> from kstream.dsl.windows import SessionWindows
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> words = b.stream("words", "str", "str").group_by_key()
            >>> sessions = words.windowed_by(SessionWindows.with_gap(10))
            >>> phrases = sessions.reduce(lambda a, w: f"{a} {w}")
            >>> phrases.to_stream(lambda w, p: w.start).to("out", "long", "str")
            >>> with TopologyTestDriver(b) as d:
            ...     src = d.input_topic("words", "str", "str")
            ...     src.pipe_many([("a", "hi", 0), ("a", "there", 5), ("a", "bye", 50)])
            ...     d.output_topic("out", "long", "str").read_values()
            ['hi', None, 'hi there', 'bye']
        """

        def merger(_k: Any, a: Any, b: Any) -> Any:
            return b if a is None else reducer(a, b)

        vs = self._grouped._value_serde
        return self._build(
            "REDUCE", _none, p.reduce_step(reducer), merger, store, vs, emit, name, idle_close
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        store: StoreLike = None,
        value_serde: SerdeLike = None,
        emit: str = "update",
        name: str | None = None,
        idle_close: DurationLike | None = "1s",
    ) -> TableT:
        """`aggregator(key, value, agg)` per session; `merger(key, agg1, agg2)` joins the
        aggregates of sessions that a record brings together.

        As in Kafka Streams, a record's aggregate starts from `initializer()`, merges in each
        session it joins (older first, even when there is only one), then adds the record."""
        if not callable(merger):
            raise TopologyError("session aggregate needs merger(key, agg1, agg2)")
        vs = _opt_serde(value_serde)
        return self._build(
            "AGGREGATE", initializer, aggregator, merger, store, vs, emit, name, idle_close
        )

    def _build(
        self,
        op: str,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        store: StoreLike,
        value_serde: Serde | None,
        emit: str,
        name: str | None,
        idle_close: DurationLike | None,
    ) -> TableT:
        final = _check_emit(emit)
        idle = _idle_close(idle_close)
        g = self._grouped
        b = g._builder
        w = self._windows
        retention = w.gap_ms + w.grace_ms
        node = b.name(_kafka_op(op), name)
        spec = b.store_spec(
            store,
            f"SESSION-WINDOW-{op}",
            kind="session",
            key_serde=g._key_serde,
            value_serde=value_serde,
            retention=retention,
        )
        check_session_store(spec, retention)
        parent = self._source(spec.name)
        factory = processor_factory(
            SessionWindowAggregateProcessor,
            spec.name,
            initializer,
            aggregator,
            merger,
            w,
            final,
            idle,
        )
        b.processor(node, factory, parent)
        b.add_store(spec, [node])
        _add_stream_time_store(b, spec.name, node)
        ks = session_windowed_serde(g._key_serde)
        getter = WindowedValueGetter(spec.name, session=True)
        return self._grouped._tables()(b, node, ks, value_serde, getter)


def _kafka_op(op: str) -> str:
    """The operator part of Kafka's name for a windowed aggregation's processor (its store
    keeps kstream's own generated name, `KSTREAM-<TIME|SLIDING|SESSION>-WINDOW-<op>-...`)."""
    return "REDUCE" if op == "REDUCE" else "AGGREGATE"


def _add_stream_time_store(b: InternalBuilder, store: str, node: str) -> None:
    """Give the processor `node` the store where it keeps its stream time (see the processors)."""
    spec = b.store_spec(stream_time_store(store), "WINDOW-STREAM-TIME", kind="key_value")
    b.add_store(spec, [node], described=False)


def check_window_store(spec: StoreSpec, size: int, retention: int) -> None:
    """Refuse a user-given window store that cannot hold these windows (a windowed
    aggregation's or a windowed cogroup's)."""
    if spec.window_size != size or (spec.retention or 0) < retention:
        raise TopologyError(
            f"store {spec.name!r}: a window store for these windows needs window_size={size} "
            f"and retention >= {retention}, got "
            f"window_size={spec.window_size}, retention={spec.retention}"
        )


def check_session_store(spec: StoreSpec, retention: int) -> None:
    """Refuse a user-given session store that forgets sessions before they close."""
    if (spec.retention or 0) < retention:
        raise TopologyError(
            f"store {spec.name!r}: a session store for these windows needs retention >= "
            f"{retention} (gap + grace), got {spec.retention}"
        )
