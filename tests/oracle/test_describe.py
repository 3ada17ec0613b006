"""The same names as Kafka Streams: `topology.describe()` must print Kafka's text.

For each generated spec (tests/oracle/generate.py) the harness answers with Kafka Streams'
`topology.describe().toString()`; kstream's `describe()` of the same spec must be equal
character for character: sub-topologies, node names and their order, stores, internal topic
names. A failure shows the first line that differs and a diff of the two texts.

Shapes whose nodes or stores differ because kstream's implementation differs are not
compared (`differs_by_design` names them); everything else must match:

- a stream-stream join is one join processor behind two side taggers in kstream; Kafka's is
  a WINDOWED store processor per side, JOINTHIS/JOINOTHER (or OUTERTHIS/OUTEROTHER) and a
  MERGE, so the nodes (and the names they take from the counter) differ;
- Kafka numbers a global store's part among the sub-topologies, in the order their nodes were
  added (a sub-topology added after a global table gets the next id but one); kstream's
  sub-topology ids are its task ids, numbered without gaps, and global stores come last. Cases
  with a global table and more than one sub-topology are not compared;
- a windowed aggregation keeps its stream time in a second store, `<store>-stream-time`, and
  a table-table join keeps its result timestamps in `<merge>-timestamps-store`: Kafka has
  neither store.
"""

from __future__ import annotations

import difflib
import os

from hypothesis import HealthCheck, assume, given, settings

from oracle.generate import cases
from oracle.harness import Oracle
from oracle.spec import Case, KstreamBuilder

CASES = int(os.environ.get("KSTREAM_ORACLE_DESCRIBE_CASES", "300"))


def differs_by_design(case: Case) -> str | None:
    """Why kstream's description of `case` cannot be Kafka's (see the module docstring), or
    None when it must be."""
    kinds = {n["id"]: n["op"] for n in case.nodes}
    tables = {"table", "toTable", "count", "reduce", "aggregate"}
    for n in case.nodes:
        if "window" in n:
            return "stream-stream join"
        if n["op"] == "windowedBy":
            return "windowed aggregation"
        joins = ("join", "leftJoin", "outerJoin")
        if n["op"] in joins and "window" not in n and _is_table(case, n["in"][0], kinds, tables):
            return "table-table join"
    has_global = any(n["op"] == "globalTable" for n in case.nodes)
    if has_global and len(KstreamBuilder().build(case).build().describe().subtopologies) > 1:
        return "global table beside several sub-topologies"
    return None


def _is_table(case: Case, nid: int, kinds: dict[int, str], tables: set[str]) -> bool:
    """Whether node `nid` gives a table (a source table, or a table operator's result)."""
    node = case.nodes[nid]
    if kinds[nid] in tables:
        return True
    if kinds[nid] in ("filter", "filterNot", "mapValues"):
        return _is_table(case, node["in"][0], kinds, tables)
    if kinds[nid] in ("join", "leftJoin", "outerJoin") and "window" not in node:
        return _is_table(case, node["in"][0], kinds, tables) and _is_table(
            case, node["in"][1], kinds, tables
        )
    return False


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
    assume(differs_by_design(case) is None)
    theirs = oracle.ask(case)["describe"]
    diff = describe_difference(kstream_description(case), theirs)
    assert not diff, "\n".join(
        ["kstream's describe() differs from Kafka Streams':", diff, "case:", case.pretty()]
    )


def test_describe_difference_names_the_first_line() -> None:
    diff = describe_difference("Topologies:\n a\n b\n", "Topologies:\n a\n c\n")
    assert diff.splitlines()[0] == "line 3: kstream ' b', Kafka Streams ' c'"
    assert describe_difference("x\n", "x\n") == ""
