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
"""

from __future__ import annotations

import difflib
import os

from hypothesis import HealthCheck, given, settings

from oracle.generate import cases
from oracle.harness import Oracle
from oracle.spec import Case, KstreamBuilder

CASES = int(os.environ.get("KSTREAM_ORACLE_DESCRIBE_CASES", "300"))


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
    derandomize=True,
    database=None,
    deadline=None,
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


def test_describe_difference_names_the_first_line() -> None:
    diff = describe_difference("Topologies:\n a\n b\n", "Topologies:\n a\n c\n")
    assert diff.splitlines()[0] == "line 3: kstream ' b', Kafka Streams ' c'"
    assert describe_difference("x\n", "x\n") == ""
