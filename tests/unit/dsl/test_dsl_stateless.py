"""Stateless KStream operators, each with its exact output through the test driver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kstream.dsl import KStream, StreamBuilder
from kstream.errors import ProcessingError
from kstream.records import Record
from kstream.testing.driver import TopologyTestDriver
from kstream.topology import Processor
from kstream.topology.nodes import ProcessorNode

Pairs = list[tuple[Any, Any]]


def run(
    build: Callable[[KStream], KStream | None],
    records: Pairs,
    out_value_serde: str = "json",
) -> Pairs:
    """Pipe `records` (string keys, json values) through `build(stream)`, read "out"."""
    b = StreamBuilder()
    result = build(b.stream("in", "string", "json"))
    if result is not None:
        result.to("out", "string", out_value_serde)
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(records)
        return d.output_topic("out", "string", out_value_serde).read_key_values()


RECS: Pairs = [("a", 1), ("b", 2), ("c", 3), ("d", 4)]


def test_filter_and_filter_not() -> None:
    assert run(lambda s: s.filter(lambda k, v: v % 2 == 0), RECS) == [("b", 2), ("d", 4)]
    assert run(lambda s: s.filter_not(lambda k, v: v % 2 == 0), RECS) == [("a", 1), ("c", 3)]


def test_map_and_map_values() -> None:
    assert run(lambda s: s.map(lambda k, v: (k * 2, v * 10)), RECS[:2]) == [
        ("aa", 10),
        ("bb", 20),
    ]
    assert run(lambda s: s.map_values(lambda v: [v]), RECS[:2]) == [("a", [1]), ("b", [2])]


def test_flat_map_and_flat_map_values_keep_order() -> None:
    assert run(lambda s: s.flat_map(lambda k, v: [(k, v)] * v), RECS[:3]) == [
        ("a", 1),
        ("b", 2),
        ("b", 2),
        ("c", 3),
        ("c", 3),
        ("c", 3),
    ]
    assert run(lambda s: s.flat_map_values(lambda v: range(v)), RECS[1:3]) == [
        ("b", 0),
        ("b", 1),
        ("c", 0),
        ("c", 1),
        ("c", 2),
    ]


def test_select_key_peek_and_foreach() -> None:
    seen: Pairs = []
    each: Pairs = []

    def build(s: KStream) -> KStream:
        s.foreach(lambda k, v: each.append((k, v)))
        return s.peek(lambda k, v: seen.append((k, v))).select_key(lambda k, v: f"{k}{v}")

    assert run(build, RECS[:2]) == [("a1", 1), ("b2", 2)]
    assert seen == each == [("a", 1), ("b", 2)]


def test_branch_first_match_wins_and_default() -> None:
    b = StreamBuilder()
    small, even, rest = b.stream("in", "string", "json").branch(
        lambda k, v: v < 3, lambda k, v: v % 2 == 0, default=True
    )
    small.to("small", "string", "json")
    even.to("even", "string", "json")
    rest.to("rest", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many([(str(i), i) for i in range(7)])
        got = {
            t: d.output_topic(t, "string", "json").read_values() for t in ("small", "even", "rest")
        }
    # 2 is small and even: the first predicate wins
    assert got == {"small": [0, 1, 2], "even": [4, 6], "rest": [3, 5]}


def test_branch_without_default_drops_the_rest() -> None:
    b = StreamBuilder()
    (only,) = b.stream("in", "string", "json").branch(lambda k, v: v > 1)
    only.to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(RECS)
        assert d.output_topic("out", "string", "json").read_values() == [2, 3, 4]


def test_merge_of_two_topics_keeps_arrival_order() -> None:
    b = StreamBuilder()
    left = b.stream("l", "string", "json")
    right = b.stream("r", "string", "json")
    left.merge(right).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        li, ri = d.input_topic("l", "string", "json"), d.input_topic("r", "string", "json")
        li.pipe("a", 1)
        ri.pipe("b", 2)
        li.pipe("c", 3)
        assert d.output_topic("out", "string", "json").read_key_values() == [
            ("a", 1),
            ("b", 2),
            ("c", 3),
        ]


def test_merge_of_branches_of_one_source_is_depth_first() -> None:
    """Each input record passes completely before the next: Kafka's order, not batch order."""
    b = StreamBuilder()
    s = b.stream("in", "string", "json")
    s.filter(lambda k, v: True).merge(s.map_values(lambda v: v * 100)).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        # one task.process call with a batch of records, as the runtime does
        task = d.tasks[0]
        task.process([Record(b"k", b"%d" % i, i, (), "in", 0, i) for i in (1, 2)])
        assert d.output_topic("out", "string", "json").read_values() == [1, 100, 2, 200]


def test_batch_of_a_tree_topology_gives_per_path_order() -> None:
    b = StreamBuilder()
    s = b.stream("in", "string", "json")
    s.filter(lambda k, v: v % 2 == 1).to("odd", "string", "json")
    s.map_values(lambda v: -v).to("neg", "string", "json")
    with TopologyTestDriver(b) as d:
        d.tasks[0].process([Record(b"k", b"%d" % i, i, (), "in", 0, i) for i in range(5)])
        assert d.output_topic("odd", "string", "json").read_values() == [1, 3]
        assert d.output_topic("neg", "string", "json").read_values() == [0, -1, -2, -3, -4]


def test_to_with_partitioner_and_known_serdes() -> None:
    calls: list[tuple[Any, Any, int]] = []

    def part(k: Any, v: Any, n: int) -> int:
        calls.append((k, v, n))
        return 0

    b = StreamBuilder()
    b.stream("in", "string", "json").to("out", partitioner=part)  # serdes of the source
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe("a", {"x": 1})
        assert d.output_topic("out", "string", "json").read_key_values() == [("a", {"x": 1})]
    assert calls == [("a", {"x": 1}, 1)]


def test_repartition_hop_is_fed_back() -> None:
    def build(s: KStream) -> KStream:
        return s.select_key(lambda k, v: k.upper()).repartition(name="up").map_values(str)

    b = StreamBuilder()
    build(b.stream("in", "string", "json")).to("out", "string", "string")
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("in", "string", "json").pipe_many(RECS[:2])
        assert d.output_topic("out", "string", "string").read_key_values() == [
            ("A", "1"),
            ("B", "2"),
        ]
        assert "app-up-repartition" in d.compiled.repartition_topics


def test_process_with_user_processor() -> None:
    class Twice(Processor):
        def process(self, record: Record) -> None:
            self.ctx.forward(record)
            self.ctx.forward(record.with_key(record.key + "!"))

    assert run(lambda s: s.process(Twice), RECS[:1]) == [("a", 1), ("a!", 1)]


def test_user_function_error_names_record() -> None:
    with pytest.raises(ProcessingError, match="KSTREAM-MAPVALUES-0000000001") as ei:
        run(lambda s: s.map_values(lambda v: 1 // (v - 2)), RECS)
    assert (ei.value.topic, ei.value.partition, ei.value.offset) == ("in", 0, 1)


def test_null_values_pass_through_stateless_ops() -> None:
    assert run(lambda s: s.filter(lambda k, v: v is None), [("a", None), ("b", 1)]) == [("a", None)]


def _owning(d: TopologyTestDriver) -> dict[str, bool]:
    """Whether each map / map_values node of the driver's task changes its records in place."""
    return {
        name: node.processor.owns_input
        for name, node in d.tasks[0].nodes.items()
        if isinstance(node, ProcessorNode) and hasattr(node.processor, "owns_input")
    }


def test_maps_change_their_records_in_place_when_the_records_reach_only_them() -> None:
    """source -> filter -> peek -> map_values -> map: each record passes through nodes that
    hand it to one child and keep nothing, so the maps change it instead of copying it."""
    b = StreamBuilder()
    b.stream("in", "string", "json").filter(lambda k, v: v > 1).peek(lambda k, v: None).map_values(
        lambda v: v * 10
    ).map(lambda k, v: (k.upper(), v + 1)).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        assert sorted(_owning(d).values()) == [True, True]
        d.input_topic("in", "string", "json").pipe_many(RECS)
        assert d.output_topic("out", "string", "json").read_key_values() == [
            ("B", 21),
            ("C", 31),
            ("D", 41),
        ]


def test_maps_copy_records_another_node_also_gets_or_a_user_processor_may_keep() -> None:
    """A record a second child also gets (a branch), or a user processor forwards (and may
    keep), is copied by a map: the other branch, and what the processor kept, see the value
    the record came with."""
    kept: list[Record] = []

    class Keep(Processor):
        def process(self, record: Record) -> None:
            kept.append(record)
            self.ctx.forward(record)

    b = StreamBuilder()
    s = b.stream("in", "string", "json")
    s.map_values(lambda v: v * 10).to("tens", "string", "json")
    s.to("as-is", "string", "json")
    b.stream("in2", "string", "json").process(Keep).map_values(lambda v: -v).to(
        "negated", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        assert _owning(d) and not any(_owning(d).values())
        d.input_topic("in", "string", "json").pipe_many(RECS[:2])
        d.input_topic("in2", "string", "json").pipe_many(RECS[2:])
        assert d.output_topic("tens", "string", "json").read_values() == [10, 20]
        assert d.output_topic("as-is", "string", "json").read_values() == [1, 2]
        assert d.output_topic("negated", "string", "json").read_values() == [-3, -4]
    assert [(r.key, r.value) for r in kept] == [("c", 3), ("d", 4)]
