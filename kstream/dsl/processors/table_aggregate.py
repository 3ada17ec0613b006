"""The processors of a table re-grouped and aggregated (`KTable.group_by` then `count`,
`reduce` or `aggregate`; kstream.dsl.grouped_table tells how a row changes group): the
regroup, the aggregation with an adder and a subtractor, and the serde of the `Change`s
between them."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, Change, NotLatest
from kstream.dsl.processors.cache import cached_forwarding, timestamped_access
from kstream.errors import SerdeError
from kstream.records import Record
from kstream.serde import Serde
from kstream.topology.processor import ProcessorContext

Step = Callable[[Any, Any, Any], Any]
"""`step(key, value, agg) -> agg`: an adder (agg may be None: nothing yet) or a subtractor."""

_NONE = struct.pack(">i", -1)
_LEN = struct.Struct(">i")


class TableRegroupProcessor(BuiltinProcessor):
    """Maps each `Change` of the table to the group(s) it leaves and joins.

    As Kafka's KTableRepartitionMap: the old group's record goes first, and a selected pair
    that is None or has a None key or value is not forwarded (counted as dropped, `null_key`
    or `null_value`).
    """

    def __init__(self, selector: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.selector = selector

    def process_batch(self, records: Sequence[Record]) -> None:
        select, on_error = self.selector, self.ctx.on_error
        out = []
        for r in records:
            if type(r.value) is NotLatest:
                # an out-of-order update of a versioned table: the aggregate takes the latest
                # values only (Kafka's KTableRepartitionMap with versioned semantics, KIP-914)
                self.ctx.record_dropped("late_record", r)
                continue
            new, old = r.value
            try:
                np = None if new is None else self._usable(select(r.key, new), r)
                op = None if old is None else self._usable(select(r.key, old), r)
            except Exception as e:
                on_error(e, r)
                continue
            if np is not None and op is not None and np[0] == op[0]:
                out.append(r.with_key_value(np[0], Change(np[1], op[1])))
                continue
            if op is not None:
                out.append(r.with_key_value(op[0], Change(None, op[1])))
            if np is not None:
                out.append(r.with_key_value(np[0], Change(np[1], None)))
        self.ctx.forward_batch(out)

    def _usable(self, selected: Any, r: Record) -> tuple[Any, Any] | None:
        """The selected `(key, value)`, or None (counted) when it has no key or no value."""
        pair = None if selected is None else _pair(selected)
        if pair is None or pair[0] is None:
            self.ctx.record_dropped("null_key", r)
            return None
        if pair[1] is None:
            self.ctx.record_dropped("null_value", r)
            return None
        return pair


class TableAggregateProcessor(BuiltinProcessor):
    """Applies subtract-then-add per `Change` to the group's aggregate; emits `Change`s.

    A result's timestamp follows Kafka's KTableAggregate/KTableReduce: the larger of the
    record's and the stored aggregate's when the record changed an existing aggregate, the
    record's own otherwise.
    """

    def __init__(self, store: str, add: Step, subtract: Step) -> None:
        self.store_name = store
        self.add = add
        self.subtract = subtract

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        store = ctx.get_store(self.store_name)
        self.cached = cached_forwarding(store, ctx)
        self.get, self.put = timestamped_access(store)

    def process_batch(self, records: Sequence[Record]) -> None:
        get, put = self.get, self.put
        add, subtract, task, on_error = self.add, self.subtract, self.task, self.ctx.on_error
        out: list[Record] = []
        emit = out.append if self.cached is None else self.cached
        for r in records:
            k = r.key
            if k is None:
                self.ctx.record_dropped("null_key", r)
                continue
            new, old = r.value
            if task is not None:
                task.current = r
            try:
                kb, before, stored_ts = get(k)
                agg = before
                if old is not None and agg is not None:
                    agg = subtract(k, old, agg)
                if new is not None:
                    agg = add(k, new, agg)
            except Exception as e:
                on_error(e, r)
                continue
            ts = r.timestamp
            if before is not None and (old is not None or new is not None) and stored_ts > ts:
                ts = stored_ts
            put(kb, agg, ts)
            result = r.with_value(Change(agg, before))
            emit(result if ts == r.timestamp else result.with_timestamp(ts))
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)


class ChangeSerde(Serde):
    """`Change(new, old)` on a repartition topic: each side length-prefixed (-1 = None)."""

    def __init__(self, inner: Serde) -> None:
        def part(v: Any) -> bytes:
            if v is None:
                return _NONE
            b = inner.serialize(v)
            if b is None:
                return _NONE
            return _LEN.pack(len(b)) + b

        def ser(ch: Change) -> bytes:
            return part(ch[0]) + part(ch[1])

        def read(data: bytes, at: int) -> tuple[Any, int]:
            (n,) = _LEN.unpack_from(data, at)
            at += 4
            if n < 0:
                return None, at
            return inner.deserialize(bytes(data[at : at + n])), at + n

        def de(data: bytes) -> Change:
            try:
                new, at = read(data, 0)
                old, _ = read(data, at)
            except struct.error as e:
                raise SerdeError(f"change serde: truncated record {bytes(data)[:80]!r}") from e
            return Change(new, old)

        super().__init__(ser, de, f"change({inner.name})")


def _pair(p: Any) -> tuple[Any, Any]:
    k, v = p
    return k, v
