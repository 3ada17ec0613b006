"""Windowed stream-stream joins equal a brute-force model of Kafka's rules, record by record.

The model keeps plain lists and rescans them for every record. Its rules, from Kafka Streams'
documentation and `KStreamKStreamJoin` (3.9):

- Stream time is the largest timestamp seen on either side, None keys and values included.
- A None-key record with a value is emitted at once as `[v, None]` / `[None, v]` on a side
  whose unmatched records are emitted (left of a left join, both of an outer join); any other
  record with a None key or value is dropped, and a dropped one with a key still moves its
  side's newest timestamp (Kafka's `KStreamJoinWindow` puts it in the window store).
- A record at `t` (left) joins the right records of its key with timestamps in
  `[t - before, t + after]` (clamped at 0) that the right side still retains: a side retains
  a record while its timestamp is above that side's newest timestamp minus
  `before + after + grace`. Right records mirror this. Partners come in timestamp order, then
  arrival order; a result carries the larger timestamp. Out-of-order records are not dropped.
- An emitting-side record without a partner is emitted at once if `t + after` (its side's
  look-ahead) is behind stream time, else it waits. Waiting records are emitted, oldest first
  (right before left at equal timestamps, then by key), when a record at stream time arrives
  and `ts + look-ahead + grace < stream time`; a partner arriving first removes them.
- Kafka only starts that scan when the smallest pending timestamp it remembers, plus the
  arriving record's look-ahead and grace, is behind stream time; the remembered value is the
  last one the previous scan visited, and a scan stops once both sides meet an open window.

Timestamps are drawn so that records arrive out of order both within and beyond the grace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.records import Record
from kstream.serde import serde
from kstream.testing.driver import TopologyTestDriver

NO_PENDING = 2**63
Event = tuple[bool, Any, Any, int]  # (is_left, key, value, timestamp)
Output = tuple[Any, Any, int]


@dataclass
class JoinModel:
    kind: str
    before: int
    after: int
    grace: int
    stream_time: int = -1
    seen: dict[bool, list[tuple[Any, Any, int]]] = field(
        default_factory=lambda: {True: [], False: []}
    )
    newest: dict[bool, int] = field(default_factory=lambda: {True: -1, False: -1})
    pending: list[tuple[int, bool, Any, Any]] = field(default_factory=list)
    min_time: int = NO_PENDING
    out: list[Output] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)

    def emits(self, is_left: bool) -> bool:
        return self.kind == "outer" or (self.kind == "left" and is_left)

    def look_ahead(self, is_left: bool) -> int:
        return self.after if is_left else self.before

    def padded(self, is_left: bool, k: Any, v: Any, ts: int) -> Output:
        return (k, [v, None] if is_left else [None, v], ts)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def feed(self, is_left: bool, k: Any, v: Any, ts: int) -> None:
        self.stream_time = max(self.stream_time, ts)
        if v is None or k is None:
            if v is not None and self.emits(is_left):
                self.out.append(self.padded(is_left, k, v, ts))
            else:
                self.drop("null_value" if v is None else "null_key")
                if k is not None:  # KStreamJoinWindow stores it: nothing, but time moves
                    self.newest[is_left] = max(self.newest[is_left], ts)
            return
        if self.kind != "inner" and ts == self.stream_time:
            self.scan(is_left)
        retention = self.before + self.after + self.grace
        other = not is_left
        lo = max(0, ts - self.look_ahead(other), self.newest[other] - retention + 1)
        hi = max(0, ts + self.look_ahead(is_left))
        partners = sorted(
            (t2, i, v2)
            for i, (k2, v2, t2) in enumerate(self.seen[other])
            if k2 == k and lo <= t2 <= hi
        )
        for t2, _, v2 in partners:
            self.pending = [p for p in self.pending if p[:3] != (t2, other, k)]
            self.out.append((k, [v, v2] if is_left else [v2, v], max(ts, t2)))
        handled = bool(partners)
        if not partners and self.emits(is_left):
            handled = True
            if hi < self.stream_time:
                self.out.append(self.padded(is_left, k, v, ts))
            else:
                self.pending.append((ts, is_left, k, v))
                self.min_time = min(self.min_time, ts)
        self.seen[is_left].append((k, v, ts))
        self.newest[is_left] = max(self.newest[is_left], ts)
        if ts <= self.newest[is_left] - retention and not handled:
            self.drop("expired_window")

    def scan(self, is_left: bool) -> None:
        st_ = self.stream_time
        if self.min_time + self.look_ahead(is_left) + self.grace >= st_:
            return
        self.min_time = NO_PENDING
        groups = sorted({p[:3] for p in self.pending})  # (ts, side: right first, key)
        open_sides: set[bool] = set()
        for ts, side, k in groups:
            self.min_time = ts
            if len(open_sides) == 2:
                break
            if ts + self.look_ahead(side) + self.grace >= st_:
                open_sides.add(side)
                continue
            for p in [p for p in self.pending if p[:3] == (ts, side, k)]:
                self.out.append(self.padded(side, k, p[3], ts))
            self.pending = [p for p in self.pending if p[:3] != (ts, side, k)]


def run_kstream(
    kind: str, window: JoinWindows, events: list[Event]
) -> tuple[list[Output], dict[str, int]]:
    b = StreamBuilder()
    left = b.stream("l", "string", "json")
    right = b.stream("r", "string", "json")
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(left, method)(right, lambda lv, rv: [lv, rv], window=window).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        inputs = {
            True: d.input_topic("l", "string", "json"),
            False: d.input_topic("r", "string", "json"),
        }
        for is_left, k, v, ts in events:
            inputs[is_left].pipe(k, v, timestamp=ts)
        records = d.output_topic("out", "string", "json").read_records()
        return [(r.key, r.value, r.timestamp) for r in records], d.dropped_records()


@st.composite
def event_streams(draw: st.DrawFn) -> list[Event]:
    """Records whose timestamps drift forward and now and then jump back by up to 60 ms,
    i.e. within and beyond any grace drawn below."""
    n = draw(st.integers(0, 25))
    now, events = 0, []
    for _ in range(n):
        now += draw(st.integers(0, 12))
        lag = draw(st.sampled_from([0, 0, 0, 1, 5, 15, 30, 60]))
        key = draw(
            st.sampled_from(["a", "a", "b", "c", None])
            if draw(st.booleans())
            else st.sampled_from(["a", "b"])
        )
        value = draw(
            st.one_of(st.integers(0, 9), st.just(None))
            if draw(st.integers(0, 9)) == 0
            else st.integers(0, 9)
        )
        events.append((draw(st.booleans()), key, value, max(0, now - lag)))
    return events


WINDOWS = st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(0, 20))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["inner", "left", "outer"]), WINDOWS, event_streams())
# a fresh join has no pending minimum: the first scan waits for a window to close
@example(
    kind="left",
    window=(2, 1, 0),
    events=[(False, "a", None, 1), (True, "a", 0, 0), (False, "a", 0, 2)],
)
def test_stream_stream_join_equals_the_model(
    kind: str, window: tuple[int, int, int], events: list[Event]
) -> None:
    before, after, grace = window
    model = JoinModel(kind, before, after, grace)
    for event in events:
        model.feed(*event)
    got = run_kstream(kind, JoinWindows.of(before, after=after, grace=grace), events)
    assert got == (model.out, model.dropped)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["left", "outer"]), WINDOWS, event_streams())
def test_no_unmatched_record_waits_forever_or_comes_out_twice(
    kind: str, window: tuple[int, int, int], events: list[Event]
) -> None:
    """After a final record far ahead, every record of an emitting side has come out, joined
    or null-padded, and none null-padded twice (values made unique to tell records apart)."""
    before, after, grace = window
    unique = [(s, k, None if v is None else i, ts) for i, (s, k, v, ts) in enumerate(events)]
    flush: Event = (True, "flush", -1, max((e[3] for e in events), default=0) + 1000)
    out, _ = run_kstream(kind, JoinWindows.of(before, after=after, grace=grace), [*unique, flush])
    for is_left, k, v, ts in unique:
        if v is None or not (is_left or kind == "outer"):
            continue
        slot = 0 if is_left else 1
        padded = out.count((k, [v, None] if is_left else [None, v], ts))
        joined = [r for r in out if r[1][slot] == v and r[1][1 - slot] is not None]
        assert padded <= 1
        assert padded + len(joined) >= 1, (is_left, k, v, ts)


def run_as_one_batch(
    kind: str, window: JoinWindows, events: list[Event]
) -> tuple[list[Output], dict[str, int]]:
    """The same join, fed all records in one `Task.process` call as the runtime's micro-batches
    do (runs of one topic go through each processor as a list)."""
    b = StreamBuilder()
    left = b.stream("l", "string", "json")
    right = b.stream("r", "string", "json")
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(left, method)(right, lambda lv, rv: [lv, rv], window=window).to("out", "string", "json")
    ks, vs = serde("string"), serde("json")
    batch = [
        Record(ks.to_bytes(k), vs.to_bytes(v), ts, (), "l" if is_left else "r", 0, i)
        for i, (is_left, k, v, ts) in enumerate(events)
    ]
    with TopologyTestDriver(b) as d:
        (task,) = d.tasks
        task.process(batch)
        task.flush_stores()
        records = d.output_topic("out", "string", "json").read_records()
        return [(r.key, r.value, r.timestamp) for r in records], d.dropped_records()


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["inner", "left", "outer"]), WINDOWS, event_streams())
def test_a_micro_batch_gives_what_records_one_at_a_time_give(
    kind: str, window: tuple[int, int, int], events: list[Event]
) -> None:
    before, after, grace = window
    windows = JoinWindows.of(before, after=after, grace=grace)
    assert run_as_one_batch(kind, windows, events) == run_kstream(kind, windows, events)
