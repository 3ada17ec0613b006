"""None keys and None values in joins (KIP-962, Kafka 3.7+).

Ports of Kafka's `RelaxedNullKeyRequirementJoinTest` (an integration test run through the
TopologyTestDriver: both inputs go through `repartition()` first), plus the rules of
`KStreamKStreamJoin`, `KStreamKTableJoinProcessor` and `StreamStreamJoinUtil` for what is
dropped: left joins (and both sides of outer stream-stream joins) forward a None-key record
as `joiner(v, None)` / `joiner(None, v)` at its own timestamp; inner joins and the
non-emitting side of a left join drop it; a None value is always dropped. Every drop is
counted by reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream.dsl import KStream, StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.testing.driver import TopologyTestDriver

WINDOW = JoinWindows.of(60_000, grace=10_000)


def joiner(lv: Any, rv: Any) -> str:
    """Kafka's `(lv, rv) -> lv + "|" + rv`, None written as "null"."""
    return f"{'null' if lv is None else lv}|{'null' if rv is None else rv}"


def inputs(b: StreamBuilder) -> tuple[KStream, KStream]:
    """`builder.stream(LEFT).repartition()` and the same for RIGHT, as the Kafka test does."""
    return (
        b.stream("left", "string", "string").repartition(),
        b.stream("right", "string", "string").repartition(),
    )


def run(
    b: StreamBuilder, records: list[tuple[str, Any, Any, int]]
) -> tuple[list[Any], dict[str, int]]:
    with TopologyTestDriver(b) as d:
        topics = {t: d.input_topic(t, "string", "string") for t in ("left", "right")}
        for topic, k, v, ts in records:
            topics[topic].pipe(k, v, timestamp=ts)
        out = d.output_topic("out", "string", "string").read_records()
        return [(r.key, r.value, r.timestamp) for r in out], d.dropped_records()


def test_relaxed_left_stream_stream_join() -> None:
    """RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamStreamJoin."""
    b = StreamBuilder()
    left, right = inputs(b)
    left.left_join(right, joiner, window=WINDOW).to("out", "string", "string")
    assert run(b, [("left", None, "leftValue", 1)]) == ([(None, "leftValue|null", 1)], {})


def test_relaxed_left_stream_table_join() -> None:
    """RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamTableJoin."""
    b = StreamBuilder()
    left, right = inputs(b)
    left.left_join(right.to_table(), joiner).to("out", "string", "string")
    assert run(b, [("left", None, "leftValue", 1)]) == ([(None, "leftValue|null", 1)], {})


def test_relaxed_outer_stream_stream_join() -> None:
    """RelaxedNullKeyRequirementJoinTest.testRelaxedOuterStreamStreamJoin."""
    b = StreamBuilder()
    left, right = inputs(b)
    left.outer_join(right, joiner, window=WINDOW).to("out", "string", "string")
    records = [("right", None, "rightValue", 1), ("left", None, "leftValue", 2)]
    assert run(b, records) == ([(None, "null|rightValue", 1), (None, "leftValue|null", 2)], {})


def test_relaxed_left_stream_global_table_join() -> None:
    """RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamGlobalTableJoin."""
    b = StreamBuilder()
    left, _ = inputs(b)
    table = b.global_table("global", "string", "string")
    left.left_join(table, lambda _k, _v: None, joiner).to("out", "string", "string")
    assert run(b, [("left", None, "leftValue", 1)]) == ([(None, "leftValue|null", 1)], {})


@pytest.mark.parametrize(
    ("kind", "records", "expected", "dropped"),
    [
        pytest.param(
            "inner",
            [("left", None, "L", 1), ("right", None, "R", 2)],
            [],
            {"null_key": 2},
            id="inner: both sides dropped",
        ),
        pytest.param(
            "left",
            [("right", None, "R", 1), ("left", None, "L", 2)],
            [(None, "L|null", 2)],
            {"null_key": 1},
            id="left: the right side's None key is dropped",
        ),
        pytest.param(
            "outer",
            [("left", "k", None, 1), ("right", None, None, 2), ("left", None, "L", 3)],
            [(None, "L|null", 3)],
            {"null_value": 2},
            id="outer: None values are dropped on both sides",
        ),
        pytest.param(
            "left",
            [("left", "k", None, 1), ("left", None, None, 2)],
            [],
            {"null_value": 2},
            id="left: None values are dropped, with or without a key",
        ),
    ],
)
def test_stream_stream_drops(
    kind: str,
    records: list[tuple[str, Any, Any, int]],
    expected: list[Any],
    dropped: dict[str, int],
) -> None:
    """KStreamKStreamJoin.process: which None keys and values are forwarded, which dropped."""
    b = StreamBuilder()
    left = b.stream("left", "string", "string")
    right = b.stream("right", "string", "string")
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(left, method)(right, joiner, window=WINDOW).to("out", "string", "string")
    assert run(b, records) == (expected, dropped)


def test_a_none_key_record_moves_the_join_stream_time() -> None:
    """A None-key record still moves the join's stream time (Kafka advances it first), so
    it closes the windows of pending unmatched records."""
    b = StreamBuilder()
    left = b.stream("left", "string", "string")
    right = b.stream("right", "string", "string")
    left.left_join(right, joiner, window=JoinWindows.of(10)).to("out", "string", "string")
    records = [("left", "a", "A", 0), ("left", None, "N", 100), ("left", "b", "B", 101)]
    assert run(b, records) == (
        [(None, "N|null", 100), ("a", "A|null", 0)],
        {},
    )


@pytest.mark.parametrize(
    ("kind", "expected", "dropped"),
    [
        pytest.param("left", [(None, "v|null", 5)], {}, id="left join keeps it"),
        pytest.param("inner", [], None, id="inner join: filtered before the repartition topic"),
    ],
)
def test_a_key_changed_to_none_reaches_a_left_join_through_its_repartition_topic(
    kind: str, expected: list[Any], dropped: dict[str, int] | None
) -> None:
    """Kafka keeps None keys in repartition topics that feed a join accepting them
    (`NodesWithRelaxedNullKeyJoinDownstream`) and filters them out elsewhere."""
    b = StreamBuilder()
    table = b.table("right", "string", "string")
    keyed = b.stream("left", "string", "string").select_key(lambda _k, _v: None)
    join = keyed.left_join if kind == "left" else keyed.join
    join(table, joiner).to("out", "string", "string")
    got, drops = run(b, [("left", "x", "v", 5)])
    assert got == expected
    if dropped is not None:
        assert drops == dropped
