"""The processors of stream-table and table-table joins, and the getter of a joined table
(kstream.dsl.joins adds them to a topology; stream-stream joins: stream_stream_join)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, Change, NotLatest
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.versioned import as_of_getter
from kstream.records import Record
from kstream.topology.processor import ProcessorContext

Joiner = Callable[..., Any]  # (v, ov), or (key, v, ov) with a key (ValueJoinerWithKey)


class StreamTableJoinProcessor(BuiltinProcessor):
    """Looks each record up in a table (or, with `key_selector`, a global table).

    As Kafka's `KStreamKTableJoinProcessor`: a record with a None value is dropped, and so is
    one whose lookup key (its key, or `key_selector(k, v)`) is None, except that a left join
    forwards it as `joiner(v, None)` (KIP-962; for a global table, whatever the record's own
    key, as Kafka 4.x does). The result keeps the stream record's timestamp.
    """

    def __init__(
        self,
        getter: ValueGetter,
        joiner: Joiner,
        left: bool,
        key_selector: Callable[[Any, Any], Any] | None,
        with_key: bool = False,
    ) -> None:
        self.getter = getter
        self.joiner = joiner
        self.with_key = with_key  # joiner(key, v, tv): Kafka's ValueJoinerWithKey
        self.left = left
        self.key_selector = key_selector

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.get = self.getter.bind(ctx)
        # a versioned table is read as of each stream record's timestamp (KIP-914)
        self.get_as_of = as_of_getter(self.getter, ctx)

    def process_batch(self, records: Sequence[Record]) -> None:
        get, joiner, left, select = self.get, self.joiner, self.left, self.key_selector
        with_key, as_of = self.with_key, self.get_as_of
        on_error, dropped = self.ctx.on_error, self.ctx.record_dropped
        out = []
        for r in records:
            k, v = r.key, r.value
            if v is None:
                dropped("null_value", r)
                continue
            try:
                lookup = k if select is None else select(k, v)
                if lookup is None and not left:
                    dropped("null_key", r)
                    continue
                if lookup is None:
                    tv = None
                elif as_of is None:
                    tv = get(lookup)
                else:
                    tv = as_of(lookup, r.timestamp)
                if tv is None and not left:
                    continue
                # the key a ValueJoinerWithKey sees is the stream record's (Kafka's too)
                joined = joiner(k, v, tv) if with_key else joiner(v, tv)
            except Exception as e:
                on_error(e, r)
                continue
            out.append(r.with_value(joined))
        self.ctx.forward_batch(out)


class _PassThrough(BuiltinProcessor):
    def process_batch(self, records: Sequence[Record]) -> None:
        self.ctx.forward_batch(list(records))


class TableTableJoinProcessor(BuiltinProcessor):
    """One side of a table-table join: its `Change`s against the other side's current value.

    Follows Kafka's KTableKTable{Inner,Left,Right,Outer}Join: `is_left` False is the other
    table's side, which calls the joiner with its arguments the other way round. A result
    carries the larger of the update's timestamp and the timestamp of the other side's
    current value (the update's own timestamp when the other side has none), deletes
    included. Kafka reads that timestamp from the other table's timestamped store; here both
    sides record the timestamp of their latest value per key in a small store of the join
    (`[left_ts, right_ts]`, -1 for none), so derived tables need no timestamps of their own.
    """

    def __init__(
        self, other: ValueGetter, joiner: Joiner, kind: str, is_left: bool, ts_store: str
    ) -> None:
        self.getter = other
        self.joiner = joiner
        self.kind = kind
        self.is_left = is_left
        self.ts_store_name = ts_store

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.get = self.getter.bind(ctx)
        self.timestamps = ctx.get_store(self.ts_store_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        get, on_error = self.get, self.ctx.on_error
        step, stamps = self._step, self.timestamps
        mine, theirs = (0, 1) if self.is_left else (1, 0)
        out = []
        for r in records:
            k = r.key
            if k is None:
                self.ctx.record_dropped("null_key", r)
                continue
            if type(r.value) is NotLatest:
                # an out-of-order update of a versioned table: the latest value, which the
                # join follows, did not change (KIP-914)
                self.ctx.record_dropped("late_record", r)
                continue
            try:
                ov = get(k)
                ch = step(r.value, ov)
                known = stamps.get(k)
                pair = [-1, -1] if known is None else list(known)
                ts = r.timestamp
                if ch is not None and ov is not None and pair[theirs] > ts:
                    ts = pair[theirs]
                pair[mine] = -1 if r.value[0] is None else r.timestamp
                if pair == [-1, -1]:
                    if known is not None:
                        stamps.delete(k)
                else:
                    stamps.put(k, pair)
            except Exception as e:
                on_error(e, r)
                continue
            if ch is not None:
                joined = r.with_value(ch)
                out.append(joined if ts == r.timestamp else joined.with_timestamp(ts))
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
