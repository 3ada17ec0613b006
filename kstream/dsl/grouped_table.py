"""`KGroupedTable`: a table re-grouped by a new key, aggregated with an adder and a subtractor.

A table row can change its group: when `selector(k, v) -> (k2, v2)` maps the old value to one
group and the new value to another, the old group must forget the row and the new one must
count it. So every update travels through a repartition topic as `Change(new, old)`: the old
value's group receives `Change(None, old)` (the subtractor runs), the new value's group
`Change(new, None)` (the adder runs). When both land in the same group, one record carries both
and the aggregate emits a single result (Kafka 3.5+, KIP-904), subtracting first.

Aggregates are never deleted by subtraction: a count that drops to 0 stays 0, as in Kafka. A
`reduce` whose value disappears entirely (nothing to subtract from, nothing added) is deleted.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.graph import AUTO, InternalBuilder, ValueGetter, processor_factory
from kstream.dsl.processors import (
    BuiltinProcessor,
    Change,
    NotLatest,
    cached_forwarding,
    timestamped_access,
)
from kstream.dsl.table import KTable
from kstream.errors import SerdeError, TopologyError
from kstream.records import Record
from kstream.serde import Serde, SerdeLike, serde
from kstream.topology.processor import ProcessorContext

LONG = serde("long")

Step = Callable[[Any, Any, Any], Any]
"""`step(key, value, agg) -> agg`: an adder (agg may be None: nothing yet) or a subtractor."""


def group_table(
    table: KTable,
    selector: Callable[[Any, Any], tuple[Any, Any]],
    key_serde: SerdeLike = None,
    value_serde: SerdeLike = None,
    name: str | None = None,
) -> KGroupedTable:
    """What `KTable.group_by(selector)` builds: a regroup processor below `table` that turns
    each `Change` into the records for the groups it leaves and joins (no topic yet: the
    repartition topic is added by the aggregation, named after its store).

    With `name` (Kafka's `Grouped.as(name)`, KTableImpl.groupBy) the regroup processor is
    `name` and the repartition topic `<name>-repartition`, whatever the store is called, so
    adding an operator upstream renames neither."""
    if not callable(selector):
        raise TopologyError(
            f"KTable.group_by: selector must be a function (k, v) -> (k2, v2), got {selector!r}"
        )
    b = table._builder
    node = b.name("SELECT", name, "KTABLE")
    b.processor(node, processor_factory(TableRegroupProcessor, selector), table._node)
    ks = None if key_serde is None else serde(key_serde)
    vs = None if value_serde is None else serde(value_serde)
    return KGroupedTable(b, node, ks, vs, name)


class KGroupedTable:
    """Rows of a table grouped by a new key: `count`, `reduce`, `aggregate`.

    `name`: the user's name for the grouping, which names the repartition topic; its
    aggregations then share that one topic, as Kafka's `KGroupedTableImpl` reuses its
    repartition node when the grouping is named (unnamed, each gets `<store>-repartition`).
    """

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        name: str | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._name = name
        self._repartition_source: str | None = None

    def __repr__(self) -> str:
        return f"KGroupedTable({self._node})"

    def _aggregate(
        self,
        op: str,
        add: Step,
        subtract: Step,
        store: Any,
        value_serde: Serde | None,
        name: str | None,
    ) -> KTable:
        b = self._builder
        # Kafka's order of names (KGroupedTableImpl): the store (KTABLE-AGGREGATE-STATE-STORE-...
        # for reduce too), the repartition's sink and source, then the processor
        spec = b.timestamped_store_spec(
            store, "AGGREGATE", key_serde=self._key_serde, value_serde=value_serde, prefix="KTABLE"
        )
        src = self._repartition(spec.name, name)
        node = b.name(op, name, "KTABLE")
        factory = processor_factory(TableAggregateProcessor, spec.name, add, subtract)
        b.processor(node, factory, src)
        b.add_store(spec, [node])
        return KTable(b, node, self._key_serde, value_serde, ValueGetter(spec.name))

    def _repartition(self, store: str, name: str | None) -> str:
        """The source of the repartition topic the aggregation reads: a new one named after
        `store`, or the named grouping's, made by its first aggregation; its sink and source
        are named after the aggregation's `name` if it has one."""
        b = self._builder
        if self._repartition_source is not None:
            b.name("SINK")  # Kafka burns the indices of the names it does not use
            b.name("SOURCE")
            return self._repartition_source
        src = b.regroup_repartition(
            self._node,
            store if self._name is None else self._name,
            key_serde=self._key_serde or AUTO,
            value_serde=ChangeSerde(self._value_serde or AUTO),
            name=name,
        )
        if self._name is not None:
            self._repartition_source = src
        return src

    def count(self, store: Any = None, name: str | None = None) -> KTable:
        """Rows per group: a table of ints (value serde "long").

        A row moving to another group is subtracted from the old one and added to the new one; a
        count that drops to 0 stays 0 (it is not deleted), as in Kafka Streams.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> users = b.table("users", "str", "str")
            >>> per_city = users.group_by(lambda user, city: (city, user), "str", "str").count()
            >>> per_city.to_stream().to("per-city", "str", "long")
            >>> with TopologyTestDriver(b) as d:
            ...     d.input_topic("users", "str", "str").pipe_many([("a", "Oslo"), ("a", "Rome")])
            ...     d.output_topic("per-city", "str", "long").read_key_values()
            [('Oslo', 1), ('Oslo', 0), ('Rome', 1)]
        """
        return self._aggregate("AGGREGATE", _count_add, _count_subtract, store, LONG, name)

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        store: Any = None,
        name: str | None = None,
    ) -> KTable:
        """`adder(agg, v)` for a row joining the group, `subtractor(agg, v)` for one leaving.

        The first value of a group is its initial aggregate. An update that stays in its group
        subtracts the old value then adds the new one, and emits one result (Kafka 3.5+, KIP-904). A
        group whose value disappears entirely is deleted.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> balances = b.table("balances", "str", "json")
            >>> g = balances.group_by(lambda k, v: (v["branch"], v["amount"]), "str", "long")
            >>> per_branch = g.reduce(lambda a, v: a + v, lambda a, v: a - v, store="per-branch")
            >>> with TopologyTestDriver(b) as d:
            ...     src = d.input_topic("balances", "str", "json")
            ...     src.pipe("ann", {"branch": "x", "amount": 5})
            ...     src.pipe("bo", {"branch": "x", "amount": 3})
            ...     src.pipe("ann", {"branch": "x", "amount": 1})  # 5 out, 1 in
            ...     d.get_store("per-branch").get("x")
            4
        """
        _check_fn(adder, "reduce", "adder(agg, value)")
        _check_fn(subtractor, "reduce", "subtractor(agg, value)")

        def add(_k: Any, v: Any, agg: Any) -> Any:
            return v if agg is None else adder(agg, v)

        def subtract(_k: Any, v: Any, agg: Any) -> Any:
            return subtractor(agg, v)

        return self._aggregate("REDUCE", add, subtract, store, self._value_serde, name)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        store: Any = None,
        value_serde: SerdeLike = None,
        name: str | None = None,
    ) -> KTable:
        """Fold each group from `initializer()`: `adder(key, value, agg)` for a row joining the
        group, `subtractor(key, value, agg)` for one leaving.

        Subtraction never deletes the aggregate (as Kafka's KTableAggregate). The result's timestamp
        is the larger of the update's and the stored aggregate's.

        Example:
            >>> from kstream.testing import TopologyTestDriver
            >>> b = StreamBuilder()
            >>> g = b.table("user-city", "str", "str").group_by(lambda u, c: (c, u), "str", "str")
            >>> def add(city, user, names): return sorted([*names, user])
            >>> def remove(city, user, names): return [n for n in names if n != user]
            >>> names = g.aggregate(list, add, remove, store="names", value_serde="json")
            >>> with TopologyTestDriver(b) as d:
            ...     moves = [("bo", "Oslo"), ("ann", "Oslo"), ("bo", "Rome")]
            ...     d.input_topic("user-city", "str", "str").pipe_many(moves)
            ...     d.get_store("names").get("Oslo"), d.get_store("names").get("Rome")
            (['ann'], ['bo'])
        """
        _check_fn(initializer, "aggregate", "initializer()")
        _check_fn(adder, "aggregate", "adder(key, value, agg)")
        _check_fn(subtractor, "aggregate", "subtractor(key, value, agg)")

        def add(k: Any, v: Any, agg: Any) -> Any:
            return adder(k, v, initializer() if agg is None else agg)

        vs = None if value_serde is None else serde(value_serde)
        return self._aggregate("AGGREGATE", add, subtractor, store, vs, name)


def _check_fn(fn: Any, method: str, shape: str) -> None:
    if not callable(fn):
        raise TopologyError(f"KGroupedTable.{method}: expected a function {shape}, got {fn!r}")


def _count_add(_k: Any, _v: Any, agg: Any) -> int:
    return 1 if agg is None else agg + 1


def _count_subtract(_k: Any, _v: Any, agg: Any) -> int:
    return int(agg) - 1


def _pair(p: Any) -> tuple[Any, Any]:
    k, v = p
    return k, v


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


_NONE = struct.pack(">i", -1)
_LEN = struct.Struct(">i")


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


__all__ = ["ChangeSerde", "KGroupedTable", "group_table"]
