"""For random event sequences, windowed aggregates equal a plain reference implementation.

Events have few keys, out-of-order timestamps and sometimes null keys/values. The references
apply the Kafka Streams rules record by record: stream time is the largest timestamp seen,
`close = stream time - grace`, a time window `[start, end)` takes a record while
`end > close`, a session takes a record while the merged session's end is `>= close - gap`,
and sessions ending `gap + grace` (the session store's retention) or more behind its newest
session end are no longer found. A merge that changes the record's own `[t, t]` session
deletes every merged session downstream, then forwards the merged one.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import SessionWindows, TimeWindows
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
EVENTS = st.lists(
    st.tuples(KEYS, st.one_of(st.none(), st.sampled_from(["x", "y", "z"])), st.integers(0, 80)),
    max_size=30,
)
SETTINGS = settings(max_examples=60, deadline=None)
Events = list[tuple[Any, Any, int]]


def run(events: Events, build: Any) -> list[tuple[Any, Any]]:
    b = StreamBuilder()
    build(b.stream("in", "string", "json").group_by_key()).to_stream().to("out", "auto", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(events)
        return d.output_topic("out", "auto", "json").read_key_values()


def window_starts(t: int, size: int, advance: int) -> list[int]:
    return [s for s in range(0, t + 1) if s % advance == 0 and s <= t < s + size]


def reference_time(events: Events, size: int, advance: int, grace: int, final: bool) -> list:
    observed = -1
    aggs: dict[tuple[str, int], str] = {}
    emitted_close: int | None = None
    out: list[tuple[Any, Any]] = []
    for k, v, t in events:
        if k is None or v is None:
            continue
        if t > observed:
            observed = t
            if final:
                close = observed - grace
                if emitted_close is None or close > emitted_close:
                    ready = [
                        (s, key)
                        for key, s in aggs
                        if s + size <= close and (emitted_close is None or s + size > emitted_close)
                    ]
                    for s, key in sorted(ready):
                        out.append((Windowed(key, s, s + size), aggs[(key, s)]))
                    emitted_close = close
        close = observed - grace
        for s in window_starts(t, size, advance):
            if s + size <= close:
                continue
            aggs[(k, s)] = aggs.get((k, s), "") + v
            if not final:
                out.append((Windowed(k, s, s + size), aggs[(k, s)]))
    return out


def concat_aggregate(g: Any, windows: Any, emit: str) -> Any:
    return g.windowed_by(windows).aggregate(
        lambda: "", lambda k, v, agg: agg + v, emit=emit, idle_close=None
    )


@SETTINGS
@given(
    EVENTS,
    st.sampled_from([(10, 10), (10, 5), (6, 2), (5, 5)]),
    st.integers(0, 12),
    st.sampled_from(["update", "final"]),
)
def test_time_windows_equal_reference(
    events: Events, size_advance: tuple[int, int], grace: int, emit: str
) -> None:
    size, advance = size_advance
    expected = reference_time(events, size, advance, grace, emit == "final")
    got = run(events, lambda g: concat_aggregate(g, TimeWindows.of(size, advance, grace), emit))
    assert got == expected


def reference_session(events: Events, gap: int, grace: int) -> list:
    observed = -1
    store_obs: int | None = None
    sessions: dict[str, list[tuple[int, int, str]]] = {}
    out: list[tuple[Any, Any]] = []
    for k, v, t in events:
        if k is None or v is None:
            continue
        observed = max(observed, t)
        close = observed - grace - gap
        live = -(2**63) if store_obs is None else store_obs - gap - grace + 1
        mine = sessions.setdefault(k, [])
        found = sorted((s, e, a) for s, e, a in mine if e >= t - gap and s <= t + gap and e >= live)
        start = min([t] + [s for s, _, _ in found])
        end = max([t] + [e for _, e, _ in found])
        if end < close:
            continue
        agg = "".join(a for _, _, a in found) + v
        for s, e, a in found:
            mine.remove((s, e, a))
            if (start, end) != (t, t):
                out.append((Windowed(k, s, e), None))
        mine.append((start, end, agg))
        store_obs = end if store_obs is None else max(store_obs, end)
        out.append((Windowed(k, start, end), agg))
    return out


@SETTINGS
@given(EVENTS, st.integers(1, 12), st.integers(0, 15))
def test_session_windows_equal_reference(events: Events, gap: int, grace: int) -> None:
    expected = reference_session(events, gap, grace)
    got = run(
        events,
        lambda g: g.windowed_by(SessionWindows.with_gap(gap, grace)).aggregate(
            lambda: "", lambda k, v, agg: agg + v, lambda k, a1, a2: a1 + a2
        ),
    )
    assert got == expected
