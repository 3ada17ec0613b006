"""For random table updates, KTable re-grouping equals a plain reference implementation.

The reference keeps the table as a dict and applies Kafka's rule per update: the old value's
group subtracts it, the new value's group adds it, and when both are the same group a single
result is emitted. The final store must equal the aggregate computed from scratch.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.dsl import StreamBuilder
from kstream.testing.driver import TopologyTestDriver

UPDATES = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2", "u3", "u4"]),
        st.one_of(st.none(), st.tuples(st.sampled_from(["eu", "us", "asia"]), st.integers(0, 9))),
    ),
    max_size=30,
)


def reference(updates: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    table: dict[str, Any] = {}
    agg: dict[str, list[int]] = {}
    out = []
    for k, v in updates:
        old = table.get(k)
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
        if old is not None and v is not None and old[0] == v[0]:
            a = agg[v[0]]
            agg[v[0]] = [a[0], a[1] - old[1] + v[1]]
            out.append((v[0], agg[v[0]]))
            continue
        if old is not None:
            a = agg[old[0]]
            agg[old[0]] = [a[0] - 1, a[1] - old[1]]
            out.append((old[0], agg[old[0]]))
        if v is not None:
            a = agg.get(v[0], [0, 0])
            agg[v[0]] = [a[0] + 1, a[1] + v[1]]
            out.append((v[0], agg[v[0]]))
    scratch = {g: [0, 0] for g in agg}
    for region, amount in table.values():
        scratch[region] = [scratch[region][0] + 1, scratch[region][1] + amount]
    assert scratch == agg
    return out, agg


@settings(max_examples=60, deadline=None)
@given(UPDATES)
def test_grouped_table_aggregate_equals_reference(updates: list[tuple[str, Any]]) -> None:
    b = StreamBuilder()
    b.table("users", "string", "json").group_by(
        lambda _k, v: (v[0], v[1]), key_serde="string", value_serde="json"
    ).aggregate(
        lambda: [0, 0],
        lambda _k, v, a: [a[0] + 1, a[1] + v],
        lambda _k, v, a: [a[0] - 1, a[1] - v],
        store="agg",
        value_serde="json",
    ).to_stream().to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("users", "string", "json").pipe_many(
            [(k, None if v is None else list(v)) for k, v in updates]
        )
        got = d.output_topic("out", "string", "json").read_key_values()
        with d.get_store("agg").all() as cur:
            final = dict(cur)
    assert (got, final) == reference(updates)


TIMED_UPDATES = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2", "u3"]),
        st.one_of(st.none(), st.sampled_from(["eu", "us"])),
        st.integers(0, 99),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(TIMED_UPDATES)
def test_regrouped_result_timestamp_is_the_largest_that_touched_the_group(
    updates: list[tuple[str, Any, int]],
) -> None:
    """Kafka's KTableAggregate: a group's result takes max(record, stored) timestamp, i.e. the
    largest timestamp of the updates that ever reached the group; a row moving between groups
    reaches the old group (subtractor) before the new one (adder)."""
    table: dict[str, str] = {}
    latest: dict[str, int] = {}
    expected: list[tuple[str, int]] = []
    for k, v, ts in updates:
        old = table.get(k)
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
        for group in dict.fromkeys(g for g in (old, v) if g is not None):
            latest[group] = max(ts, latest.get(group, ts))
            expected.append((group, latest[group]))
    b = StreamBuilder()
    b.table("users", "string", "string").group_by(
        lambda _k, v: (v, v), key_serde="string", value_serde="string"
    ).count(store="agg").to_stream().to("out", "string", "long")
    with TopologyTestDriver(b) as d:
        d.input_topic("users", "string", "string").pipe_many(updates)
        got = [(r.key, r.timestamp) for r in d.output_topic("out", "string", "long").read_records()]
    assert got == expected
