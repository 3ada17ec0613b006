"""The `stateless` class flag of the DSL's processors: True exactly for the built-in operators
that keep nothing between records.

An engine that runs such processors without state (the Spark engine runs a sub-topology of
only these without Spark state) reads the flag from the processor's class, so a processor
marked stateless that opens a store, or a new stateless operator left unmarked, shows here.
"""

from __future__ import annotations

import kstream.dsl
from kstream.dsl import StreamBuilder
from kstream.dsl.processors import BuiltinProcessor
from kstream.dsl.windows import TimeWindows
from kstream.topology.topology import ProcessorDef

STATELESS = {
    "FilterProcessor",
    "MapProcessor",
    "MapValuesProcessor",
    "SelectKeyProcessor",
    "FlatMapProcessor",
    "FlatMapValuesProcessor",
    "PeekProcessor",
    "PassThroughProcessor",
    "BranchProcessor",
    "DropNullKeysProcessor",
}


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def _processor_class(node: ProcessorDef) -> type | None:
    f = node.factory
    if isinstance(f, type):
        return f
    cls = getattr(f, "processor_class", None)
    return cls if isinstance(cls, type) else None


def test_exactly_the_builtin_stateless_operators_carry_the_flag() -> None:
    assert kstream.dsl.__name__  # the whole DSL imported: every built-in processor is defined
    flagged = {c.__name__ for c in _subclasses(BuiltinProcessor) if c.stateless}
    assert flagged == STATELESS


def test_no_flagged_node_of_a_topology_has_a_store() -> None:
    b = StreamBuilder()
    s = b.stream("in", "str", "long")
    left, right = (
        s.filter(lambda k, v: v > 0)
        .map_values(lambda v: v + 1)
        .branch(lambda k, v: v % 2, default=True)
    )
    keyed = left.select_key(lambda k, v: str(v)).flat_map_values(lambda v: [v, v]).peek(print)
    keyed.group_by_key().windowed_by(TimeWindows.of("1m")).count()
    right.map(lambda k, v: (k, v)).flat_map(lambda k, v: [(k, v)]).group_by_key().count()
    flags: dict[str, bool] = {}
    for node in b.build().nodes.values():
        if isinstance(node, ProcessorDef):
            cls = _processor_class(node)
            assert cls is not None, node.name
            stateless = issubclass(cls, BuiltinProcessor) and cls.stateless
            flags[cls.__name__] = stateless
            if stateless:
                assert not node.stores, f"{node.name} ({cls.__name__}) is marked stateless"
    # every stateless operator is in the topology (a branch's children are pass-throughs)
    assert {name for name, stateless in flags.items() if stateless} == STATELESS
    assert not flags["TimeWindowAggregateProcessor"]
    assert not flags["AggregateProcessor"]
