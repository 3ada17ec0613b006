"""Joins: stream-stream (windowed), stream-table, stream-global-table and table-table.

`KStream.join/left_join/outer_join` and the `KTable` join methods delegate here
(`join_stream`, `join_tables`). Semantics follow Kafka Streams 3.x:

- Stream-stream: each side is buffered in a window store (retention before + after + grace,
  duplicates kept). A left record at `t` joins every right record of its key with a timestamp in
  `[t - before, t + after]` (and symmetrically for right records); a result carries the larger
  of the two timestamps. A record whose window closed already (stream time > t + after + grace
  for a left record, t + before + grace for a right one) is late and dropped. Left/outer joins
  hold records that found no partner in a shared "outer" store and emit `joiner(v, None)` /
  `joiner(None, v)` only once their window has closed, so a record that finds a partner later
  never produces a spurious non-joined result first (Kafka 3.1+). Stream time here is the
  largest timestamp the join has seen (Kafka's shared time tracker of the two join sides).
- Stream-table: a stream record looks up the table's current value; table updates alone emit
  nothing. Inner drops records without a match, left emits `joiner(v, None)`.
- Stream-global-table: as stream-table, looked up by `key_selector(k, v)` in the global store,
  with no repartition (every instance holds the whole table).
- Table-table: both sides are materialized; an update on either side emits
  `Change(new result, old result)`, computed against the other side's current value; deletes
  propagate as deletes.

Records with a None key or None value are dropped by stream joins (as Kafka does before 3.7);
for global-table joins it is a None *selected* key that drops the record.

A stream-stream join is one processor fed by two thin "side" processors that tag each record
with its side: a single processor owns both window stores and the outer store, so the stream
time it uses is exactly the one both sides share in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.graph import AUTO, ValueGetter, processor_factory
from kstream.dsl.processors import BuiltinProcessor, Change
from kstream.dsl.stream import KStream
from kstream.dsl.table import GlobalKTable, KTable
from kstream.dsl.windows import JoinWindows
from kstream.errors import SerdeError, TopologyError
from kstream.records import Record
from kstream.serde import Serde
from kstream.state.keys import TS_MIN, ts8, unts8
from kstream.topology.processor import ProcessorContext

KINDS = ("inner", "left", "outer")
_OPS = {"inner": "JOIN", "left": "LEFTJOIN", "outer": "OUTERJOIN"}

Joiner = Callable[[Any, Any], Any]


def _check_common(kind: str, joiner: Any, what: str) -> None:
    if kind not in KINDS:
        raise TopologyError(f"{what}: join kind must be one of {KINDS}, got {kind!r}")
    if not callable(joiner):
        raise TopologyError(f"{what}: joiner must be a function (v1, v2) -> value, got {joiner!r}")


# --- entry points (the hooks of graph.py) -------------------------------------------------------


def join_stream(
    left: KStream,
    other: Any,
    joiner: Any,
    *,
    kind: str,
    window: Any,
    key_selector: Any,
    name: str | None,
) -> KStream:
    """Join a stream with a stream (windowed), a table or a global table."""
    what = f"KStream.{'join' if kind == 'inner' else kind + '_join'}"
    _check_common(kind, joiner, what)
    if isinstance(other, GlobalKTable):
        return _stream_global(left, other, joiner, kind, window, key_selector, name, what)
    if key_selector is not None:
        raise TopologyError(f"{what}: key_selector is only for joins with a GlobalKTable")
    if isinstance(other, KTable):
        return _stream_table(left, other, joiner, kind, window, name, what)
    if isinstance(other, KStream):
        return _stream_stream(left, other, joiner, kind, window, name, what)
    raise TopologyError(
        f"{what}: can join a KStream, a KTable or a GlobalKTable, got {type(other).__name__}"
    )


def join_tables(left: KTable, other: KTable, joiner: Any, *, kind: str, name: str | None) -> KTable:
    """Join two tables on their keys; the result is a table of `Change`s like any other."""
    what = f"KTable.{'join' if kind == 'inner' else kind + '_join'}"
    _check_common(kind, joiner, what)
    if not isinstance(other, KTable):
        raise TopologyError(f"{what}: can join a KTable, got {type(other).__name__}")
    b = left._builder
    if other._builder is not b:
        raise TopologyError(f"{what}: both tables must come from the same StreamBuilder")
    this_node = b.name("JOINTHIS", None if name is None else f"{name}-join-this", "KTABLE")
    other_node = b.name("JOINOTHER", None if name is None else f"{name}-join-other", "KTABLE")
    merge = b.name("MERGE", name, "KTABLE")
    b.processor(
        this_node,
        processor_factory(TableTableJoinProcessor, other._getter, joiner, kind, True),
        left._node,
    )
    b.processor(
        other_node,
        processor_factory(TableTableJoinProcessor, left._getter, joiner, kind, False),
        other._node,
    )
    for s in other._getter.stores:
        b.connect(this_node, s)
    for s in left._getter.stores:
        b.connect(other_node, s)
    b.processor(merge, _PassThrough, [this_node, other_node])
    getter = JoinedValueGetter(left._getter, other._getter, joiner, kind)
    return KTable(b, merge, left._key_serde, None, getter)


# --- stream-table and stream-global-table ----------------------------------------------------


def _stream_table(
    left: KStream,
    table: KTable,
    joiner: Joiner,
    kind: str,
    window: Any,
    name: str | None,
    what: str,
) -> KStream:
    if kind == "outer":
        raise TopologyError(f"{what}: a stream-table join is inner or left, not outer")
    if window is not None:
        raise TopologyError(f"{what}: a stream-table join takes no window")
    b = left._builder
    if table._builder is not b:
        raise TopologyError(f"{what}: the stream and the table must come from one StreamBuilder")
    node = b.name(_OPS[kind], name)
    if left._repartition_required and left._key_serde is None:
        # Co-partitioning is by key bytes: repartition with the table's key serde, or the
        # stream's records land in other partitions than the table's keys.
        left = KStream(b, left._node, table._key_serde, left._value_serde, True)
    parent = left._ensure_partitioned(node)
    factory = processor_factory(
        StreamTableJoinProcessor, table._getter, joiner, kind == "left", None
    )
    b.processor(node, factory, parent)
    for s in table._getter.stores:
        b.connect(node, s)
    return KStream(b, node, left._key_serde, None, False)


def _stream_global(
    left: KStream,
    table: GlobalKTable,
    joiner: Joiner,
    kind: str,
    window: Any,
    key_selector: Any,
    name: str | None,
    what: str,
) -> KStream:
    if kind == "outer":
        raise TopologyError(f"{what}: a stream-global-table join is inner or left, not outer")
    if window is not None:
        raise TopologyError(f"{what}: a stream-global-table join takes no window")
    if not callable(key_selector):
        raise TopologyError(
            f"{what}: a join with a GlobalKTable needs key_selector(k, v) -> table key, "
            f"as in join(global_table, key_selector, joiner); got {key_selector!r}"
        )
    b = left._builder
    if table.store_name not in b.topology.global_stores:
        raise TopologyError(
            f"{what}: global table {table.store_name!r} is not part of this StreamBuilder"
        )
    node = b.name(_OPS[kind], name)
    factory = processor_factory(
        StreamTableJoinProcessor, table._getter, joiner, kind == "left", key_selector
    )
    b.processor(node, factory, left._node)
    return KStream(b, node, left._key_serde, None, left._repartition_required)


class StreamTableJoinProcessor(BuiltinProcessor):
    """Looks each record up in a table (or, with `key_selector`, a global table)."""

    def __init__(
        self,
        getter: ValueGetter,
        joiner: Joiner,
        left: bool,
        key_selector: Callable[[Any, Any], Any] | None,
    ) -> None:
        self.getter = getter
        self.joiner = joiner
        self.left = left
        self.key_selector = key_selector

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.get = self.getter.bind(ctx)

    def process_batch(self, records: Sequence[Record]) -> None:
        get, joiner, left, select = self.get, self.joiner, self.left, self.key_selector
        on_error = self.ctx.on_error
        out = []
        for r in records:
            v = r.value
            if v is None:
                continue
            try:
                k = r.key if select is None else select(r.key, v)
                if k is None:
                    continue
                tv = get(k)
                if tv is None and not left:
                    continue
                joined = joiner(v, tv)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(r.with_value(joined))
        self.ctx.forward_batch(out)


# --- stream-stream --------------------------------------------------------------------------


def _stream_stream(
    left: KStream,
    right: KStream,
    joiner: Joiner,
    kind: str,
    window: Any,
    name: str | None,
    what: str,
) -> KStream:
    if not isinstance(window, JoinWindows):
        raise TopologyError(
            f"{what}: a stream-stream join needs window=JoinWindows.of(...), got {window!r}"
        )
    if window.before_ms + window.after_ms < 0:
        raise TopologyError(f"{what}: JoinWindows before + after must be >= 0, got {window}")
    if window.grace_ms < 0:
        raise TopologyError(f"{what}: JoinWindows grace must be >= 0, got {window}")
    b = left._builder
    if right._builder is not b:
        raise TopologyError(f"{what}: both streams must come from the same StreamBuilder")
    from kstream import stores

    this_node = b.name("JOINTHIS", None if name is None else f"{name}-this-join")
    other_node = b.name("JOINOTHER", None if name is None else f"{name}-other-join")
    join_node = b.name(_OPS[kind], name)
    left_parent = left._ensure_partitioned(f"{join_node}-left")
    right_parent = right._ensure_partitioned(f"{join_node}-right")

    size = window.before_ms + window.after_ms
    retention = max(size + window.grace_ms, 1)
    this_spec = stores.window(
        f"{this_node}-store", retention, size, retain_duplicates=True
    ).with_default_serdes(left._key_serde, left._value_serde)
    other_spec = stores.window(
        f"{other_node}-store", retention, size, retain_duplicates=True
    ).with_default_serdes(right._key_serde, right._value_serde)
    outer_name = None
    store_specs = [this_spec, other_spec]
    if kind != "inner":
        outer_base = f"{name}-outer-shared-join" if name else b.name("OUTERSHARED")
        outer_spec = stores.key_value(
            f"{outer_base}-store", key_serde=OuterKeySerde(left._key_serde or AUTO)
        ).with_default_serdes(None, AUTO)
        outer_name = outer_spec.name
        store_specs.append(outer_spec)

    b.processor(this_node, processor_factory(_SideTagger, True), left_parent)
    b.processor(other_node, processor_factory(_SideTagger, False), right_parent)
    factory = processor_factory(
        StreamStreamJoinProcessor,
        this_spec.name,
        other_spec.name,
        outer_name,
        joiner,
        window,
        kind,
    )
    b.processor(join_node, factory, [this_node, other_node])
    for spec in store_specs:
        b.add_store(spec, [join_node])
    return KStream(b, join_node, left._key_serde, None, False)


class _SideTagger(BuiltinProcessor):
    """Marks each record with its side of the join; drops what can never join."""

    def __init__(self, is_left: bool) -> None:
        self.is_left = is_left

    def process_batch(self, records: Sequence[Record]) -> None:
        side = self.is_left
        self.ctx.forward_batch(
            [
                r.with_value((side, r.value))
                for r in records
                if r.key is not None and r.value is not None
            ]
        )


class OuterKeySerde(Serde):
    """Keys `(timestamp, is_left, key)` of the outer store, in timestamp order on disk.

    Laid out as Kafka's `TimestampedKeyAndJoinSide`: 8-byte timestamp, a side byte (1 = left),
    then the key, so scanning the store visits the oldest pending records first.
    """

    def __init__(self, key_serde: Serde) -> None:
        inner = key_serde

        def ser(k: tuple[int, bool, Any]) -> bytes:
            kb = inner.to_bytes(k[2])
            if kb is None:
                raise SerdeError("outer join store: key must not be None")
            return ts8(k[0]) + (b"\x01" if k[1] else b"\x00") + kb

        def de(data: bytes) -> tuple[int, bool, Any]:
            return unts8(data), data[8] == 1, inner.from_bytes(bytes(data[9:]))

        super().__init__(ser, de, f"outer-join-key({inner.name})")


class StreamStreamJoinProcessor(BuiltinProcessor):
    """Both sides of a windowed stream-stream join (records arrive tagged `(is_left, value)`)."""

    def __init__(
        self,
        this_store: str,
        other_store: str,
        outer_store: str | None,
        joiner: Joiner,
        window: JoinWindows,
        kind: str,
    ) -> None:
        self.names = (this_store, other_store, outer_store)
        self.joiner = joiner
        self.before = window.before_ms
        self.after = window.after_ms
        self.grace = window.grace_ms
        self.left_outer = kind in ("left", "outer")
        self.right_outer = kind == "outer"

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        this_name, other_name, outer_name = self.names
        self.this = ctx.get_store(this_name)
        self.other = ctx.get_store(other_name)
        self.outer = None if outer_name is None else ctx.get_store(outer_name)
        # After a restart the stores remember the newest timestamps they saw.
        self.stream_time = max(
            getattr(self.this, "observed", TS_MIN), getattr(self.other, "observed", TS_MIN)
        )
        # Oldest timestamp possibly pending in the outer store (None: the store is empty).
        self.min_pending: int | None = TS_MIN

    def process_batch(self, records: Sequence[Record]) -> None:
        out: list[Record] = []
        task, on_error = self.task, self.ctx.on_error
        for r in records:
            is_left, v = r.value
            ts = r.timestamp
            if ts > self.stream_time:
                self.stream_time = ts
            if ts + (self.after if is_left else self.before) + self.grace < self.stream_time:
                continue  # its window has closed: a late record
            if task is not None:
                task.current = r
            try:
                if self.outer is not None and ts == self.stream_time:
                    self._emit_closed(r, out)
                out.extend(self._join(r, is_left, v, ts))
            except Exception as e:
                on_error(e, r)
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)

    def _join(self, r: Record, is_left: bool, v: Any, ts: int) -> list[Record]:
        k, joiner = r.key, self.joiner
        if is_left:
            mine, theirs, lo, hi = self.this, self.other, ts - self.before, ts + self.after
        else:
            mine, theirs, lo, hi = self.other, self.this, ts - self.after, ts + self.before
        mine.put(k, v, ts)
        with theirs.fetch(k, lo, hi) as cur:
            matches = list(cur)
        results = []
        for t2, v2 in matches:
            joined = joiner(v, v2) if is_left else joiner(v2, v)
            results.append(
                Record(k, joined, max(ts, t2), r.headers, r.topic, r.partition, r.offset)
            )
        outer = self.outer
        if outer is not None:
            if matches and (self.right_outer if is_left else self.left_outer):
                for t2 in sorted({t for t, _ in matches}):
                    outer.delete((t2, not is_left, k))
            if not matches and (self.left_outer if is_left else self.right_outer):
                key = (ts, is_left, k)
                outer.put(key, [*(outer.get(key) or ()), v])
                if self.min_pending is None or ts < self.min_pending:
                    self.min_pending = ts
        return results

    def _emit_closed(self, r: Record, out: list[Record]) -> None:
        """Emit the non-joined records whose windows have closed, oldest first."""
        st, grace = self.stream_time, self.grace
        least = min(self.before, self.after)
        if self.min_pending is None or self.min_pending + least + grace >= st:
            return
        outer, joiner = self.outer, self.joiner
        assert outer is not None
        done = []
        pending_min: int | None = None
        with outer.all() as cur:
            for key, values in cur:
                ts, is_left, k = key
                if ts + least + grace >= st:
                    pending_min = ts if pending_min is None else min(pending_min, ts)
                    break  # nothing later can have closed either
                if ts + (self.after if is_left else self.before) + grace >= st:
                    pending_min = ts if pending_min is None else min(pending_min, ts)
                    continue
                done.append(key)
                for v in values:
                    joined = joiner(v, None) if is_left else joiner(None, v)
                    out.append(Record(k, joined, ts, r.headers, r.topic, r.partition, r.offset))
        for key in done:
            outer.delete(key)
        self.min_pending = pending_min


# --- table-table ----------------------------------------------------------------------------


class _PassThrough(BuiltinProcessor):
    def process_batch(self, records: Sequence[Record]) -> None:
        self.ctx.forward_batch(list(records))


class TableTableJoinProcessor(BuiltinProcessor):
    """One side of a table-table join: its `Change`s against the other side's current value.

    Follows Kafka's KTableKTable{Inner,Left,Right,Outer}Join: `is_left` False is the other
    table's side, which calls the joiner with its arguments the other way round.
    """

    def __init__(self, other: ValueGetter, joiner: Joiner, kind: str, is_left: bool) -> None:
        self.getter = other
        self.joiner = joiner
        self.kind = kind
        self.is_left = is_left

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.get = self.getter.bind(ctx)

    def process_batch(self, records: Sequence[Record]) -> None:
        get, on_error = self.get, self.ctx.on_error
        step = self._step
        out = []
        for r in records:
            k = r.key
            if k is None:
                continue
            try:
                ch = step(r.value, get(k))
            except Exception as e:
                on_error(e, r)
                continue
            if ch is not None:
                out.append(r.with_value(ch))
        self.ctx.forward_batch(out)

    def _step(self, change: Change, ov: Any) -> Change | None:
        new, old = change
        kind, j = self.kind, self.joiner
        if self.is_left:

            def join(mine: Any) -> Any:
                return j(mine, ov)
        else:

            def join(mine: Any) -> Any:
                return j(ov, mine)

        if kind == "inner":
            if ov is None:
                return None
            return Change(None if new is None else join(new), None if old is None else join(old))
        if kind == "outer":
            if ov is None and new is None and old is None:
                return None
            return Change(
                None if (new is None and ov is None) else join(new),
                None if (old is None and ov is None) else join(old),
            )
        if self.is_left:  # the left side of a left join: a result whenever it has a value
            if ov is None and new is None and old is None:
                return None
            return Change(None if new is None else join(new), None if old is None else join(old))
        # The right side of a left join: only matters while the left side has a value.
        if ov is None:
            return None
        return Change(join(new), join(old))


class JoinedValueGetter(ValueGetter):
    """Reads a joined table's value for a key from both sides' current values."""

    def __init__(
        self,
        left: ValueGetter,
        right: ValueGetter,
        joiner: Joiner,
        kind: str,
        transforms: tuple[Callable[[Any, Any], Any], ...] = (),
    ) -> None:
        super().__init__(left.store, transforms)
        self.left = left
        self.right = right
        self.joiner = joiner
        self.kind = kind

    @property
    def stores(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.left.stores, *self.right.stores)))

    def then(self, fn: Callable[[Any, Any], Any]) -> ValueGetter:
        return JoinedValueGetter(
            self.left, self.right, self.joiner, self.kind, (*self.transforms, fn)
        )

    def bind(self, ctx: ProcessorContext) -> Callable[[Any], Any]:
        lget, rget = self.left.bind(ctx), self.right.bind(ctx)
        joiner, kind, fns = self.joiner, self.kind, self.transforms

        def value(key: Any) -> Any:
            lv, rv = lget(key), rget(key)
            if lv is None and (kind != "outer" or rv is None):
                return None
            if rv is None and kind == "inner":
                return None
            v = joiner(lv, rv)
            for fn in fns:
                if v is None:
                    return None
                v = fn(key, v)
            return v

        return value


__all__ = [
    "JoinedValueGetter",
    "OuterKeySerde",
    "StreamStreamJoinProcessor",
    "StreamTableJoinProcessor",
    "TableTableJoinProcessor",
    "join_stream",
    "join_tables",
]
