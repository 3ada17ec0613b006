"""Foreign-key table-table joins (`kstream.dsl.fk_join`): names, arguments, stale answers.

The join's results are checked against Kafka's own tests in tests/conformance/test_fk_join.py;
here: `describe()` equals Kafka Streams' (the texts in test_fk_join_kafka_describe.txt are
Kafka Streams 4.1.1's `Topology.describe()` of the same programs), the two call forms of
`KTable.join`, the hash check that drops a stale answer, timestamps, and the Spark refusal.
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl import table as table_module
from kstream.dsl.processors.fk_wire import (
    Instruction,
    Response,
    Subscription,
    response_serde,
    subscription_serde,
    value_hash,
)
from kstream.errors import TopologyError
from kstream.serde import serde
from kstream.testing import TopologyTestDriver

KAFKA_TEXTS = Path(__file__).with_name("test_fk_join_kafka_describe.txt")


def kafka_describe(name: str) -> str:
    blocks = KAFKA_TEXTS.read_text().split("=== ")[1:]
    texts = dict(block.split("\n", 1) for block in blocks)
    return texts[name].rstrip("\n")


def first_field(v: str) -> str:
    return v.split("|")[0]


# --- describe() -----------------------------------------------------------------------------


def test_describe_of_an_inner_join_is_kafkas() -> None:
    b = StreamBuilder()
    left, right = b.table("left", store="L"), b.table("right", store="R")
    left.join(right, first_field, lambda v, o: f"{v}+{o}").to_stream().to("out")
    assert str(b.build().describe()).rstrip("\n") == kafka_describe("inner")


def test_describe_of_a_named_materialized_left_join_is_kafkas() -> None:
    """`TableJoined.as("fkj")` and `Materialized.as("res")`, with a (key, value) extractor."""
    b = StreamBuilder()
    left, right = b.table("left", store="L"), b.table("right", store="R")
    left.left_join(
        right,
        lambda k, v: first_field(v),
        lambda v, o: f"{v}+{o}",
        name="fkj",
        materialized="res",
        with_key=True,
    ).to_stream().to("out")
    assert str(b.build().describe()).rstrip("\n") == kafka_describe("left_named_materialized")


def test_describe_with_derived_inputs_and_a_joined_result_is_kafkas() -> None:
    """A filter on the left, a map_values on the right; the result joined again, which makes
    Kafka materialize it (its store, `KTABLE-FK-JOIN-OUTPUT-STATE-STORE-...`, is then shown)."""
    b = StreamBuilder()
    left, right = b.table("left", store="L"), b.table("right", store="R")
    joined = left.filter(lambda k, v: v is not None).join(
        right.map_values(lambda v: v + "!"), first_field, lambda v, o: v + o
    )
    joined.join(b.table("third", store="T"), lambda x, y: x + y).to_stream().to("out")
    assert str(b.build().describe()).rstrip("\n") == kafka_describe("derived_inputs_result_joined")


def test_the_result_store_is_described_only_when_something_below_needs_it() -> None:
    b = StreamBuilder()
    left, right = b.table("left", store="L"), b.table("right", store="R")
    result = left.join(right, first_field, lambda v, o: v)
    result.filter(lambda k, v: True).to_stream().to("out")
    assert "OUTPUT-STATE-STORE" not in str(b.build().describe())
    result.group_by(lambda k, v: (v, v)).count()
    assert "KTABLE-FK-JOIN-OUTPUT-STATE-STORE" in str(b.build().describe())


def test_internal_topics_are_named_as_kafkas() -> None:
    """`KTableKTableForeignKeyJoinScenarioTest.shouldUseExpectedTopicsWithSerde`: the two
    internal topics of an unnamed join on unnamed tables."""
    b = StreamBuilder()
    left = b.table("left_table", "integer", "string")
    right = b.table("right_table", "integer", "string")
    left.join(right, lambda v: int(v.split("|")[1]), lambda a, c: f"({a},{c})").to_stream().to(
        "output-topic"
    )
    app = "ktable-ktable-joinOnForeignKey"
    compiled = b.build().compile(app)
    assert set(compiled.repartition_topics) == {
        f"{app}-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
        f"{app}-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
    }


# --- the two call forms ---------------------------------------------------------------------


def test_join_on_the_key_keeps_its_signature() -> None:
    b = StreamBuilder()
    a, c = b.table("a", "str", "str"), b.table("c", "str", "str")
    a.join(c, lambda x, y: x + y, "named", "kept").to_stream().to("out", "str", "str")
    a.left_join(c, joiner=lambda x, y: x).to_stream().to("out2", "str", "str")
    with TopologyTestDriver(b) as d:
        d.input_topic("a", "str", "str").pipe("k", "1")
        d.input_topic("c", "str", "str").pipe("k", "2")
        assert d.output_topic("out", "str", "str").read_key_values() == [("k", "12")]
        assert d.get_store("kept").get("k") == "12"


def test_foreign_key_extractor_forms() -> None:
    """`extractor(value)`, or `extractor(key, value)` with `with_key=True`; the arguments by
    name too."""
    b = StreamBuilder()
    a, c = b.table("a", "str", "str"), b.table("c", "str", "str")
    a.join(c, lambda v: v, lambda x, y: f"{x}:{y}").to_stream().to("by-value", "str", "str")
    a.join(
        c, foreign_key_extractor=lambda k, v: k[0], joiner=lambda x, y: y, with_key=True
    ).to_stream().to("by-key", "str", "str")
    with TopologyTestDriver(b) as d:
        d.input_topic("c", "str", "str").pipe_many([("x", "X"), ("k", "K")])
        d.input_topic("a", "str", "str").pipe("k1", "x")
        assert d.output_topic("by-value", "str", "str").read_key_values() == [("k1", "x:X")]
        assert d.output_topic("by-key", "str", "str").read_key_values() == [("k1", "K")]


def test_bad_arguments_are_refused_with_the_form_named() -> None:
    b = StreamBuilder()
    a, c = b.table("a"), b.table("c")
    with pytest.raises(TypeError, match="foreign_key_extractor, joiner"):
        a.join(c, lambda v: v, lambda x, y: x, "positional-name")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="joiner, name, materialized"):
        a.join(c, lambda x, y: x, nope=1)  # type: ignore[call-overload]
    with pytest.raises(TopologyError, match="needs a KTable"):
        a.join(b.stream("s"), lambda v: v, lambda x, y: x)  # type: ignore[call-overload]
    with pytest.raises(TopologyError, match="foreign_key_extractor must be callable"):
        a.left_join(c, foreign_key_extractor="f", joiner=lambda x, y: x)  # type: ignore[call-overload]


# --- answers, timestamps, drops ---------------------------------------------------------------


def out_records(d: TopologyTestDriver) -> list[tuple[Any, Any, int]]:
    return [
        (r.key, r.value, r.timestamp) for r in d.output_topic("out", "str", "str").read_records()
    ]


def fk_app(left_join: bool = False) -> StreamBuilder:
    b = StreamBuilder()
    left, right = b.table("left", "str", "str"), b.table("right", "str", "str")
    join = left.left_join if left_join else left.join
    join(right, lambda v: v.split("|")[1], lambda v, o: f"({v},{o})").to_stream().to(
        "out", "str", "str"
    )
    return b


def test_results_carry_the_timestamps_kafka_gives_them() -> None:
    """The records (and timestamps) Kafka Streams 4.1.1 emits for this input: an answer to
    a subscription takes the larger of the two rows' timestamps, a foreign update's answer
    and a delete for a changed foreign key their own."""
    with TopologyTestDriver(fk_app()) as d:
        left, right = d.input_topic("left", "str", "str"), d.input_topic("right", "str", "str")
        right.pipe("rhs1", "rv1", timestamp=5)
        left.pipe("lhs1", "lv1|rhs1", timestamp=3)
        assert out_records(d) == [("lhs1", "(lv1|rhs1,rv1)", 5)]
        left.pipe("lhs1", "lv1|rhs2", timestamp=4)
        assert out_records(d) == [("lhs1", None, 4)]
        right.pipe("rhs2", "rv2", timestamp=1)
        assert out_records(d) == [("lhs1", "(lv1|rhs2,rv2)", 1)]


def test_a_stale_answer_is_dropped() -> None:
    """An answer made for a left value the row no longer has (its hash differs) never joins:
    it is counted as dropped."""
    b = fk_app(left_join=True)
    (topic,) = [t for t in b.build().repartition_topics if "RESPONSE" in t]
    with TopologyTestDriver(b) as d:
        d.input_topic("left", "str", "str").pipe("lhs1", "new|rhs1", timestamp=1)
        assert out_records(d) == [("lhs1", "(new|rhs1,None)", 1)]
        stale = Response(value_hash(b"old|rhs1"), "rv1", 0)
        current = Response(value_hash(b"new|rhs1"), "rv1", 0)
        answers = response_serde(serde("string"))
        for answer in (stale, current):
            d.pipe_raw(f"test-{topic}", b"lhs1", answers.to_bytes(answer), timestamp=2)
        assert out_records(d) == [("lhs1", "(new|rhs1,rv1)", 2)]
        assert d.dropped_records().get("stale_response") == 1


def test_a_none_foreign_key_is_dropped_by_an_inner_join() -> None:
    b = StreamBuilder()
    left, right = b.table("left", "str", "str"), b.table("right", "str", "str")
    left.join(right, lambda v: None, lambda v, o: v).to_stream().to("out", "str", "str")
    with TopologyTestDriver(b) as d:
        d.input_topic("left", "str", "str").pipe("lhs1", "v", timestamp=1)
        assert out_records(d) == []
        assert d.dropped_records().get("null_key") == 1


def test_subscription_and_response_encodings_round_trip() -> None:
    subs = subscription_serde(serde("string"))
    for s in (
        Subscription(value_hash(b"v"), Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE, "k", 3),
        Subscription(None, Instruction.DELETE_KEY_AND_PROPAGATE, "k", 0),
    ):
        assert subs.from_bytes(subs.to_bytes(s)) == s
    answers = response_serde(serde("json"))
    for r in (Response(value_hash(b"v"), {"a": 1}, 2), Response(None, None, 0)):
        assert answers.from_bytes(answers.to_bytes(r)) == r
    # a foreign value of no bytes reads as no value, as Kafka's response serde reads it
    empty = response_serde(serde("string"))
    assert empty.from_bytes(empty.to_bytes(Response(None, "", 1))) == Response(None, None, 1)


@pytest.mark.parametrize("left_join", [False, True])
def test_a_foreign_value_of_no_bytes_joins_as_no_value(left_join: bool) -> None:
    """Issue 47, found by the Kafka Streams oracle: Kafka's response serde
    (`SubscriptionResponseWrapperSerde`) reads a foreign value that serializes to zero bytes
    (here "") as null, so an inner join deletes the row's result and a left join joins None;
    kstream joined "". Checked against Kafka Streams 4.1.1 and 4.4.0
    (tests/oracle/test_ported_operators.py REGRESSIONS)."""
    b = StreamBuilder()
    orders, products = b.table("orders", "str", "str"), b.table("products", "str", "str")
    join = orders.left_join if left_join else orders.join
    join(products, lambda v: v.split(":")[0], lambda v, p: f"{v}=>{p}").to_stream().to(
        "out", "str", "str"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("products", "str", "str").pipe("p", "", timestamp=10)
        d.input_topic("orders", "str", "str").pipe("o", "p:1", timestamp=20)
        assert out_records(d) == [("o", "p:1=>None" if left_join else None, 20)]


# --- Spark, docstrings ------------------------------------------------------------------------


def test_spark_plans_a_foreign_key_joins_two_sides_as_a_loop() -> None:
    """The subscriptions go from the left table's sub-topology to the right table's and the
    responses come back: Spark runs the two as a loop (kstream.spark.runner.TaskQueries)."""
    pytest.importorskip("pyspark")
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(fk_app().build(), "app")
    assert len(plan.loops) == 1 and len(plan.loops[0]) == 2
    left, right = plan.loops[0]
    assert any(t in plan.sources[right] for t in plan.sinks[left])  # subscriptions
    assert any(t in plan.sources[left] for t in plan.sinks[right])  # responses


@pytest.mark.parametrize("qualname", ["TableOps.join", "TableOps.left_join"])
def test_docstring_examples_run(qualname: str) -> None:
    tests = [
        t
        for t in doctest.DocTestFinder().find(table_module, globs={"StreamBuilder": StreamBuilder})
        if t.name.endswith("." + qualname)
    ]
    assert len(tests) == 1 and tests[0].examples
    assert doctest.DocTestRunner().run(tests[0]).failed == 0
