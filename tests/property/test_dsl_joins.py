"""For random event sequences, joins equal a plain reference implementation.

The references follow the definitions in `kstream.dsl.joins` record by record: a dict for the
table side of a stream-table join (a left join keeps None-key records, KIP-962); for the
windowed stream-stream join, lists of the records each side has seen and Kafka's retention
rule: a side keeps a record while its timestamp is above that side's newest timestamp minus
(before + after + grace), and an out-of-order record joins whatever the other side still keeps.
The driver commits after every record, so the order of the emitted results is compared exactly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.testing.driver import TopologyTestDriver

KEYS = st.sampled_from(["a", "b", "c"])
SETTINGS = settings(max_examples=60, deadline=None)

TABLE_EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("table"), KEYS, st.one_of(st.none(), st.integers(0, 9))),
        st.tuples(
            st.just("stream"), st.one_of(st.none(), KEYS), st.one_of(st.none(), st.integers(0, 9))
        ),
    ),
    max_size=30,
)


def stream_table_reference(events: list[tuple[str, Any, Any]], left: bool) -> list[Any]:
    table: dict[Any, Any] = {}
    out = []
    for side, k, v in events:
        if side == "table":
            if v is None:
                table.pop(k, None)
            else:
                table[k] = v
        elif v is not None and (k is not None or left):
            tv = None if k is None else table.get(k)
            if tv is not None or left:
                out.append((k, [v, tv]))
    return out


@SETTINGS
@given(TABLE_EVENTS, st.booleans())
def test_stream_table_join_equals_reference(events: list[tuple[str, Any, Any]], left: bool) -> None:
    b = StreamBuilder()
    table = b.table("t", "string", "json")
    stream = b.stream("s", "string", "json")
    join = stream.left_join if left else stream.join
    join(table, lambda v, tv: [v, tv]).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        inputs = {
            "table": d.input_topic("t", "string", "json"),
            "stream": d.input_topic("s", "string", "json"),
        }
        for side, k, v in events:
            inputs[side].pipe(k, v, timestamp=0)
        got = d.output_topic("out", "string", "json").read_key_values()
    assert got == stream_table_reference(events, left)


STREAM_EVENTS = st.lists(
    st.tuples(st.booleans(), KEYS, st.integers(0, 9), st.integers(0, 60)), max_size=30
)


def stream_stream_reference(
    events: list[tuple[bool, str, int, int]], before: int, after: int, grace: int
) -> list[tuple[Any, Any, int]]:
    seen: dict[bool, list[tuple[str, int, int]]] = {True: [], False: []}
    newest = {True: -1, False: -1}
    retention = before + after + grace
    out = []
    for is_left, k, v, ts in events:
        lo, hi = (ts - before, ts + after) if is_left else (ts - after, ts + before)
        lo = max(lo, 0, newest[not is_left] - retention + 1)
        hi = max(hi, 0)
        matches = sorted(
            ((t2, i, v2) for i, (k2, v2, t2) in enumerate(seen[not is_left]) if k2 == k),
        )
        for t2, _, v2 in matches:
            if lo <= t2 <= hi:
                out.append((k, [v, v2] if is_left else [v2, v], max(ts, t2)))
        newest[is_left] = max(newest[is_left], ts)
        if ts > newest[is_left] - retention:
            seen[is_left].append((k, v, ts))
    return out


@SETTINGS
@given(STREAM_EVENTS, st.integers(0, 10), st.integers(0, 10), st.integers(0, 20))
def test_stream_stream_inner_join_equals_reference(
    events: list[tuple[bool, str, int, int]], before: int, after: int, grace: int
) -> None:
    b = StreamBuilder()
    left = b.stream("l", "string", "json")
    right = b.stream("r", "string", "json")
    window = JoinWindows.of(before, after=after, grace=grace)
    left.join(right, lambda lv, rv: [lv, rv], window=window).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        inputs = {
            True: d.input_topic("l", "string", "json"),
            False: d.input_topic("r", "string", "json"),
        }
        for is_left, k, v, ts in events:
            inputs[is_left].pipe(k, v, timestamp=ts)
        got = [
            (r.key, r.value, r.timestamp)
            for r in d.output_topic("out", "string", "json").read_records()
        ]
    assert got == stream_stream_reference(events, before, after, grace)
