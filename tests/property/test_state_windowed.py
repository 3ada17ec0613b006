"""Window and session stores against a plain model: out-of-order puts, retention, bounds.

Flushes and discards are interleaved so the write cache and the backend are both exercised.
"""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream import stores
from kstream.records import Windowed
from kstream.state import open_store

RET = 1000
SIZE = 100
keys = st.sampled_from(["a", "ab", "b", "a\x00"])
times = st.integers(0, 3000)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, times, st.one_of(st.none(), st.integers(0, 9))),
        st.tuples(st.just("flush"), st.none(), st.none(), st.none()),
        st.tuples(st.just("discard"), st.none(), st.none(), st.none()),
    ),
    max_size=40,
)
DIR = tempfile.gettempdir()  # memory stores: nothing is written there


@settings(max_examples=150, deadline=None)
@given(ops=ops, key=keys, t_from=times, t_to=times)
def test_window_store_matches_model(ops: list[Any], key: str, t_from: int, t_to: int) -> None:
    store: Any = open_store(
        stores.window("w", RET, SIZE, segment_interval=300), app_id="p", partition=0, state_dir=DIR
    )
    committed: tuple[dict[tuple[str, int], int], int] = ({}, -1)
    model: dict[tuple[str, int], int] = {}
    observed = -1
    for op, k, t, v in ops:
        if op == "put":
            observed = max(observed, t)
            if t < observed - RET:
                continue
            if v is None:
                model.pop((k, t), None)
            else:
                model[(k, t)] = v
            store.put(k, v, t)
        elif op == "flush":
            store.flush()
            committed = (dict(model), observed)
        else:
            store.discard()
            model, observed = dict(committed[0]), committed[1]
    live = observed - RET
    expect = sorted(
        (t, v) for (k, t), v in model.items() if k == key and t_from <= t <= t_to and t >= live
    )
    assert list(store.fetch(key, t_from, t_to)) == expect
    everything = sorted(((k.encode(), t), v) for (k, t), v in model.items() if t >= live)
    got = [((w.key.encode(), w.start), v) for w, v in store.all()]
    assert sorted(got) == everything
    assert all(w.end == w.start + SIZE for w, _ in store.all())


sessions = st.tuples(times, st.integers(0, 500)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=150, deadline=None)
@given(
    puts=st.lists(st.tuples(keys, sessions, st.one_of(st.none(), st.integers(0, 9))), max_size=30),
    key=keys,
    earliest_end=times,
    latest_start=times,
    flush_at=st.integers(0, 30),
)
def test_session_store_matches_model(
    puts: list[Any], key: str, earliest_end: int, latest_start: int, flush_at: int
) -> None:
    store: Any = open_store(
        stores.session("s", RET, segment_interval=250), app_id="p", partition=0, state_dir=DIR
    )
    model: dict[tuple[str, int, int], int] = {}
    observed = -1
    for i, (k, (s, e), v) in enumerate(puts):
        if i == flush_at:
            store.flush()
        observed = max(observed, e)
        if e < observed - RET:
            continue
        if v is None:
            model.pop((k, s, e), None)
        else:
            model[(k, s, e)] = v
        store.put(Windowed(k, s, e), v)
    live = observed - RET
    expect = sorted(
        ((s, e), v)
        for (k, s, e), v in model.items()
        if k == key and e >= earliest_end and s <= latest_start and e >= live
    )
    got = [((w.start, w.end), v) for w, v in store.find_sessions(key, earliest_end, latest_start)]
    assert got == expect
    assert all(w.key == key for w, _ in store.fetch(key))
