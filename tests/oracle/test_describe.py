"""The same names as Kafka Streams: `topology.describe()` must print Kafka's text.

For each generated spec (tests/oracle/generate.py) the harness answers with Kafka Streams'
`topology.describe().toString()`; kstream's `describe()` of the same spec must be equal
character for character: sub-topologies, node names and their order, stores, internal topic
names. A failure shows the first line that differs and a diff of the two texts.

Every shape is compared, those where kstream keeps more than Kafka included: a stream-stream
join has Kafka's WINDOWED, JOINTHIS/JOINOTHER (OUTERTHIS/OUTEROTHER) and MERGE nodes; the
stores kstream keeps beside Kafka's (a windowed aggregation's `<store>-stream-time`, a
table-table join's `<merge>-timestamps-store`) are left out of the description; a global
store's part is numbered among the sub-topologies as Kafka numbers it, and so are task ids.

`KSTREAM_ORACLE_DESCRIBE_CASES` sets the number of generated specs (300, from a fixed seed);
`KSTREAM_ORACLE_RANDOM=1` draws them from a random seed (run it with `--timeout=0`: a test
stopped while it waits for the harness leaves the answer unread, and every later comparison
of that session reads the answer of the case before its own). `SHAPES` run whatever is drawn.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from oracle.generate import cases
from oracle.harness import Oracle
from oracle.spec import Case, KstreamBuilder

CASES = int(os.environ.get("KSTREAM_ORACLE_DESCRIBE_CASES", "300"))
# `make oracle`'s switch: cases from a random seed (printed with a failing case) instead of the
# fixed one
RANDOM = os.environ.get("KSTREAM_ORACLE_RANDOM") == "1"


def describe_difference(mine: str, theirs: str) -> str:
    """The first line that differs and a unified diff; empty when the texts are equal."""
    if mine == theirs:
        return ""
    a, b = mine.splitlines(), theirs.splitlines()
    first = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    at = f"line {first + 1}: kstream {_line(a, first)!r}, Kafka Streams {_line(b, first)!r}"
    diff = difflib.unified_diff(a, b, "kstream", "Kafka Streams", lineterm="", n=3)
    return "\n".join([at, *diff])


def _line(lines: list[str], i: int) -> str:
    return lines[i] if i < len(lines) else "<end>"


def kstream_description(case: Case) -> str:
    return str(KstreamBuilder().build(case).build().describe())


@settings(
    max_examples=CASES,
    derandomize=not RANDOM,
    database=None,
    deadline=None,
    print_blob=RANDOM,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
@given(case=cases())
def test_describe_gives_kafka_streams_text(oracle: Oracle, case: Case) -> None:
    theirs = oracle.ask(case)["describe"]
    diff = describe_difference(kstream_description(case), theirs)
    assert not diff, "\n".join(
        ["kstream's describe() differs from Kafka Streams':", diff, "case:", case.pretty()]
    )


def _transform_values(nid: int, stores: bool) -> dict[str, Any]:
    """A table source's `transformValues` child: with a transformer store and a result store,
    or with neither."""
    node: dict[str, Any] = {"id": nid, "op": "transformValues", "vt": "string", "in": [0]}
    if not stores:
        return {**node, "transformer": "key_equals_value"}
    return {**node, "transformer": "count_calls", "store": f"s{nid}", "store_kind": "kv",
            "materialized": f"m{nid}"}  # fmt: skip


def _table_with_two_transforms(stores_first: bool, sink_below: int | None) -> Case:
    """A table source with two `transformValues` children, one keeping stores, and a sink below
    child `sink_below` (1 or 2) when given, so that the children's sub-trees differ in size."""
    table = {"id": 0, "op": "table", "vt": "string", "topic": "in0", "store": "s0"}
    nodes = [{**table, "store_kind": "kv"}]
    nodes += [_transform_values(1, stores_first), _transform_values(2, not stores_first)]
    if sink_below is not None:
        nodes.append({"id": 3, "op": "toStream", "vt": "string", "in": [sink_below]})
        nodes.append({"id": 4, "op": "to", "vt": "string", "in": [3], "topic": "out4"})
    return Case(nodes)


# Shapes compared on every run whatever the seed draws: a table source with two transformValues
# children, one with stores, in both orders and with either child's sub-tree the larger (the
# children after `-->` are ordered by sub-tree size, then name, as Kafka's TreeSet holds them)
SHAPES = [
    pytest.param(
        _table_with_two_transforms(first, below),
        id=f"table-transform-values-{'stores' if first else 'plain'}-first-sink-below-{below}",
    )
    for first in (True, False)
    for below in (None, 1, 2)
]


@pytest.mark.parametrize("case", SHAPES)
def test_shapes_describe_as_kafka_streams(oracle: Oracle, case: Case) -> None:
    theirs = oracle.ask(case)["describe"]
    diff = describe_difference(kstream_description(case), theirs)
    assert not diff, "\n".join(["kstream's describe() differs from Kafka Streams':", diff])


def test_describe_difference_names_the_first_line() -> None:
    diff = describe_difference("Topologies:\n a\n b\n", "Topologies:\n a\n c\n")
    assert diff.splitlines()[0] == "line 3: kstream ' b', Kafka Streams ' c'"
    assert describe_difference("x\n", "x\n") == ""
