"""For random event sequences, DSL aggregations equal a plain reference implementation.

The reference is a dict per key updated record by record, exactly as the Kafka Streams
documentation defines count, reduce and aggregate; the emitted updates must match it record by
record (the driver commits after each record, so every update is visible), and so must the
final store.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.dsl import StreamBuilder
from kstream.records import Record
from kstream.testing.driver import TopologyTestDriver

KEYS = st.sampled_from(["a", "b", "c", "d"])
EVENTS = st.lists(
    st.tuples(st.one_of(st.none(), KEYS), st.one_of(st.none(), st.integers(-50, 50))),
    max_size=40,
)
SETTINGS = settings(max_examples=40, deadline=None)


def reference(
    events: list[tuple[Any, Any]], key_fn: Any, step: Any
) -> tuple[list[tuple[Any, Any]], dict[Any, Any]]:
    state: dict[Any, Any] = {}
    emitted = []
    for k, v in events:
        key = key_fn(k, v)
        if key is None or v is None:
            continue
        state[key] = step(key, v, state.get(key))
        emitted.append((key, state[key]))
    return emitted, state


def run_dsl(events: list[tuple[Any, Any]], build: Any) -> tuple[list[tuple[Any, Any]], dict]:
    b = StreamBuilder()
    table = build(b.stream("in", "string", "json"))
    table.to_stream().to("out", "auto", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(events)
        out = d.output_topic("out", "auto", "json").read_key_values()
        with d.get_store("agg").all() as cur:
            final = dict(cur)
    return out, final


@SETTINGS
@given(EVENTS)
def test_count_per_key(events: list[tuple[Any, Any]]) -> None:
    expected = reference(events, lambda k, v: k, lambda k, v, agg: (agg or 0) + 1)
    got = run_dsl(events, lambda s: s.group_by_key().count(store="agg"))
    assert got == expected


@SETTINGS
@given(EVENTS)
def test_reduce_sum_after_regrouping(events: list[tuple[Any, Any]]) -> None:
    """group_by a derived key: goes through a repartition topic."""

    def parity(k: Any, v: Any) -> Any:
        return None if v is None else ("even" if v % 2 == 0 else "odd")

    expected = reference(events, parity, lambda k, v, agg: v if agg is None else agg + v)
    got = run_dsl(events, lambda s: s.group_by(parity).reduce(lambda a, v: a + v, store="agg"))
    assert got == expected


@SETTINGS
@given(EVENTS)
def test_aggregate_history(events: list[tuple[Any, Any]]) -> None:
    def step(k: Any, v: Any, agg: Any) -> Any:
        return [*(agg if agg is not None else [k]), v]

    expected = reference(events, lambda k, v: k, step)
    got = run_dsl(
        events,
        lambda s: s.group_by_key().aggregate(lambda: None, lambda k, v, a: step(k, v, a), "agg"),
    )
    assert got == expected


@SETTINGS
@given(EVENTS, st.integers(1, 8), st.booleans())
def test_batches_equal_one_record_at_a_time(
    events: list[tuple[Any, Any]], size: int, converging: bool
) -> None:
    """The runtime hands tasks whole batches: results must not depend on the batch size.

    Without `converging` the graph is a tree (run a batch at a time); with it, branches of the
    source merge again (run one record at a time).
    """

    def build() -> StreamBuilder:
        b = StreamBuilder()
        s = b.stream("in", "string", "json")
        s.filter(lambda k, v: v is not None).group_by_key().count(store="agg").to_stream().to(
            "out", "string", "long"
        )
        copy = s.merge(s.map_values(lambda v: v)) if converging else s.map_values(lambda v: v)
        copy.to("copy", "string", "json")
        return b

    def run(batch: int) -> tuple[list[Any], list[Any]]:
        with TopologyTestDriver(build()) as d:
            recs = [
                Record(
                    None if k is None else k.encode(),
                    None if v is None else str(v).encode(),
                    i,
                    (),
                    "in",
                    0,
                    i,
                )
                for i, (k, v) in enumerate(events)
            ]
            task = d.tasks[0]
            for i in range(0, len(recs), batch):
                task.process(recs[i : i + batch])
                task.flush_stores()
            return (
                d.output_topic("out", "string", "long").read_key_values(),
                d.output_topic("copy", "string", "json").read_key_values(),
            )

    assert run(size) == run(1)


TIMED_EVENTS = st.lists(
    st.tuples(
        st.one_of(st.none(), KEYS), st.one_of(st.none(), st.integers(-50, 50)), st.integers(0, 99)
    ),
    max_size=30,
)
OPERATIONS = {
    "count": lambda g: g.count(store="agg"),
    "reduce": lambda g: g.reduce(lambda a, v: a + v, store="agg"),
    "aggregate": lambda g: g.aggregate(lambda: 0, lambda _k, v, a: a - v, store="agg"),
}


@pytest.mark.parametrize("op", sorted(OPERATIONS))
@pytest.mark.parametrize("regroup", [False, True], ids=["group_by_key", "group_by"])
@SETTINGS
@given(events=TIMED_EVENTS)
def test_result_timestamp_is_the_largest_aggregated(
    op: str, regroup: bool, events: list[tuple[Any, Any, int]]
) -> None:
    """Kafka's KStreamAggregate/KStreamReduce: a result carries the largest timestamp of the
    records aggregated into it (records with a null key or value are not aggregated)."""
    latest: dict[Any, int] = {}
    expected = []
    for k, v, ts in events:
        if k is None or v is None:
            continue
        latest[k] = max(ts, latest.get(k, ts))
        expected.append((k, latest[k]))
    b = StreamBuilder()
    s = b.stream("in", "string", "json")
    grouped = s.group_by(lambda k, _v: k, key_serde="string") if regroup else s.group_by_key()
    OPERATIONS[op](grouped).to_stream().to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(events)
        got = [(r.key, r.timestamp) for r in d.output_topic("out", "string", "json").read_records()]
        stored = {k: d.get_store("agg").get_with_timestamp(k).timestamp for k in latest}
    assert got == expected
    assert stored == latest
