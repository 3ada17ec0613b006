"""The join-semantics tables of Kafka's developer guide, row by row.

Source: `docs/streams/developer-guide/dsl-api.html`, section "Joining": "Semantics of
stream-stream joins", "Semantics of table-table equi-joins" and "Semantics of stream-table
joins". Every record has the same key, records arrive in timestamp order and "null" is a
record with a None value (a delete for a table). Each result is the pair passed to the
joiner, here emitted as `[left, right]`, at Kafka's result timestamp; a None result is a
table tombstone.

The guide's stream-stream table assumes a 15 s window and 5 s grace and shows each
null-padded result at the row where stream time reaches `ts + 15 s + 5 s`. Kafka's processor
closes a window only once stream time has *passed* that instant (`ts + after + grace <
stream time`), so with exactly 5 s of grace those results come one row later; with 1 ms less
grace they come at the guide's rows. Both are asserted.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.testing.driver import TopologyTestDriver

SECOND = 1000
Row = tuple[int, str, Any]  # (timestamp in seconds, "L" or "R", value)
Result = tuple[Any, int]  # (joiner arguments or None for a tombstone, timestamp in seconds)


def pair(left: Any, right: Any) -> list[Any]:
    return [left, right]


def run_rows(b: StreamBuilder, rows: list[Row]) -> tuple[dict[int, list[Result]], dict[str, int]]:
    """Pipe the rows in order; the results each row caused, keyed by the row's timestamp."""
    got: dict[int, list[Result]] = {}
    with TopologyTestDriver(b) as d:
        topics = {side: d.input_topic(side, "string", "string") for side in ("L", "R")}
        out = d.output_topic("out", "string", "json")
        for ts, side, value in rows:
            topics[side].pipe("k", value, timestamp=ts * SECOND)
            results = [(r.value, r.timestamp // SECOND) for r in out.read_records()]
            if results:
                got[ts] = results
        return got, d.dropped_records()


STREAM_STREAM_ROWS: list[Row] = [
    (1, "L", None),
    (2, "R", None),
    (3, "L", "A"),
    (4, "R", "a"),
    (5, "L", "B"),
    (6, "R", "b"),
    (7, "L", None),
    (8, "R", None),
    (9, "L", "C"),
    (10, "R", "c"),
    (11, "R", None),
    (12, "L", None),
    (13, "R", None),
    (14, "R", "d"),
    (15, "L", "D"),
    (40, "L", "E"),
    (60, "L", "F"),
    (80, "R", "f"),
    (100, "L", "G"),
]

# Rows 4 to 15: the same in all three joins.
JOINED: dict[int, list[Result]] = {
    4: [(["A", "a"], 4)],
    5: [(["B", "a"], 5)],
    6: [(["A", "b"], 6), (["B", "b"], 6)],
    9: [(["C", "a"], 9), (["C", "b"], 9)],
    10: [(["A", "c"], 10), (["B", "c"], 10), (["C", "c"], 10)],
    14: [(["A", "d"], 14), (["B", "d"], 14), (["C", "d"], 14)],
    15: [(["D", "a"], 15), (["D", "b"], 15), (["D", "c"], 15), (["D", "d"], 15)],
}

E: Result = (["E", None], 40)
F: Result = (["F", None], 60)
F_RIGHT: Result = ([None, "f"], 80)


@pytest.mark.parametrize(
    ("kind", "grace_ms", "unmatched"),
    [
        pytest.param("inner", 5000, {}, id="inner"),
        pytest.param("left", 4999, {60: [E], 80: [F]}, id="left, grace 4999 ms: the guide's rows"),
        pytest.param("left", 5000, {80: [E], 100: [F]}, id="left, grace 5 s: one row later"),
        pytest.param(
            "outer",
            4999,
            {60: [E], 80: [F], 100: [F_RIGHT]},
            id="outer, grace 4999 ms: the guide's rows",
        ),
        pytest.param(
            "outer",
            5000,
            {80: [E], 100: [F]},  # [null, f] would follow once stream time passes 100 s
            id="outer, grace 5 s: one row later",
        ),
    ],
)
def test_stream_stream_semantics_table(
    kind: str, grace_ms: int, unmatched: dict[int, list[Result]]
) -> None:
    """Developer guide, "Semantics of stream-stream joins" (15 s window, 5 s grace)."""
    b = StreamBuilder()
    left = b.stream("L", "string", "string")
    right = b.stream("R", "string", "string")
    method = "join" if kind == "inner" else f"{kind}_join"
    window = JoinWindows.of(15 * SECOND, grace=grace_ms)
    getattr(left, method)(right, pair, window=window).to("out", "string", "json")
    expected = {**unmatched, **JOINED}
    got, dropped = run_rows(b, STREAM_STREAM_ROWS)
    assert got == dict(sorted(expected.items()))
    assert dropped == {"null_value": 7}  # None values never trigger a join


TABLE_TABLE_ROWS: list[Row] = [
    (1, "L", None),
    (2, "R", None),
    (3, "L", "A"),
    (4, "R", "a"),
    (5, "L", "B"),
    (6, "R", "b"),
    (7, "L", None),
    (8, "R", None),
    (9, "L", "C"),
    (10, "R", "c"),
    (11, "R", None),
    (12, "L", None),
    (13, "R", None),
    (14, "R", "d"),
    (15, "L", "D"),
]

TABLE_TABLE_EXPECTED: dict[str, dict[int, list[Result]]] = {
    "inner": {
        4: [(["A", "a"], 4)],
        5: [(["B", "a"], 5)],
        6: [(["B", "b"], 6)],
        7: [(None, 7)],
        10: [(["C", "c"], 10)],
        11: [(None, 11)],
        15: [(["D", "d"], 15)],
    },
    "left": {
        3: [(["A", None], 3)],
        4: [(["A", "a"], 4)],
        5: [(["B", "a"], 5)],
        6: [(["B", "b"], 6)],
        7: [(None, 7)],
        9: [(["C", None], 9)],
        10: [(["C", "c"], 10)],
        11: [(["C", None], 11)],
        12: [(None, 12)],
        15: [(["D", "d"], 15)],
    },
    "outer": {
        3: [(["A", None], 3)],
        4: [(["A", "a"], 4)],
        5: [(["B", "a"], 5)],
        6: [(["B", "b"], 6)],
        7: [([None, "b"], 7)],
        8: [(None, 8)],
        9: [(["C", None], 9)],
        10: [(["C", "c"], 10)],
        11: [(["C", None], 11)],
        12: [(None, 12)],
        14: [([None, "d"], 14)],
        15: [(["D", "d"], 15)],
    },
}


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_table_table_semantics_table(kind: str) -> None:
    """Developer guide, "Semantics of table-table equi-joins"."""
    b = StreamBuilder()
    left = b.table("L", "string", "string")
    right = b.table("R", "string", "string")
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(left, method)(right, pair).to_stream().to("out", "string", "json")
    assert run_rows(b, TABLE_TABLE_ROWS) == (TABLE_TABLE_EXPECTED[kind], {})


STREAM_TABLE_EXPECTED: dict[str, dict[int, list[Result]]] = {
    "inner": {5: [(["B", "a"], 5)], 15: [(["D", "d"], 15)]},
    "left": {
        3: [(["A", None], 3)],
        5: [(["B", "a"], 5)],
        9: [(["C", None], 9)],
        15: [(["D", "d"], 15)],
    },
}


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_stream_table_semantics_table(kind: str) -> None:
    """Developer guide, "Semantics of stream-table joins" (stream on the left)."""
    b = StreamBuilder()
    left = b.stream("L", "string", "string")
    right = b.table("R", "string", "string")
    (left.join if kind == "inner" else left.left_join)(right, pair).to("out", "string", "json")
    # the three None values of the stream are dropped; table deletes are not drops
    assert run_rows(b, TABLE_TABLE_ROWS) == (STREAM_TABLE_EXPECTED[kind], {"null_value": 3})
