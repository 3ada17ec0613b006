"""`KGroupedTable`: a table re-grouped by a new key, aggregated with an adder and a subtractor.

A table row can change its group: when `selector(k, v) -> (k2, v2)` maps the old value to one
group and the new value to another, the old group must forget the row and the new one must
count it. So every update travels through a repartition topic as `Change(new, old)`: the old
value's group receives `Change(None, old)` (the subtractor runs), the new value's group
`Change(new, None)` (the adder runs). When both land in the same group, one record carries both
and the aggregate emits a single result (Kafka 3.5+, KIP-904), subtracting first.

Aggregates are never deleted by subtraction: a count that drops to 0 stays 0, as in Kafka. A
`reduce` whose value disappears entirely (nothing to subtract from, nothing added) is deleted.

The operators are here (`GroupedTableOps`, generic in the table class it makes);
`kstream.dsl.api.KGroupedTable` binds it to `KTable`, so the class users name is annotated bare
(and importable from `kstream.dsl.grouped_table` as before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from kstream.dsl.graph import AUTO, InternalBuilder, processor_factory
from kstream.dsl.handles import TableHandle, TableT
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.table_aggregate import (
    ChangeSerde,
    Step,
    TableAggregateProcessor,
    TableRegroupProcessor,
)
from kstream.errors import TopologyError
from kstream.serde import Serde, SerdeLike, serde

LONG = serde("long")


#: the grouped-table class a table's `group_by` makes (`kstream.dsl.api` binds it)
GroupedTableT = TypeVar("GroupedTableT", bound="GroupedTableOps[Any]")


def group_table(
    table: TableHandle[Any],
    grouped_tables: type[GroupedTableT],
    selector: Callable[[Any, Any], tuple[Any, Any]],
    key_serde: SerdeLike = None,
    value_serde: SerdeLike = None,
    name: str | None = None,
) -> GroupedTableT:
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
    return grouped_tables(b, node, ks, vs, type(table), name)


class GroupedTableOps(Generic[TableT]):
    """`KGroupedTable`'s operators: rows of a table grouped by a new key, `count`, `reduce`,
    `aggregate`.

    `name`: the user's name for the grouping, which names the repartition topic; its
    aggregations then share that one topic, as Kafka's `KGroupedTableImpl` reuses its
    repartition node when the grouping is named (unnamed, each gets `<store>-repartition`).
    `TableT` is the class of the table it was grouped from, the class its aggregations make.
    """

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        tables: type[TableT],
        name: str | None = None,
    ) -> None:
        self._tables = tables
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._name = name
        self._repartition_source: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._node})"

    def _aggregate(
        self,
        op: str,
        add: Step,
        subtract: Step,
        store: Any,
        value_serde: Serde | None,
        name: str | None,
    ) -> TableT:
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
        return self._tables(b, node, self._key_serde, value_serde, ValueGetter(spec.name))

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

    def count(self, store: Any = None, name: str | None = None) -> TableT:
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
    ) -> TableT:
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
    ) -> TableT:
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


__all__ = ["GroupedTableOps", "GroupedTableT", "group_table"]
