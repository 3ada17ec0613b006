"""The same topology gives the same results on Spark (local[2], real broker) as in the driver.

Spark coalesces a table's updates per key and batch, as a record cache does, so tables are
compared by the value each key ends at; streams are compared record for record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_helpers import (
    create_topics,
    driver_outputs,
    final_values,
    produce,
    read_all,
)

from examples.word_count import build_topology as word_count
from kstream.dsl import StreamBuilder
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

Names = Callable[[str], str]


def run_spark(spark: Any, topology: Topology, app: str, bootstrap: str, tmp: Any) -> None:
    from kstream.spark import run

    run(topology, app, bootstrap, checkpoint_dir=str(tmp / app), spark=spark)


def test_word_count(spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any) -> None:
    src, out = unique_name("lines"), unique_name("counts")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    lines = [(f"k{i % 5}", text, 1000 + i) for i, text in enumerate(LINES)]
    produce(bootstrap_servers, src, lines, "string", "string")
    topo = word_count(src, out)
    run_spark(spark, topo, unique_name("wc"), bootstrap_servers, tmp_path)

    got = read_all(bootstrap_servers, out, "string", "long")
    ref = driver_outputs(
        word_count(src, out), {src: ("string", "string", lines)}, {out: ("string", "long")}
    )[out]
    assert final_values(got) == dict(ref) == final_values_of(ref)
    assert all(r.header("kstream.src") is not None for r in got)


LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "The Dog barks",
    "a fox, a dog; the end",
] * 25


def final_values_of(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, v in pairs:
        out[k] = v
    return out


def stateless(src: str, out_a: str, out_b: str) -> Topology:
    b = StreamBuilder()
    low, high = (
        b.stream(src, key_serde="string", value_serde="json")
        .filter(lambda _k, v: v["n"] % 3 != 0)
        .map(lambda k, v: (k.upper(), {"n": v["n"], "twice": v["n"] * 2}))
        .branch(lambda _k, v: v["n"] < 50, default=True)
    )
    low.map_values(lambda v: v["twice"]).to(out_a, key_serde="string", value_serde="long")
    high.flat_map_values(lambda v: [v["n"], -v["n"]]).to(
        out_b, key_serde="string", value_serde="long"
    )
    return b.build()


def test_stateless_branches(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    src, a, b = unique_name("in"), unique_name("a"), unique_name("b")
    create_topics(bootstrap_servers, {src: 2, a: 1, b: 1})
    recs = [(f"u{i % 7}", {"n": i}, 5000 + i) for i in range(100)]
    produce(bootstrap_servers, src, recs, "string", "json")
    run_spark(spark, stateless(src, a, b), unique_name("sl"), bootstrap_servers, tmp_path)

    ref = driver_outputs(
        stateless(src, a, b),
        {src: ("string", "json", recs)},
        {a: ("string", "long"), b: ("string", "long")},
    )
    got_a = [(r.key, r.value) for r in read_all(bootstrap_servers, a, "string", "long")]
    got_b = [(r.key, r.value) for r in read_all(bootstrap_servers, b, "string", "long")]
    assert Counter(got_a) == Counter(ref[a])
    assert Counter(got_b) == Counter(ref[b])
    assert len(got_b) == 2 * sum(1 for i in range(50, 100) if i % 3)


def aggregations(src: str, sums: str, paths: str) -> Topology:
    b = StreamBuilder()
    s = b.stream(src, key_serde="string", value_serde="json")
    grouped = s.group_by(lambda _k, v: v["user"], key_serde="string")
    grouped.aggregate(
        lambda: {"n": 0, "total": 0},
        lambda _k, v, agg: {"n": agg["n"] + 1, "total": agg["total"] + v["amount"]},
        value_serde="json",
    ).to_stream().to(sums, value_serde="json")
    # Order matters to this reducer: the records of a key must be applied in order.
    s.map_values(lambda v: v["page"]).group_by_key().reduce(
        lambda agg, page: f"{agg}>{page}"
    ).to_stream().to(paths, value_serde="string")
    return b.build()


def test_group_by_aggregate_and_reduce(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    src, sums, paths = unique_name("in"), unique_name("sums"), unique_name("paths")
    create_topics(bootstrap_servers, {src: 2, sums: 2, paths: 2})
    recs = [
        (f"s{i % 4}", {"user": f"u{i % 3}", "amount": i, "page": f"p{i % 5}"}, 10_000 + i)
        for i in range(60)
    ]
    produce(bootstrap_servers, src, recs, "string", "json")
    topo = aggregations(src, sums, paths)
    run_spark(spark, topo, unique_name("agg"), bootstrap_servers, tmp_path)

    ref = driver_outputs(
        aggregations(src, sums, paths),
        {src: ("string", "json", recs)},
        {sums: ("string", "json"), paths: ("string", "string")},
    )
    assert final_values(read_all(bootstrap_servers, sums, "string", "json")) == dict(ref[sums])
    assert final_values(read_all(bootstrap_servers, paths, "string", "string")) == dict(ref[paths])
    assert dict(ref[sums])["u0"] == {"n": 20, "total": sum(range(0, 60, 3))}


def table_ops(src: str, out: str) -> Topology:
    b = StreamBuilder()
    (
        b.table(src, key_serde="string", value_serde="json")
        .filter(lambda _k, v: v["active"])
        .map_values(lambda v: v["name"].upper())
        .to_stream()
        .to(out, key_serde="string", value_serde="string")
    )
    return b.build()


def test_table_with_deletes(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    src, out = unique_name("users"), unique_name("names")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    recs: list[tuple[Any, Any, int]] = [
        (f"id{i % 6}", {"name": f"n{i}", "active": i % 4 != 0}, 100 + i) for i in range(30)
    ]
    recs += [("id1", None, 500), ("id2", {"name": "x", "active": False}, 501)]
    produce(bootstrap_servers, src, recs, "string", "json")
    run_spark(spark, table_ops(src, out), unique_name("tbl"), bootstrap_servers, tmp_path)

    ref = driver_outputs(
        table_ops(src, out), {src: ("string", "json", recs)}, {out: ("string", "string")}
    )[out]
    got = final_values(read_all(bootstrap_servers, out, "string", "string"))
    expected: dict[Any, Any] = {}
    for k, v in ref:
        if v is None:
            expected.pop(k, None)
        else:
            expected[k] = v
    assert got == expected
    assert "id1" not in got and "id2" not in got


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    words=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 10_000)),
        min_size=1,
        max_size=40,
    )
)
def test_count_matches_driver(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any, words: Any
) -> None:
    src, out = unique_name("ev"), unique_name("cnt")
    create_topics(bootstrap_servers, {src: 2, out: 2})
    recs = [(f"k{i}", w, ts) for i, (w, ts) in enumerate(words)]
    produce(bootstrap_servers, src, recs, "string", "string")

    def counts(src: str, out: str) -> Topology:
        b = StreamBuilder()
        b.stream(src, key_serde="string", value_serde="string").group_by(
            lambda _k, v: v, key_serde="string"
        ).count().to_stream().to(out, value_serde="long")
        return b.build()

    run_spark(spark, counts(src, out), unique_name("hc"), bootstrap_servers, tmp_path)
    got = final_values(read_all(bootstrap_servers, out, "string", "long"))
    assert got == dict(Counter(w for w, _ in words))
