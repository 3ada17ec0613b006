"""For random event sequences, `deduplicate` equals a plain reference implementation.

The reference: stream time is the largest timestamp seen (with a non-None id); a record is
dropped when its id was first seen at or after `stream time - within`; otherwise it is kept and,
if its own time is still inside that horizon, its time becomes the id's first-seen time.
Records whose id is None always pass.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.dsl import StreamBuilder
from kstream.testing.driver import TopologyTestDriver

EVENTS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
        st.one_of(st.none(), st.integers(0, 3)),
        st.integers(0, 100),
    ),
    max_size=30,
)
Events = list[tuple[Any, Any, int]]


def reference(events: Events, id_of: Any, within: int) -> list[tuple[Any, Any]]:
    observed: int | None = None
    seen: dict[Any, int] = {}
    out = []
    for k, v, t in events:
        id_ = id_of(k, v)
        if id_ is None:
            out.append((k, v))
            continue
        observed = t if observed is None else max(observed, t)
        live = observed - within
        if id_ in seen and seen[id_] >= live:
            continue
        if t >= live:
            seen[id_] = t
        out.append((k, v))
    return out


def run(events: Events, id_fn: Any, within: int) -> list[tuple[Any, Any]]:
    b = StreamBuilder()
    b.stream("in", "string", "json").deduplicate(id_fn, within=within).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(events)
        return d.output_topic("out", "string", "json").read_key_values()


@settings(max_examples=80, deadline=None)
@given(EVENTS, st.integers(1, 40), st.booleans())
def test_deduplicate_equals_reference(events: Events, within: int, by_value: bool) -> None:
    if by_value:
        expected = reference(events, lambda k, v: v, within)
        got = run(events, lambda k, v: v, within)
    else:
        expected = reference(events, lambda k, v: k, within)
        got = run(events, None, within)
    assert got == expected
