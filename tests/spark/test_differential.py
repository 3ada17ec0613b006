"""The same topology gives the same results on Spark (local[2], real broker) as on the native
runtime (same broker, same input, exactly-once) and in the test driver.

Spark runs kstream's own tasks, but how many updates of a table the native runtime forwards
depends on its record cache and commit timing, so tables are compared by the value each key
ends at; streams are compared record for record. The native
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
    final_table,
    final_values,
    finish_native,
    produce,
    read_all,
    start_native,
)

from kstream.config import Config
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


# --- independent parts of one topology ----------------------------------------------------
# A Spark query (and a native app) costs seconds before its first record, so these cases run
# as independent parts of one topology: one Spark run (a query per sub-topology) and one
# native app run all the parts, and each part is checked against a test driver of its own.


def stateless(b: StreamBuilder, src: str, out_a: str, out_b: str) -> None:
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


def aggregations(b: StreamBuilder, src: str, sums: str, paths: str) -> None:
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


def table_ops(b: StreamBuilder, src: str, out: str) -> None:
    (
        b.table(src, key_serde="string", value_serde="json")
        .filter(lambda _k, v: v["active"])
        .map_values(lambda v: v["name"].upper())
        .to_stream()
        .to(out, key_serde="string", value_serde="string")
    )


def mapped(b: StreamBuilder, src: str, out: str) -> None:
    b.stream(src, key_serde="string", value_serde="string").map_values(str.upper).to(
        out, key_serde="string", value_serde="string"
    )


def counts(b: StreamBuilder, src: str, out: str) -> None:
    b.stream(src, key_serde="string", value_serde="string").group_by(
        lambda _k, v: v, key_serde="string"
    ).count().to_stream().to(out, value_serde="long")


Part = Callable[..., None]


def built(*parts: tuple[Part, tuple[str, ...]]) -> Topology:
    """One topology of independent parts, each `(part, its topics)`."""
    b = StreamBuilder()
    for part, topics in parts:
        part(b, *topics)
    return b.build()


class Case:
    """One part's topics, under names of their own for Spark and for the native app."""

    def __init__(self, part: Part, unique_name: Names, src: str, *outs: str) -> None:
        self.part = part
        self.src = unique_name(src)
        self.outs = tuple(unique_name(o) for o in outs)
        self.native_outs = tuple(unique_name(f"native-{o}") for o in outs)

    def spark(self) -> tuple[Part, tuple[str, ...]]:
        return self.part, (self.src, *self.outs)

    def native(self) -> tuple[Part, tuple[str, ...]]:
        return self.part, (self.src, *self.native_outs)

    def alone(self) -> Topology:
        """This part alone (Spark's topic names), for its test driver."""
        return built(self.spark())

    def topics(self, partitions: int) -> dict[str, int]:
        return {t: partitions for t in (self.src, *self.outs, *self.native_outs)}


def run_both(spark: Any, cases: list[Case], unique_name: Names, bootstrap: str, tmp: Any) -> None:
    """Run the cases' parts as one topology on Spark and on the native runtime."""
    on_spark = built(*(c.spark() for c in cases))
    app = native(built(*(c.native() for c in cases)), unique_name, bootstrap, tmp)
    run_spark(spark, on_spark, unique_name("parts"), bootstrap, tmp)
    finish_native(app, bootstrap)


def test_stateless_and_keyed_parts_match_driver_and_native(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    """Stateless branches, an aggregate and a reduce, a table with deletes, headers."""
    branches = Case(stateless, unique_name, "in", "a", "b")
    aggs = Case(aggregations, unique_name, "in", "sums", "paths")
    table = Case(table_ops, unique_name, "users", "names")
    headers = Case(mapped, unique_name, "in", "out")
    cases = [branches, aggs, table, headers]
    topics: dict[str, int] = {}
    for c in cases:
        topics.update(c.topics(1 if c is branches else 2))
    topics[branches.src] = 2
    create_topics(bootstrap_servers, topics)

    branch_recs = [(f"u{i % 7}", {"n": i}, 5000 + i) for i in range(100)]
    produce(bootstrap_servers, branches.src, branch_recs, "string", "json")
    agg_recs = [
        (f"s{i % 4}", {"user": f"u{i % 3}", "amount": i, "page": f"p{i % 5}"}, 10_000 + i)
        for i in range(60)
    ]
    produce(bootstrap_servers, aggs.src, agg_recs, "string", "json")
    users: list[tuple[Any, Any, int]] = [
        (f"id{i % 6}", {"name": f"n{i}", "active": i % 4 != 0}, 100 + i) for i in range(30)
    ]
    users += [("id1", None, 500), ("id2", {"name": "x", "active": False}, 501)]
    produce(bootstrap_servers, table.src, users, "string", "json")
    produce_with_headers(bootstrap_servers, headers.src)

    run_both(spark, cases, unique_name, bootstrap_servers, tmp_path)

    def pairs(topic: str) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in read_all(bootstrap_servers, topic, "string", "long")]

    # stateless branches: record for record
    a, b = branches.outs
    na, nb = branches.native_outs
    ref = driver_outputs(
        branches.alone(),
        {branches.src: ("string", "json", branch_recs)},
        {a: ("string", "long"), b: ("string", "long")},
    )
    assert Counter(pairs(a)) == Counter(pairs(na)) == Counter(ref[a])
    assert Counter(pairs(b)) == Counter(pairs(nb)) == Counter(ref[b])
    assert len(pairs(b)) == 2 * sum(1 for i in range(50, 100) if i % 3)

    # group_by + aggregate, group_by_key + reduce: the value each key ends at
    sums, paths = aggs.outs
    nsums, npaths = aggs.native_outs
    ref = driver_outputs(
        aggs.alone(),
        {aggs.src: ("string", "json", agg_recs)},
        {sums: ("string", "json"), paths: ("string", "string")},
    )

    def table_of(topic: str, vs: str) -> dict[Any, Any]:
        return final_values(read_all(bootstrap_servers, topic, "string", vs))

    assert table_of(sums, "json") == table_of(nsums, "json") == dict(ref[sums])
    assert table_of(paths, "string") == table_of(npaths, "string") == dict(ref[paths])
    assert dict(ref[sums])["u0"] == {"n": 20, "total": sum(range(0, 60, 3))}

    # a table's filter and map_values, with deletes
    (names,), (nnames,) = table.outs, table.native_outs
    ref_names = driver_outputs(
        table.alone(), {table.src: ("string", "json", users)}, {names: ("string", "string")}
    )[names]
    assert table_of(names, "string") == table_of(nnames, "string") == final_table(ref_names)
    assert "id1" not in table_of(names, "string") and "id2" not in table_of(names, "string")

    # headers reach the output with the provenance id, the very same records as on native
    check_headers(
        bootstrap_servers, headers.outs[0], headers.native_outs[0], headers.src, by_trace=False
    )


@settings(
    max_examples=1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    inputs=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 10_000)),
            min_size=1,
            max_size=40,
        ),
        min_size=3,
        max_size=3,
    )
)
def test_count_matches_driver_and_native(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any, inputs: Any
) -> None:
    """Three generated inputs, each counted by a part of its own (one query for the three)."""
    cases = [Case(counts, unique_name, "ev", "cnt") for _ in inputs]
    topics: dict[str, int] = {}
    for c in cases:
        topics.update(c.topics(2))
    create_topics(bootstrap_servers, topics)
    recs = [[(f"k{i}", w, ts) for i, (w, ts) in enumerate(words)] for words in inputs]
    for c, r in zip(cases, recs, strict=True):
        produce(bootstrap_servers, c.src, r, "string", "string")

    run_both(spark, cases, unique_name, bootstrap_servers, tmp_path)
    for c, r, words in zip(cases, recs, inputs, strict=True):
        (out,), (nat,) = c.outs, c.native_outs
        got = final_values(read_all(bootstrap_servers, out, "string", "long"))
        on_native = final_values(read_all(bootstrap_servers, nat, "string", "long"))
        ref = driver_outputs(c.alone(), {c.src: ("string", "string", r)}, {out: ("string", "long")})
        assert got == on_native == final_table(ref[out]) == dict(Counter(w for w, _ in words))


class ByTrace(Processor):
    """Passes on records whose `trace` header is even, adding a header of its own."""

    def process(self, record: Record) -> None:
        trace = record.header("trace")
        if trace is not None and int(trace) % 2 == 0:
            headers = [*record.headers, ("seen-by", b"by-trace")]
            self.ctx.forward(Record(record.key, record.value, record.timestamp, headers))


def routed(src: str, out: str) -> Topology:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").process(ByTrace).to(
        out, key_serde="string", value_serde="string"
    )
    return b.build()


def produce_with_headers(bootstrap: str, topic: str) -> None:
    """40 records; three in four carry a `trace` header (their number) and a null `kind`."""
    with Producer(bootstrap) as p:
        for i in range(40):
            headers = [("trace", str(i).encode()), ("kind", None)] if i % 4 else None
            p.produce(
                topic, f"v{i}".encode(), f"k{i % 5}".encode(), timestamp=100 + i, headers=headers
            )
        p.flush()


def check_headers(bootstrap: str, out: str, nat: str, src: str, *, by_trace: bool) -> None:
    """Spark wrote what the native runtime wrote, headers included; both stamp each output with
    its provenance id only with the broker-compatibility component on (broker_compat="tansu");
    with `by_trace`, only ByTrace's records, with its own header added."""
    stamp = provenance.HEADER

    def written(topic: str) -> tuple[Counter[Any], list[Any]]:
        got = read_all(bootstrap, topic, "string", "string")
        plain = Counter(
            (r.key, r.value, r.timestamp, tuple(h for h in r.headers if h[0] != stamp)) for r in got
        )
        return plain, [provenance.from_headers(list(r.headers)) for r in got]

    (got, spark_ids), (nat_got, native_ids) = written(out), written(nat)
    assert got == nat_got
    assert sum(got.values()) == (10 if by_trace else 40)
    if Config().broker_compat == "tansu":
        assert all(p is not None and p.topic == src for p in spark_ids)
        assert all(p is not None and p.topic == src for p in native_ids)
    else:
        assert spark_ids == [None] * len(spark_ids)
        assert native_ids == [None] * len(native_ids)
    for _k, value, _ts, headers in got:
        i = int(value[1:])
        names = [h for h, _ in headers]
        if i % 4 == 0:
            assert names == []
        else:
            extra = ["seen-by"] if by_trace else []
            assert names == ["trace", "kind", *extra]
            assert dict(headers)["trace"] == str(i).encode()


def test_headers_pass_through_a_user_processor_as_on_native(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    """Input headers reach a user processor (a task with Spark state) and the output (a
    stateless part's are in `test_stateless_and_keyed_parts_match_driver_and_native`)."""
    src, out, nat = unique_name("in"), unique_name("out"), unique_name("native-out")
    create_topics(bootstrap_servers, {src: 2, out: 2, nat: 2})
    produce_with_headers(bootstrap_servers, src)
    app = native(routed(src, nat), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, routed(src, out), unique_name("hdr"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)
    check_headers(bootstrap_servers, out, nat, src, by_trace=True)
