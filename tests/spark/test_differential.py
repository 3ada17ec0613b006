"""The same topology gives the same results on Spark (local[2], real broker) as on the native
runtime (same broker, same input, exactly-once) and in the test driver.

Spark coalesces a table's updates per key and batch, as a record cache does, so tables are
compared by the value each key ends at; streams are compared record for record. The native
run goes on while Spark runs (it writes to topics of its own). The word count and clicks-per-
minute examples are compared the same way on the standalone cluster
(`tests/spark_cluster/test_examples_on_cluster.py`).
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
    finish_native,
    produce,
    read_all,
    start_native,
)

from kstream.dsl import StreamBuilder
from kstream.kafka.producer import Producer
from kstream.records import Record
from kstream.state import provenance
from kstream.topology.processor import Processor
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

Names = Callable[[str], str]


def run_spark(spark: Any, topology: Topology, app: str, bootstrap: str, tmp: Any) -> None:
    from kstream.spark import run

    run(topology, app, bootstrap, checkpoint_dir=str(tmp / app), spark=spark)


def native(
    topology: Topology, unique_name: Names, bootstrap: str, tmp: Any
) -> Any:  # the started App
    app_id = unique_name("native")
    return start_native(topology, app_id, bootstrap, str(tmp / app_id))


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
    na, nb = unique_name("native-a"), unique_name("native-b")
    create_topics(bootstrap_servers, {src: 2, a: 1, b: 1, na: 1, nb: 1})
    recs = [(f"u{i % 7}", {"n": i}, 5000 + i) for i in range(100)]
    produce(bootstrap_servers, src, recs, "string", "json")
    app = native(stateless(src, na, nb), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, stateless(src, a, b), unique_name("sl"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)

    ref = driver_outputs(
        stateless(src, a, b),
        {src: ("string", "json", recs)},
        {a: ("string", "long"), b: ("string", "long")},
    )

    def pairs(topic: str) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in read_all(bootstrap_servers, topic, "string", "long")]

    assert Counter(pairs(a)) == Counter(pairs(na)) == Counter(ref[a])
    assert Counter(pairs(b)) == Counter(pairs(nb)) == Counter(ref[b])
    assert len(pairs(b)) == 2 * sum(1 for i in range(50, 100) if i % 3)


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
    nsums, npaths = unique_name("native-sums"), unique_name("native-paths")
    create_topics(bootstrap_servers, {src: 2, sums: 2, paths: 2, nsums: 2, npaths: 2})
    recs = [
        (f"s{i % 4}", {"user": f"u{i % 3}", "amount": i, "page": f"p{i % 5}"}, 10_000 + i)
        for i in range(60)
    ]
    produce(bootstrap_servers, src, recs, "string", "json")
    app = native(aggregations(src, nsums, npaths), unique_name, bootstrap_servers, tmp_path)
    run_spark(
        spark, aggregations(src, sums, paths), unique_name("agg"), bootstrap_servers, tmp_path
    )
    finish_native(app, bootstrap_servers)

    ref = driver_outputs(
        aggregations(src, sums, paths),
        {src: ("string", "json", recs)},
        {sums: ("string", "json"), paths: ("string", "string")},
    )

    def table(topic: str, vs: str) -> dict[Any, Any]:
        return final_values(read_all(bootstrap_servers, topic, "string", vs))

    assert table(sums, "json") == table(nsums, "json") == dict(ref[sums])
    assert table(paths, "string") == table(npaths, "string") == dict(ref[paths])
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
    src, out, nat = unique_name("users"), unique_name("names"), unique_name("native-names")
    create_topics(bootstrap_servers, {src: 2, out: 2, nat: 2})
    recs: list[tuple[Any, Any, int]] = [
        (f"id{i % 6}", {"name": f"n{i}", "active": i % 4 != 0}, 100 + i) for i in range(30)
    ]
    recs += [("id1", None, 500), ("id2", {"name": "x", "active": False}, 501)]
    produce(bootstrap_servers, src, recs, "string", "json")
    app = native(table_ops(src, nat), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, table_ops(src, out), unique_name("tbl"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)

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
    assert got == final_values(read_all(bootstrap_servers, nat, "string", "string")) == expected
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
def test_count_matches_driver_and_native(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any, words: Any
) -> None:
    src, out, nat = unique_name("ev"), unique_name("cnt"), unique_name("native-cnt")
    create_topics(bootstrap_servers, {src: 2, out: 2, nat: 2})
    recs = [(f"k{i}", w, ts) for i, (w, ts) in enumerate(words)]
    produce(bootstrap_servers, src, recs, "string", "string")

    def counts(src: str, out: str) -> Topology:
        b = StreamBuilder()
        b.stream(src, key_serde="string", value_serde="string").group_by(
            lambda _k, v: v, key_serde="string"
        ).count().to_stream().to(out, value_serde="long")
        return b.build()

    app = native(counts(src, nat), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, counts(src, out), unique_name("hc"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)
    got = final_values(read_all(bootstrap_servers, out, "string", "long"))
    on_native = final_values(read_all(bootstrap_servers, nat, "string", "long"))
    ref = driver_outputs(
        counts(src, out), {src: ("string", "string", recs)}, {out: ("string", "long")}
    )[out]
    assert got == on_native == final_values_of(ref) == dict(Counter(w for w, _ in words))


class ByTrace(Processor):
    """Passes on records whose `trace` header is even, adding a header of its own."""

    def process(self, record: Record) -> None:
        trace = record.header("trace")
        if trace is not None and int(trace) % 2 == 0:
            headers = [*record.headers, ("seen-by", b"by-trace")]
            self.ctx.forward(Record(record.key, record.value, record.timestamp, headers))


def mapped(src: str, out: str) -> Topology:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").map_values(str.upper).to(
        out, key_serde="string", value_serde="string"
    )
    return b.build()


def routed(src: str, out: str) -> Topology:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").process(ByTrace).to(
        out, key_serde="string", value_serde="string"
    )
    return b.build()


@pytest.mark.parametrize("topology", [mapped, routed], ids=["fast-path", "task-path"])
def test_headers_pass_through_as_on_native(
    spark: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Any,
    topology: Callable[[str, str], Topology],
) -> None:
    """Input headers reach the processors and the output, each output with its provenance id:
    the very same records as the native runtime writes, headers included."""
    src, out, nat = unique_name("in"), unique_name("out"), unique_name("native-out")
    create_topics(bootstrap_servers, {src: 2, out: 2, nat: 2})
    with Producer(bootstrap_servers) as p:
        for i in range(40):
            headers = [("trace", str(i).encode()), ("kind", None)] if i % 4 else None
            p.produce(
                src, f"v{i}".encode(), f"k{i % 5}".encode(), timestamp=100 + i, headers=headers
            )
        p.flush()
    app = native(topology(src, nat), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, topology(src, out), unique_name("hdr"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)

    def written(topic: str) -> Counter[Any]:
        got = read_all(bootstrap_servers, topic, "string", "string")
        return Counter((r.key, r.value, r.timestamp, tuple(r.headers)) for r in got)

    got = written(out)
    assert got == written(nat)
    assert sum(got.values()) == (40 if topology is mapped else 10)
    for _k, value, _ts, headers in got:
        i = int(value[1:])
        names = [h for h, _ in headers]
        if i % 4 == 0:
            assert names == ["kstream.src"]
        else:
            extra = ["seen-by"] if topology is routed else []
            assert names == ["trace", "kind", *extra, "kstream.src"]
            assert dict(headers)["trace"] == str(i).encode()
        assert provenance.from_headers(list(headers)).topic == src  # type: ignore[union-attr]
