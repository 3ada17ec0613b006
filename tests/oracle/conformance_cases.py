"""The hand-written conformance cases (tests/conformance) as oracle specs.

Each case there is a port of a Kafka Streams test with an expected answer written by hand.
Here the same topology and the same input become a spec (tests/oracle/spec.py), so Kafka
Streams itself judges kstream's answer to it. The inputs are read from the conformance
modules, not copied: a case changed there changes here. Functions become the library's
nearest ones (a joiner renders "left|right" where Kafka's test renders "left+right"; both
sides of the oracle run the same one, so that changes nothing about what is compared), and
keys become text (the spec's keys are strings; Kafka's tests use Integer keys, only
compared for equality in joins).

`CASES` holds one `pytest.param` per conformance case it can express, its id naming the
conformance test and the Kafka test it mirrors; `builders` below build the specs, one function
per shape of topology.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from oracle.spec import Case, Node, Row

# the conformance modules import their shared `join_harness` as a top-level module, as pytest
# does when it collects them (their directory has no __init__.py)
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
if str(CONFORMANCE) not in sys.path:
    sys.path.insert(0, str(CONFORMANCE))

import join_harness as jh  # noqa: E402
import test_aggregations as aggregations  # noqa: E402
import test_emit_final as emit_final  # noqa: E402
import test_join_semantics_tables as semantics  # noqa: E402
import test_joins_stream_stream as ss  # noqa: E402
import test_joins_stream_table as st  # noqa: E402
import test_joins_table_table as tt  # noqa: E402
import test_session_windows as sessions  # noqa: E402
import test_sliding_windows as sliding  # noqa: E402
import test_time_windows as time_windows  # noqa: E402

from kstream.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows  # noqa: E402

S, L = "string", "long"
JOIN_OPS = {"inner": "join", "left": "leftJoin", "outer": "outerJoin"}


def node(nid: int, op: str, vt: str, *inputs: int, **fields: Any) -> Node:
    n: Node = {"id": nid, "op": op, "vt": vt, **fields}
    if inputs:
        n["in"] = list(inputs)
    return n


def rows(events: Iterable[Sequence[Any]], base: int = 0) -> list[Row]:
    """Conformance events `(topic, key, value, ts)` as spec rows: keys as text."""
    return [[t, None if k is None else str(k), v, ts + base] for t, k, v, ts in events]


def step_rows(steps: Sequence[tuple[list[Any], Any]]) -> list[Row]:
    """The records of a conformance case's steps, in order (the expected outputs are not
    needed: the oracle gives them)."""
    return rows(e for events, _ in steps for e in events)


def join_window(w: JoinWindows) -> dict[str, int]:
    return {"before": w.before_ms, "after": w.after_ms, "grace": w.grace_ms}


def windows_spec(w: TimeWindows | SlidingWindows | SessionWindows) -> dict[str, Any]:
    if isinstance(w, TimeWindows):
        return {"type": "time", "size": w.size_ms, "advance": w.advance_ms, "grace": w.grace_ms}
    if isinstance(w, SlidingWindows):
        return {"type": "sliding", "size": w.max_difference_ms, "grace": w.grace_ms}
    return {"type": "session", "gap": w.gap_ms, "grace": w.grace_ms}


def param(case: Case, module: str, test_id: str) -> Any:
    """A case's pytest param, its id the conformance module and the Kafka test it ports."""
    return pytest.param(case, id=f"{module}::{test_id}")


# --- builders: one per shape of topology -------------------------------------------------------


def stream_stream(
    kind: str,
    window: JoinWindows,
    left: str = jh.LEFT,
    right: str = jh.RIGHT,
    right_vt: str = S,
    out: str = jh.OUTPUT,
) -> list[Node]:
    """`left.<kind>Join(right, joiner, window)` to `out`."""
    return [
        node(0, "stream", S, topic=left),
        node(1, "stream", right_vt, topic=right),
        node(2, JOIN_OPS[kind], S, 0, 1, fn="pair", window=join_window(window)),
        node(3, "to", S, 2, topic=out),
    ]


def stream_table(kind: str, stream: str, table: str, out: str) -> list[Node]:
    return [
        node(0, "stream", S, topic=stream),
        node(1, "table", S, topic=table, store="table", store_kind="kv"),
        node(2, JOIN_OPS[kind], S, 0, 1, fn="pair"),
        node(3, "to", S, 2, topic=out),
    ]


def stream_global(kind: str) -> list[Node]:
    """The global-join tests' topology: the table key is the value's second token."""
    return [
        node(0, "stream", S, topic=st.STREAM),
        node(1, "globalTable", S, topic=st.GLOBAL, store="global", store_kind="kv"),
        node(2, JOIN_OPS[kind], S, 0, 1, fn="pair", selector="second_token"),
        node(3, "to", S, 2, topic=jh.OUTPUT),
    ]


def table_table(kinds: Sequence[str], left: str, right: str, out: str) -> list[Node]:
    """`left ⋈ right` (then `⋈ right` again for each further kind), `toStream()` to `out`."""
    nodes = [
        node(0, "table", S, topic=left, store="left", store_kind="kv"),
        node(1, "table", S, topic=right, store="right", store_kind="kv"),
    ]
    prev = 0
    for kind in kinds:
        nid = len(nodes)
        nodes.append(node(nid, JOIN_OPS[kind], S, prev, 1, fn="pair"))
        prev = nid
    nodes.append(node(len(nodes), "toStream", S, prev))
    nodes.append(node(len(nodes), "to", S, len(nodes) - 1, topic=out))
    return nodes


def windowed(
    windows: dict[str, Any], emit: str, op: str, retention: int | None = None
) -> list[Node]:
    """`stream("in").groupByKey().windowedBy(windows)` and a count, `plus_text` reduce or
    `plus_text_agg` aggregate (Kafka's MockReducer/MockAggregator shapes), its windowed key
    rendered "key@start/end", to "out"."""
    kind = "session" if windows["type"] == "session" else "window"
    agg: dict[str, Any] = {"store": "windows", "store_kind": kind}
    if retention is not None:
        agg["retention"] = retention
    vt = L if op == "count" else S
    if op == "reduce":
        agg["fn"] = "plus_text"
    elif op == "aggregate":
        agg["fn"] = "plus_text_agg"
        if kind == "session":
            agg["merger"] = "merge_text"
    return [
        node(0, "stream", S, topic="in"),
        node(1, "groupByKey", S, 0),
        node(2, "windowedBy", S, 1, windows=windows, emit=emit),
        node(3, op, vt, 2, **agg),
        node(4, "toStream", vt, 3, windowed=True),
        node(5, "to", vt, 4, topic="out"),
    ]


def keyed_events(events: Iterable[tuple[Any, Any, int]], topic: str = "in") -> list[Row]:
    """`(key, value, ts)` events of one topic as rows."""
    return rows((topic, k, v, ts) for k, v, ts in events)


# --- the cases -----------------------------------------------------------------------------------


def _stream_stream_cases() -> list[Any]:
    mod = "test_joins_stream_stream"
    out = []
    for p in ss.INNER_CASES:
        window, steps = p.values[0], p.values[1]
        out.append(param(Case(stream_stream("inner", window), step_rows(steps)), mod, p.id))
    for p in ss.LEFT_CASES:
        window, steps = p.values[0], p.values[1]
        out.append(param(Case(stream_stream("left", window), step_rows(steps)), mod, p.id))
    for p in ss.OUTER_CASES:
        window, steps = p.values
        nodes = stream_stream("outer", window, right_vt=L)
        out.append(param(Case(nodes, step_rows(steps)), mod, p.id))
    long_grace = stream_stream("outer", JoinWindows.of(100, grace=24 * 3600 * 1000))
    out.append(
        param(
            Case(long_grace, step_rows(ss.all_at_zero_steps())),
            mod,
            "KStreamKStreamJoinTest.testOuterJoin[grace 24 h]",
        )
    )
    skipped = (
        jh.left(0, None, 0) + jh.left(None, "A", 0) + jh.right(None, "a", 0) + jh.right(0, None, 0)
    )
    skipped += jh.left(0, "A0", 1) + jh.right(0, "a0", 1)
    out.append(
        param(
            Case(stream_stream("inner", JoinWindows.of(100)), rows(skipped)),
            mod,
            "KStreamKStreamJoinTest.shouldLogAndMeterOnSkippedRecordsWithNullValue",
        )
    )
    # the integration tests: one key, timestamps from a base, plain and re-keyed (noop map /
    # flatMap, which make both sides go through repartition topics)
    window = ss.INTEGRATION_WINDOW
    events = rows(jh.INTEGRATION_INPUT_IN_ORDER, jh.BASE_TS)
    for kind in ("inner", "left", "outer"):
        name = f"StreamStreamJoinIntegrationTest.test{kind.title()}"
        nodes = stream_stream(kind, window, jh.L, jh.R, out="outputTopic")
        out.append(param(Case(nodes, events), mod, name))
        nodes = [
            node(0, "stream", S, topic=jh.L),
            node(1, "stream", S, topic=jh.R),
            node(2, "map", S, 0, fn="identity"),
            node(3, "flatMap", S, 1, fn="single"),
            node(4, JOIN_OPS[kind], S, 2, 3, fn="pair", window=join_window(window)),
            node(5, "to", S, 4, topic="outputTopic"),
        ]
        out.append(param(Case(nodes, events), mod, name + "[Repartitioned]"))
    nodes = [
        *stream_stream("inner", window, jh.L, jh.R, out="outputTopic")[:3],
        node(3, "join", S, 2, 1, fn="pair", window=join_window(window)),
        node(4, "to", S, 3, topic="outputTopic"),
    ]
    out.append(param(Case(nodes, events), mod, "StreamStreamJoinIntegrationTest.testMultiInner"))
    self_join = [
        node(0, "stream", S, topic=jh.L),
        node(1, "join", S, 0, 0, fn="pair", window=join_window(window)),
        node(2, "to", S, 1, topic="outputTopic"),
    ]
    out.append(
        param(
            Case(self_join, rows(jh.SELF_JOIN_INPUT, jh.BASE_TS)),
            mod,
            "StreamStreamJoinIntegrationTest.testSelfJoin",
        )
    )
    self_join_small = [
        node(0, "stream", S, topic=jh.LEFT),
        node(1, "join", S, 0, 0, fn="pair", window=join_window(JoinWindows.of(100))),
        node(2, "to", S, 1, topic=jh.OUTPUT),
    ]
    events = rows(jh.left(0, "A", 1) + jh.left(0, "B", 2))
    out.append(param(Case(self_join_small, events), mod, "KStreamKStreamSelfJoinTest"))
    # testShouldForwardCurrentHeaders: headers on every record
    outer = stream_stream("outer", JoinWindows.of(100, grace=10), right_vt=L)
    headed = [
        [jh.LEFT, "0", "A0", 0, [["h", "\x01"]]],
        [jh.RIGHT, "1", 10, 0, [["h", "\x02"]]],
        [jh.RIGHT, "3", 100, 211, [["h", "\x03"]]],
        [jh.LEFT, "2", "A2", 200, [["h", "\x04"]]],
        [jh.RIGHT, "2", 12, 200, [["h", "\x05"]]],
    ]
    out.append(
        param(
            Case(outer, headed), mod, "KStreamKStreamOuterJoinTest.testShouldForwardCurrentHeaders"
        )
    )
    for window, name in (
        (JoinWindows.of(0), "zero-window-no-grace"),
        (JoinWindows.of(0, grace=1), "zero-window-1ms-grace"),
    ):
        events = rows(jh.left(0, "A0", 5) + jh.right(0, "a0", 5))
        out.append(param(Case(stream_stream("inner", window), events), mod, name))
    return out


def _stream_table_cases() -> list[Any]:
    mod = "test_joins_stream_table"
    out = []
    for kind, cases in (("inner", st.INNER_TABLE_CASES), ("left", st.LEFT_TABLE_CASES)):
        for p in cases:
            nodes = stream_table(kind, st.STREAM, st.TABLE, jh.OUTPUT)
            out.append(param(Case(nodes, step_rows(p.values[0])), mod, p.id))
    for kind in ("inner", "left"):
        nodes = stream_table(kind, st.STREAM, st.TABLE, jh.OUTPUT)
        null_key = rows([(st.TABLE, 0, "Y0", 0), (st.STREAM, None, "A", 0)])
        out.append(
            param(
                Case(nodes, null_key),
                mod,
                f"KStreamKTableJoinTest.shouldLogAndMeterWhenSkippingNullLeftKey[{kind}]",
            )
        )
        null_value = rows([(st.TABLE, 1, "Y1", 0), (st.STREAM, 1, None, 0)])
        out.append(
            param(
                Case(nodes, null_value),
                mod,
                f"KStreamKTableJoinTest.shouldLogAndMeterWhenSkippingNullLeftValue[{kind}]",
            )
        )
        nodes = stream_table(kind, jh.L, jh.R, "outputTopic")
        events = rows(jh.INTEGRATION_INPUT, jh.BASE_TS)
        name = f"StreamTableJoinIntegrationTest.test{kind.title()}"
        out.append(param(Case(nodes, events), mod, name))
    for kind in ("inner", "left"):
        for p in st.global_cases(kind):
            out.append(param(Case(stream_global(kind), step_rows(p.values[0])), mod, p.id))
    events = rows([(st.STREAM, None, "X", 5), (st.STREAM, 7, "Y", 6)])
    out.append(
        param(
            Case(stream_global("left"), events),
            mod,
            "KStreamGlobalKTableLeftJoinTest.null-key-selector-finds-nothing",
        )
    )
    return out


def _table_table_cases() -> list[Any]:
    mod = "test_joins_table_table"
    out = []
    inputs = [e for group in tt.do_test_join_inputs() for e in group]
    for kind, test in (("inner", "Inner"), ("left", "Left"), ("outer", "Outer")):
        nodes = table_table([kind], jh.LEFT, jh.RIGHT, jh.OUTPUT)
        out.append(param(Case(nodes, rows(inputs)), mod, f"KTableKTable{test}JoinTest.testJoin"))
        nodes = table_table([kind], jh.L, jh.R, "outputTopic")
        events = rows(jh.INTEGRATION_INPUT, jh.BASE_TS)
        out.append(param(Case(nodes, events), mod, f"TableTableJoinIntegrationTest.test{test}"))
    for first, second in tt.MULTI_JOIN:
        nodes = table_table([first, second], jh.L, jh.R, "outputTopic")
        events = rows(jh.INTEGRATION_INPUT_IN_ORDER, jh.BASE_TS)
        name = f"TableTableJoinIntegrationTest.test{first.title()}{second.title()}"
        out.append(param(Case(nodes, events), mod, name))
    filtered = [
        node(0, "table", S, topic=jh.LEFT, store="left", store_kind="kv"),
        node(1, "table", S, topic=jh.RIGHT, store="right", store_kind="kv"),
        node(2, "filterNot", S, 1, fn="starts_with_skip"),
        node(3, "join", S, 0, 2, fn="pair"),
        node(4, "toStream", S, 3),
        node(5, "to", S, 4, topic=jh.OUTPUT),
    ]
    events = rows(
        [
            tt.t2(0, "Y0", 50),
            tt.t1(0, "X0", 10),
            tt.t2(0, "skip", 70),
            tt.t1(0, "X1", 20),
            tt.t2(0, "Y1", 15),
        ]
    )
    out.append(param(Case(filtered, events), mod, "filtered-table-join-timestamp"))
    chained = [
        node(0, "table", S, topic=jh.LEFT, store="t1", store_kind="kv"),
        node(1, "table", S, topic=jh.RIGHT, store="t2", store_kind="kv"),
        node(2, "table", S, topic="topic3", store="t3", store_kind="kv"),
        node(3, "join", S, 0, 1, fn="pair"),
        node(4, "leftJoin", S, 3, 2, fn="pair"),
        node(5, "toStream", S, 4),
        node(6, "to", S, 5, topic=jh.OUTPUT),
    ]
    events = rows(
        [
            tt.t1(0, "A", 30),
            tt.t2(0, "B", 10),
            ("topic3", 0, "C", 20),
            tt.t2(0, "BB", 40),
            ("topic3", 0, "CC", 35),
            tt.t1(0, None, 5),
        ]
    )
    out.append(param(Case(chained, events), mod, "chained-table-joins-timestamp"))
    return out


def _semantics_cases() -> list[Any]:
    """The developer guide's join-semantics tables: every record of key "k"."""
    mod = "test_join_semantics_tables"
    second = semantics.SECOND
    out = []

    def guide_rows(table: Sequence[tuple[int, str, Any]]) -> list[Row]:
        return [[side, "k", v, ts * second] for ts, side, v in table]

    for kind, grace in (("inner", 5000), ("left", 4999), ("left", 5000), ("outer", 4999)):
        nodes = stream_stream(kind, JoinWindows.of(15 * second, grace=grace), "L", "R", out="out")
        name = f"stream-stream-semantics[{kind}, grace {grace} ms]"
        out.append(param(Case(nodes, guide_rows(semantics.STREAM_STREAM_ROWS)), mod, name))
    nodes = stream_stream("outer", JoinWindows.of(15 * second, grace=5000), "L", "R", out="out")
    out.append(
        param(
            Case(nodes, guide_rows(semantics.STREAM_STREAM_ROWS)),
            mod,
            "stream-stream-semantics[outer, grace 5000 ms]",
        )
    )
    for kind in ("inner", "left", "outer"):
        nodes = table_table([kind], "L", "R", "out")
        name = f"table-table-semantics[{kind}]"
        out.append(param(Case(nodes, guide_rows(semantics.TABLE_TABLE_ROWS)), mod, name))
    for kind in ("inner", "left"):
        nodes = stream_table(kind, "L", "R", "out")
        name = f"stream-table-semantics[{kind}]"
        out.append(param(Case(nodes, guide_rows(semantics.TABLE_TABLE_ROWS)), mod, name))
    return out


# Known difference (docs/differences.md, "Output and emission"; generate.py does the same):
# Kafka reads the windows a record closes after aggregating it, from a store that may have
# expired them by then (a record jumping ahead), and loses their final results; kstream emits
# them. An emit-final case's store keeps its windows longer than any case's timestamps.
LONG_RETENTION = 24 * 3600 * 1000


def _retention(emit: str) -> int | None:
    return LONG_RETENTION if emit == "final" else None


def _windowed_cases() -> list[Any]:
    out = []
    for p in sessions.CASES:
        events, windows, emit = p.values[:3]
        nodes = windowed(windows_spec(windows), emit, "count", retention=3 * sessions.GAP)
        out.append(param(Case(nodes, keyed_events(events)), "test_session_windows", p.id))
    guide = keyed_events(sessions.GUIDE_EVENTS)
    gap = {"type": "session", "gap": 5 * sessions.MINUTE, "grace": 0}
    nodes = windowed(gap, "update", "count", retention=60 * sessions.MINUTE)
    out.append(param(Case(nodes, guide), "test_session_windows", "developer-guide-sessions"))
    nodes = windowed(gap, "update", "count")
    out.append(
        param(Case(nodes, guide), "test_session_windows", "developer-guide-sessions[retention]")
    )
    for p in sliding.CASES:
        events, windows, emit, op = p.values[:4]
        agg = "aggregate" if op == "concat" else "reduce"
        nodes = windowed(windows_spec(windows), emit, agg, _retention(emit))
        out.append(param(Case(nodes, keyed_events(events)), "test_sliding_windows", p.id))
    for p in emit_final.CASES:
        events, windows = p.values[:2]
        for emit in ("update", "final"):
            nodes = windowed(windows_spec(windows), emit, "count", _retention(emit))
            case_id = f"{p.id}[{emit}]"
            out.append(param(Case(nodes, keyed_events(events)), "test_emit_final", case_id))
    return out


def chain(source: Node, *ops: tuple[str, str, dict[str, Any]], out: str = "out") -> list[Node]:
    """A source, then each `(op, vt, fields)` applied to the one before, then a sink."""
    nodes = [source]
    for op, vt, fields in ops:
        nodes.append(node(len(nodes), op, vt, len(nodes) - 1, **fields))
    nodes.append(node(len(nodes), "to", nodes[-1]["vt"], len(nodes) - 1, topic=out))
    return nodes


def _stream(vt: str = S, topic: str = "topic") -> Node:
    return node(0, "stream", vt, topic=topic)


def _table(vt: str = S, topic: str = "topic1") -> Node:
    return node(0, "table", vt, topic=topic, store="source", store_kind="kv")


def _to_stream(vt: str) -> tuple[str, str, dict[str, Any]]:
    return ("toStream", vt, {})


def _stateless_cases() -> list[Any]:
    """test_repartition_and_stateless: the Kafka tests of single operators."""
    mod = "test_repartition_and_stateless"
    out = []

    def add(name: str, nodes: list[Node], events: Iterable[Sequence[Any]]) -> None:
        out.append(param(Case(nodes, rows(events)), mod, name))

    def numbered(keys: Iterable[int]) -> list[tuple[Any, ...]]:
        return [("topic", k, f"V{k}", 100 * i) for i, k in enumerate(keys)]

    for op in ("filter", "filterNot"):
        nodes = chain(_stream(), (op, S, {"fn": "key_multiple_of_3"}))
        add(f"KStreamFilterTest.test{op[0].upper()}{op[1:]}", nodes, numbered(range(1, 8)))
    add(
        "KStreamMapTest.testMap",
        chain(_stream(), ("map", S, {"fn": "swap"})),
        [("topic", k, f"V{k}", 10 - k) for k in range(4)],
    )
    add(
        "KStreamFlatMapTest.testFlatMap",
        chain(_stream(), ("flatMap", S, {"fn": "key_fanout"})),
        numbered([0, 1, 2, 3]),
    )
    add(
        "KStreamFlatMapValuesTest.testFlatMapValues",
        chain(_stream(L), ("flatMapValues", S, {"fn": "v_and_V"})),
        [("topic", k, k, 10 * k) for k in range(4)],
    )
    add(
        "KStreamSelectKeyTest.testSelectKey",
        chain(_stream(), ("selectKey", S, {"fn": "value"})),
        [("topic", None, v, ts) for v, ts in (("ONE", 7), ("TWO", 3), ("THREE", 9))],
    )
    topics = ["topic-1", "topic-2", "topic-3", "topic-4"]
    merged = [node(i, "stream", S, topic=t) for i, t in enumerate(topics)]
    merged += [node(4, "merge", S, 0, 1), node(5, "merge", S, 4, 2), node(6, "merge", S, 5, 3)]
    merged.append(node(7, "to", S, 6, topic="out"))
    piped = [
        ("topic-1", "A", "aa", 1),
        ("topic-2", "B", "bb", 9),
        ("topic-3", "C", "cc", 2),
        ("topic-4", "D", "dd", 8),
        ("topic-4", "E", "ee", 3),
        ("topic-3", "F", "ff", 7),
        ("topic-2", "G", "gg", 4),
        ("topic-1", "H", "hh", 6),
    ]
    add("KStreamImplTest.shouldMergeMultipleStreams", merged, piped)
    branches = [{"fn": f} for f in ("key_even", "key_multiple_of_3", "key_multiple_of_5")]
    split = [
        _stream(),
        node(1, "split", S, 0, named=True, branches=branches, default=None),
        *[node(2 + i, "branch", S, 1, index=i) for i in range(3)],
        *[node(5 + i, "to", S, 2 + i, topic=f"x{n}") for i, n in enumerate((2, 3, 5))],
    ]
    keys = [-1, 0, 1, 2, 3, 4, 5, 6, 7]
    add(
        "KStreamSplitTest.testKStreamSplit",
        split,
        [("topic", k, f"V{k}", i) for i, k in enumerate(keys)],
    )
    add(
        "KStreamImplTest.shouldSendDataThroughRepartitionTopicUsingRepartitioned",
        chain(_stream(), ("repartition", S, {})),
        [
            ("topic", k, v, ts)
            for k, v, ts in (
                ("a", "1", 10),
                (None, "2", 11),
                ("b", "3", 5),
                (None, "4", 12),
                ("a", "5", 13),
            )
        ],
    )
    add(
        "KTableSourceTest.testKTable",
        chain(_table(L), _to_stream(L)),
        [
            ("topic1", k, v, ts)
            for k, v, ts in (
                ("A", 1, 10),
                ("B", 2, 11),
                ("C", 3, 12),
                ("D", 4, 13),
                ("A", None, 14),
                ("B", None, 15),
            )
        ],
    )
    add(
        "KTableSourceTest.kTableShouldLogAndMeterOnSkippedRecords",
        chain(_table(), _to_stream(S)),
        [("topic1", None, "value", 3), ("topic1", "k", "v", 4)],
    )
    add(
        "KTableMapValuesTest.testKTable",
        chain(_table(), ("mapValues", L, {"fn": "digit"}), _to_stream(L)),
        [
            ("topic1", k, v, ts)
            for k, v, ts in (("A", "1", 5), ("B", "2", 25), ("C", "3", 20), ("D", "4", 10))
        ],
    )
    regroup = chain(
        _table(),
        ("filter", S, {"fn": "is_accept"}),
        ("groupBy", S, {"fn": "identity"}),
        (
            "reduce",
            S,
            {"fn": "plus_text", "subtractor": "minus_text", "store": "r", "store_kind": "kv"},
        ),
        _to_stream(S),
    )
    events = [
        ("A", "reject", 5),
        ("B", "reject", 10),
        ("C", "reject", 20),
        ("A", "accept", 30),
        ("A", "reject", 40),
    ]
    add(
        "KTableFilterTest.shouldSkipNullToRepartitionWithoutMaterialization",
        regroup,
        [("topic1", k, v, ts) for k, v, ts in events],
    )
    add(
        "dsl-api.html toTable",
        chain(_stream(), ("toTable", S, {"store": "t", "store_kind": "kv"}), _to_stream(S)),
        [
            ("topic", k, v, ts)
            for k, v, ts in (
                ("A", "1", 10),
                ("B", "2", 4),
                ("A", "3", 7),
                ("A", None, 12),
                (None, "x", 13),
            )
        ],
    )
    for kind, name in (
        (
            "left",
            "RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamTableJoin[mapValues]",
        ),
        (
            "inner",
            "RelaxedNullKeyRequirementJoinTest.testDropNullKeyRecordsForRepartitionNodesWithNoRelaxedJoinDownstream",
        ),
    ):
        nodes = [
            node(0, "table", S, topic="table", store="t", store_kind="kv"),
            node(1, "stream", S, topic="topic"),
            node(2, "repartition", S, 1),
            node(3, "mapValues", S, 2, fn="upper"),
            node(4, JOIN_OPS[kind], S, 3, 0, fn="pair"),
            node(5, "to", S, 4, topic="out"),
        ]
        add(name, nodes, [("table", "a", "T", 0), ("topic", "a", "x", 3), ("topic", None, "y", 4)])
    table = _table(L)
    filters = [
        table,
        node(1, "filter", L, 0, fn="even"),
        node(2, "filterNot", L, 0, fn="even"),
        node(3, "toStream", L, 1),
        node(4, "toStream", L, 2),
        node(5, "to", L, 3, topic="even"),
        node(6, "to", L, 4, topic="odd"),
    ]
    longs: list[tuple[str, int | None, int]] = [
        ("A", 1, 10),
        ("B", 2, 5),
        ("C", 3, 8),
        ("D", 4, 14),
        ("A", None, 18),
        ("B", None, 15),
    ]
    add("KTableFilterTest.testKTable", filters, [("topic1", k, v, ts) for k, v, ts in longs])
    return out


def _aggregation_cases() -> list[Any]:
    """test_aggregations and test_grouped_table: grouped streams and regrouped tables."""
    out = []
    mod = "test_aggregations"
    data = keyed_events(aggregations.PROCESS_DATA, "topic")
    store = {"store": "agg", "store_kind": "kv"}
    grouped: tuple[str, str, dict[str, Any]] = ("groupByKey", S, {})
    for op, vt, fields, name in (
        ("reduce", S, {"fn": "plus_text"}, "shouldReduceAndMaterializeResults"),
        ("aggregate", S, {"fn": "plus_text_agg"}, "shouldAggregateAndMaterializeResults"),
        ("count", L, {}, "shouldCountAndMaterializeResults"),
    ):
        nodes = chain(_stream(), grouped, (op, vt, {**fields, **store}), _to_stream(vt))
        out.append(param(Case(nodes, data), mod, f"KGroupedStreamImplTest.{name}"))
    counted = chain(_stream(), grouped, ("count", L, store), _to_stream(L))
    skips = [("1", "A", 5), (None, "B", 6), ("1", None, 7), ("1", "C", 4)]
    out.append(
        param(
            Case(counted, keyed_events(skips, "topic")),
            mod,
            "KGroupedStreamImplTest.shouldLogAndMeasureSkipsInAggregate",
        )
    )
    words = chain(
        _stream(topic="words"),
        ("groupBy", S, {"fn": "head_unless_skip"}),
        ("count", L, store),
        _to_stream(L),
    )
    events = [("apple", 20), ("avocado", 11), ("skip", 30), ("banana", 7), ("acorn", 25)]
    out.append(
        param(
            Case(words, [["words", None, v, ts] for v, ts in events]),
            mod,
            "dsl-api.html Aggregating: groupBy drops null keys",
        )
    )
    mod = "test_grouped_table"

    def regrouped(mapper: str, agg: tuple[str, str, dict[str, Any]], vt: str = S) -> list[Node]:
        return chain(_table(vt), ("groupBy", vt, {"fn": mapper}), agg, _to_stream(agg[1]))

    text_agg = ("aggregate", S, {"fn": "plus_text_agg", "subtractor": "minus_text_agg", **store})
    basic = [("A", "1", 10), ("B", "2", 15), ("A", "3", 20), ("B", "4", 18), ("C", "5", 5)]
    basic += [("D", "6", 25), ("B", "7", 15), ("C", "8", 10)]
    out.append(
        param(
            Case(regrouped("identity", text_agg), keyed_events(basic, "topic1")),
            mod,
            "KTableAggregateTest.testAggBasic",
        )
    )
    colours = [("A", "green", 10), ("B", "green", 9), ("A", "blue", 12), ("C", "yellow", 15)]
    colours += [("D", "green", 11)]
    out.append(
        param(
            Case(regrouped("value_pair", ("count", L, store)), keyed_events(colours, "topic1")),
            mod,
            "KTableAggregateTest.testCount",
        )
    )
    removal = [("11", "A", 10), ("12", "B", 8), ("11", None, 12), ("12", "C", 6)]
    out.append(
        param(
            Case(regrouped("key_head", text_agg), keyed_events(removal, "topic1")),
            mod,
            "KTableAggregateTest.testRemoveOldBeforeAddNew",
        )
    )
    sums = ("reduce", L, {"fn": "sum", "subtractor": "minus", **store})
    reduced = [("A", 1, 10), ("B", 2, 11), ("A", 2, 30), ("B", 1, 30), ("A", 5, 50), ("B", 6, 20)]
    out.append(
        param(
            Case(regrouped("identity", sums, L), keyed_events(reduced, "topic1")),
            mod,
            "KGroupedTableImplTest.shouldReduce[long values]",
        )
    )
    return out


def _null_key_join_cases() -> list[Any]:
    """test_null_keys_joins: KIP-962's None keys in joins."""
    mod = "test_null_keys_joins"
    window = join_window(JoinWindows.of(60_000, grace=10_000))
    out = []

    def repartitioned(kind: str, right: str = "stream") -> list[Node]:
        nodes = [
            node(0, "stream", S, topic="left"),
            node(1, "repartition", S, 0),
            node(2, "stream", S, topic="right"),
            node(3, "repartition", S, 2),
        ]
        if right == "table":
            nodes.append(node(4, "toTable", S, 3, store="t", store_kind="kv"))
            nodes.append(node(5, JOIN_OPS[kind], S, 1, 4, fn="pair"))
        else:
            nodes.append(node(4, JOIN_OPS[kind], S, 1, 3, fn="pair", window=window))
        nodes.append(node(len(nodes), "to", S, len(nodes) - 1, topic="out"))
        return nodes

    left_only = rows([("left", None, "leftValue", 1)])
    test = "RelaxedNullKeyRequirementJoinTest"
    out.append(
        param(
            Case(repartitioned("left"), left_only), mod, f"{test}.testRelaxedLeftStreamStreamJoin"
        )
    )
    out.append(
        param(
            Case(repartitioned("left", "table"), left_only),
            mod,
            f"{test}.testRelaxedLeftStreamTableJoin",
        )
    )
    both = rows([("right", None, "rightValue", 1), ("left", None, "leftValue", 2)])
    out.append(
        param(Case(repartitioned("outer"), both), mod, f"{test}.testRelaxedOuterStreamStreamJoin")
    )
    global_join = [
        node(0, "stream", S, topic="left"),
        node(1, "repartition", S, 0),
        node(2, "globalTable", S, topic="global", store="g", store_kind="kv"),
        node(3, "leftJoin", S, 1, 2, fn="pair", selector="null_key"),
        node(4, "to", S, 3, topic="out"),
    ]
    out.append(
        param(Case(global_join, left_only), mod, f"{test}.testRelaxedLeftStreamGlobalTableJoin")
    )
    drops: list[tuple[str, list[tuple[str, Any, Any, int]]]] = [
        ("inner", [("left", None, "L", 1), ("right", None, "R", 2)]),
        ("left", [("right", None, "R", 1), ("left", None, "L", 2)]),
        ("outer", [("left", "k", None, 1), ("right", None, None, 2), ("left", None, "L", 3)]),
        ("left", [("left", "k", None, 1), ("left", None, None, 2)]),
    ]
    for i, (kind, events) in enumerate(drops):
        nodes = stream_stream(
            kind, JoinWindows.of(60_000, grace=10_000), "left", "right", out="out"
        )
        out.append(param(Case(nodes, rows(events)), mod, f"KStreamKStreamJoin.process-drops[{i}]"))
    nodes = stream_stream("left", JoinWindows.of(10), "left", "right", out="out")
    moving = rows([("left", "a", "A", 0), ("left", None, "N", 100), ("left", "b", "B", 101)])
    out.append(param(Case(nodes, moving), mod, "null-key-moves-join-stream-time"))
    for kind in ("left", "inner"):
        nodes = [
            node(0, "table", S, topic="right", store="t", store_kind="kv"),
            node(1, "stream", S, topic="left"),
            node(2, "selectKey", S, 1, fn="null_key"),
            node(3, JOIN_OPS[kind], S, 2, 0, fn="pair"),
            node(4, "to", S, 3, topic="out"),
        ]
        out.append(
            param(
                Case(nodes, rows([("left", "x", "v", 5)])),
                mod,
                f"NodesWithRelaxedNullKeyJoinDownstream[{kind}]",
            )
        )
    return out


def _window_singleton_cases() -> list[Any]:
    """The single-case tests of the window modules."""
    out = []
    tw = time_windows
    hop = windows_spec(TimeWindows.of(10, advance=5, grace=100))
    for name, events, windows, emit, op in (
        (
            "KStreamWindowAggregateTest.testAggBasic[update]",
            tw.AGG_BASIC_INPUT,
            hop,
            "update",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.testAggBasic[final]",
            tw.AGG_BASIC_INPUT,
            hop,
            "final",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow[update]",
            tw.EXPIRED_INPUT,
            windows_spec(TimeWindows.of(10, advance=5, grace=90)),
            "update",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow[final]",
            tw.EXPIRED_INPUT,
            windows_spec(TimeWindows.of(10, advance=5, grace=90)),
            "final",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace",
            [
                ("k", "100", 200),
                ("k", "0", 100),
                ("k", "1", 101),
                ("k", "2", 102),
                ("k", "3", 103),
                ("k", "4", 104),
                ("k", "5", 105),
                ("k", "6", 6),
            ],
            windows_spec(TimeWindows.of(10, grace=90)),
            "update",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough[update]",
            [("A", "1", 0), ("B", "2", 5), ("C", "3", 15), ("D", "4", 15), ("E", "5", 19)],
            windows_spec(emit_final.HOPPING),
            "update",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough[final]",
            [("A", "1", 0), ("B", "2", 5), ("C", "3", 15), ("D", "4", 15), ("E", "5", 19)],
            windows_spec(emit_final.HOPPING),
            "final",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldEmitWithInterval0[update]",
            [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)],
            windows_spec(emit_final.HOPPING),
            "update",
            "aggregate",
        ),
        (
            "KStreamWindowAggregateTest.shouldEmitWithInterval0[final]",
            [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)],
            windows_spec(emit_final.HOPPING),
            "final",
            "aggregate",
        ),
        (
            "dsl-api.html Hopping time windows",
            [("k", "a", 4500), ("k", "b", 1000), ("k", "c", 7999), ("k", "d", 8000)],
            windows_spec(TimeWindows.of(5000, 3000, grace=10_000)),
            "update",
            "count",
        ),
        (
            "dsl-api.html Tumbling time windows",
            [("k", "a", 0), ("k", "b", 4999), ("k", "c", 5000), ("k", "d", 9999)],
            windows_spec(TimeWindows.of(5000)),
            "update",
            "count",
        ),
        (
            "KStreamWindowAggregate.process window end + grace == stream time",
            [("k", "a", 14), ("k", "b", 9), ("k", "c", 15), ("k", "d", 9)],
            windows_spec(TimeWindows.of(10, grace=5)),
            "update",
            "count",
        ),
        (
            "TimeWindowedKStream.reduce largest timestamp",
            [("k", "1", 7), ("k", "2", 3), ("k", "3", 5)],
            windows_spec(TimeWindows.of(10, grace=10)),
            "update",
            "reduce",
        ),
        (
            "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingNullKey",
            [(None, "1", 0), ("k", "1", 1)],
            windows_spec(TimeWindows.of(10)),
            "update",
            "count",
        ),
        (
            "KStreamWindowAggregateTest.testJoin[first table, final]",
            [
                ("A", "1", 0),
                ("B", "2", 1),
                ("C", "3", 2),
                ("D", "4", 3),
                ("A", "1", 9),
                ("A", "1", 15),
                ("A", "1", 10),
                ("B", "2", 11),
                ("D", "4", 12),
                ("B", "2", 13),
                ("C", "3", 14),
                ("A", "1", 20),
            ],
            windows_spec(TimeWindows.of(10, 5, grace=5)),
            "final",
            "aggregate",
        ),
        (
            "KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging[final]",
            [
                ("a", "1", 0),
                ("b", "1", 0),
                ("c", "1", 0),
                ("d", "1", 0),
                ("d", "2", sessions.GAP // 2),
                ("a", "2", sessions.GAP + 1),
                ("b", "2", sessions.GAP + 1),
                ("a", "3", sessions.GAP + 1 + sessions.GAP // 2),
                ("c", "3", sessions.GAP + 1 + sessions.GAP // 2),
            ],
            windows_spec(SessionWindows.with_gap(sessions.GAP)),
            "final",
            "count",
        ),
        (
            "KStreamSessionWindowAggregate.process initializer and merger",
            [("k", "1", 0), ("k", "2", 5), ("k", "3", 30), ("k", "4", 20)],
            windows_spec(SessionWindows.with_gap(10)),
            "update",
            "aggregate",
        ),
        (
            "KStreamSessionWindowAggregate.process record inside a session",
            [("k", "a", 0), ("k", "b", 10), ("k", "c", 5), ("k", "d", 30), ("k", "e", 20)],
            windows_spec(SessionWindows.with_gap(10, grace=20)),
            "update",
            "reduce",
        ),
        (
            "KStreamSessionWindowAggregate.process late by merged session end",
            [
                ("k", "a", 20),
                ("x", "b", 30),
                ("y", "c", 14),
                ("y", "d", 15),
                ("k", "e", 12),
                ("k", "f", 3),
                ("z", "g", 1),
            ],
            windows_spec(SessionWindows.with_gap(10, grace=5)),
            "update",
            "reduce",
        ),
    ):
        nodes = windowed(windows, emit, op, _retention(emit))
        module = "test_session_windows" if windows["type"] == "session" else "test_time_windows"
        if emit == "final" and "testAggBasic" not in name and "ExpiredWindow[" not in name:
            module = "test_emit_final"
        out.append(param(Case(nodes, keyed_events(events)), module, name))
    for name, events, grace, emit in (
        (
            "KStreamSlidingWindowAggregateTest.testAggregateLargeInput[update]",
            sliding.LARGE_INPUT,
            50,
            "update",
        ),
        (
            "KStreamSlidingWindowAggregateTest.testAggregateLargeInput[final]",
            sliding.LARGE_INPUT,
            10,
            "final",
        ),
        (
            "KStreamSlidingWindowAggregate out-of-order record folded last",
            [("k", "1", 10), ("k", "4", 18), ("k", "2", 12), ("k", "3", 14)],
            20,
            "update",
        ),
    ):
        nodes = windowed(
            windows_spec(SlidingWindows.of(10, grace=grace)), emit, "aggregate", _retention(emit)
        )
        out.append(param(Case(nodes, keyed_events(events)), "test_sliding_windows", name))
    return out


CASES: list[Any] = [
    *_stateless_cases(),
    *_aggregation_cases(),
    *_null_key_join_cases(),
    *_window_singleton_cases(),
    *_stream_stream_cases(),
    *_stream_table_cases(),
    *_table_table_cases(),
    *_semantics_cases(),
    *_windowed_cases(),
]
