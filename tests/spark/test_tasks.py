"""Topologies with state run on Spark with kstream's own tasks, as in the driver and on
the native runtime.

Stream time is per task, i.e. per partition (as in Kafka Streams and the native runtime), so
where it decides the outcome (late records, final windows, dedup expiry) a multi-partition input
is compared with one driver per partition; single-partition inputs are compared with one driver,
record for record. The native runtime reads the same input topics (writing to topics of its
own) while Spark runs, and must end with the same results. The clicks-per-minute example is
compared the same way on the standalone cluster (`tests/spark_cluster/`).
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
    driver_in_time_order,
    driver_outputs,
    final_table,
    final_values,
    finish_native,
    per_partition_driver,
    produce,
    read_all,
    start_native,
)

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.dsl.windowed import session_windowed_serde, time_windowed_serde
from kstream.dsl.windows import JoinWindows, SessionWindows, TimeWindows
from kstream.records import Record
from kstream.topology.processor import Processor
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

Names = Callable[[str], str]


def run_spark(spark: Any, topology: Topology, app: str, bootstrap: str, tmp: Any) -> None:
    from kstream.spark import run

    run(topology, app, bootstrap, checkpoint_dir=str(tmp / app), spark=spark)


def pairs(bootstrap: str, topic: str, ks: Any, vs: Any) -> list[tuple[Any, Any]]:
    return [(r.key, r.value) for r in read_all(bootstrap, topic, ks, vs)]


def native(topology: Topology, unique_name: Names, bootstrap: str, tmp: Any) -> Any:
    """The native runtime started on `topology` (see `spark_helpers.finish_native`)."""
    app_id = unique_name("native")
    return start_native(topology, app_id, bootstrap, str(tmp / app_id))


def test_payments_dedup(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    from examples.payments_dedup import build_topology

    src, out, nat = unique_name("payments"), unique_name("deduped"), unique_name("native-dd")
    create_topics(bootstrap_servers, {src: 2, out: 2, nat: 2})
    hour = 3_600_000
    recs: list[tuple[Any, Any, int]] = []
    for i in range(60):
        acct = f"acct{i % 4}"
        ts = 10_000 + i * 120_000  # two minutes apart: retries after an hour count as new
        recs.append((acct, {"idempotency_key": f"p{i % 20}-{acct}", "amount": i}, ts))
        if i % 5 == 0:
            recs.append((acct, {"idempotency_key": None, "amount": -i}, ts + 1))
    recs.append(("acct0", "not a dict", 60 * 120_000 + hour))
    produce(bootstrap_servers, src, recs, "string", "json")
    app = native(build_topology(src, nat), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, build_topology(src, out), unique_name("dd"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)

    ref = per_partition_driver(
        lambda: build_topology(src, out), src, "string", "json", recs, 2, {out: ("string", "json")}
    )[out]
    got = pairs(bootstrap_servers, out, "string", "json")
    on_native = pairs(bootstrap_servers, nat, "string", "json")
    assert sorted(map(repr, got)) == sorted(map(repr, on_native)) == sorted(map(repr, ref))
    for acct in {k for k, _ in ref}:  # per key, in order
        want = [v for k, v in ref if k == acct]
        assert [v for k, v in got if k == acct] == [v for k, v in on_native if k == acct] == want
    assert len(ref) < len(recs)


def test_orders_enriched(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    from examples.orders_enriched import build_topology

    orders, customers = unique_name("orders"), unique_name("customers")
    products, out = unique_name("products"), unique_name("enriched")
    nat = unique_name("native-enriched")
    create_topics(bootstrap_servers, {orders: 2, customers: 2, products: 1, out: 2, nat: 2})
    prods = [(f"p{i}", {"name": f"product {i}", "price": 10 + i}, 100 + i) for i in range(4)]
    custs: list[tuple[Any, Any, int]] = [
        (f"c{i}", {"name": f"customer {i}", "region": f"r{i % 2}"}, 200 + i) for i in range(5)
    ]
    # a move half-way: earlier orders keep the old region, later ones get the new one
    custs.append(("c1", {"name": "customer 1", "region": "moved"}, 1_030))
    ords = [
        (
            f"o{i}",
            {"customer_id": f"c{i % 6}", "product_id": f"p{i % 5}", "quantity": 1 + i % 3},
            1_000 + i,
        )
        for i in range(60)
    ]
    produce(bootstrap_servers, products, prods, "string", "json")
    produce(bootstrap_servers, customers, custs, "string", "json")
    produce(bootstrap_servers, orders, ords, "string", "json")

    def topo(out: str = out) -> Topology:
        return build_topology(orders, customers, products, out)

    app = native(topo(nat), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, topo(), unique_name("oe"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)

    ref = driver_in_time_order(
        topo(),
        {
            products: ("string", "json", prods),
            customers: ("string", "json", custs),
            orders: ("string", "json", ords),
        },
        {out: ("string", "json")},
    )[out]
    got = pairs(bootstrap_servers, out, "string", "json")
    assert len(got) == len(ref) == 50  # orders of the unknown customer c5 are dropped
    diff = {k: (v["region"], dict(ref)[k]["region"]) for k, v in got if dict(ref)[k] != v}
    assert dict(got) == dict(ref), diff
    assert dict(got)["o4"]["product"] is None  # unknown product: left join
    assert dict(got)["o1"]["region"] == "r1" and dict(got)["o31"]["region"] == "moved"
    # The native runtime joins each order with the customer as it is when the re-keyed order
    # arrives through the repartition topic, which here is after the move: where the table
    # changes mid-stream its result depends on timing (as in Kafka Streams), while Spark runs
    # the re-keying query to its end first and then merges both sides by time. Everything else
    # is the same.
    on_native = dict(pairs(bootstrap_servers, nat, "string", "json"))
    assert on_native.keys() == dict(got).keys()
    moved = {k for k, v in got if v["customer_id"] == "c1"}
    assert {k: v for k, v in on_native.items() if k not in moved} == {
        k: v for k, v in got if k not in moved
    }
    assert all(on_native[k]["region"] in ("r1", "moved") for k in moved)


def mixed(src: str, clicks: str, views: str, totals: str, sessions: str, joined: str) -> Topology:
    """Chained stateful operators, KTable re-grouping, session windows, a stream-stream join."""
    b = StreamBuilder()
    words = b.stream(src, key_serde="string", value_serde="string")
    # count per word, then how many words have each count (re-grouping a KTable)
    words.group_by(lambda _k, w: w, key_serde="string").count().group_by(
        lambda w, n: (str(n), w), key_serde="string", value_serde="string"
    ).count().to_stream().to(totals, value_serde="long")
    (
        words.group_by_key()
        .windowed_by(SessionWindows.with_gap(50, grace=10))
        .count(emit="final")
        .to_stream()
        .to(sessions)
    )
    c = b.stream(clicks, key_serde="string", value_serde="string")
    v = b.stream(views, key_serde="string", value_serde="string")
    c.join(v, lambda a, z: f"{a}+{z}", window=JoinWindows.of(20)).to(
        joined, key_serde="string", value_serde="string"
    )
    return b.build()


def test_mixed_stateful_operators(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    src, clicks, views = unique_name("w"), unique_name("c"), unique_name("v")
    totals, sessions, joined = unique_name("tot"), unique_name("ses"), unique_name("j")
    create_topics(
        bootstrap_servers, {src: 1, clicks: 1, views: 1, totals: 1, sessions: 1, joined: 1}
    )
    ws = [(f"k{i % 3}", f"w{(i * 7) % 5}", 1_000 + i * 17 - (i % 4) * 9) for i in range(40)]
    cs = [(f"u{i % 3}", f"c{i}", 2_000 + i * 11) for i in range(20)]
    vs = [(f"u{i % 4}", f"v{i}", 2_005 + i * 13) for i in range(20)]
    produce(bootstrap_servers, src, ws, "string", "string")
    produce(bootstrap_servers, clicks, cs, "string", "string")
    produce(bootstrap_servers, views, vs, "string", "string")

    def topo() -> Topology:
        return mixed(src, clicks, views, totals, sessions, joined)

    run_spark(spark, topo(), unique_name("mix"), bootstrap_servers, tmp_path)

    sks = session_windowed_serde("string")
    ref = driver_in_time_order(
        topo(),
        {
            src: ("string", "string", ws),
            clicks: ("string", "string", cs),
            views: ("string", "string", vs),
        },
        {totals: ("string", "long"), sessions: (sks, "long"), joined: ("string", "string")},
    )
    assert final_values(read_all(bootstrap_servers, totals, "string", "long")) == final_table(
        ref[totals]
    )
    assert pairs(bootstrap_servers, sessions, sks, "long") == ref[sessions]
    assert Counter(pairs(bootstrap_servers, joined, "string", "string")) == Counter(ref[joined])
    assert ref[sessions] and ref[joined]


def windowed_part(b: StreamBuilder, src: str, out: str) -> None:
    (
        b.stream(src, key_serde="string", value_serde="long")
        .group_by_key()
        .windowed_by(TimeWindows.of(100, advance=50, grace=30))
        # windows close on stream time only: the same on every engine, whatever the wall clock
        .aggregate(
            lambda: 0,
            lambda _k, v, agg: agg + v,
            value_serde="long",
            emit="final",
            idle_close=None,
        )
        .to_stream()
        .to(out)
    )


def windowed_sums(*pairs: tuple[str, str]) -> Topology:
    """`windowed_part` from each `(source, output)` pair: independent sub-topologies."""
    b = StreamBuilder()
    for src, out in pairs:
        windowed_part(b, src, out)
    return b.build()


events = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 9), st.integers(1, 1_000)),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(inputs=st.lists(events, min_size=3, max_size=3))
def test_windowed_aggregate_matches_driver_and_native(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any, inputs: Any
) -> None:
    """Hopping windows with grace and emit final over random, out-of-order timestamps.

    Three generated inputs, each through a sub-topology of its own: one Spark run (their
    queries side by side) and one native app for the three, a driver per input and partition.
    """
    srcs = [unique_name("ev") for _ in inputs]
    outs = [unique_name("win") for _ in inputs]
    nats = [unique_name("native-win") for _ in inputs]
    create_topics(bootstrap_servers, {t: 2 for t in (*srcs, *outs, *nats)})
    for src, recs in zip(srcs, inputs, strict=True):
        produce(bootstrap_servers, src, recs, "string", "long")
    app = native(
        windowed_sums(*zip(srcs, nats, strict=True)), unique_name, bootstrap_servers, tmp_path
    )
    run_spark(
        spark,
        windowed_sums(*zip(srcs, outs, strict=True)),
        unique_name("hw"),
        bootstrap_servers,
        tmp_path,
    )
    finish_native(app, bootstrap_servers)

    ks = time_windowed_serde("string", 100)
    for src, out, nat, recs in zip(srcs, outs, nats, inputs, strict=True):
        ref = per_partition_driver(
            lambda src=src, out=out: windowed_sums((src, out)),
            src,
            "string",
            "long",
            recs,
            2,
            {out: (ks, "long")},
        )[out]
        got = Counter(pairs(bootstrap_servers, out, ks, "long"))
        assert got == Counter(pairs(bootstrap_servers, nat, ks, "long")) == Counter(ref)


def test_task_path_keeps_driver_order_on_one_partition(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    """Same input, one partition: the very same records in the very same order.

    The query's checkpoint starts with what a query stopped while logging its first batch
    leaves behind (a temporary file, on which Spark would refuse to start): it is cleared.
    """
    from kstream.spark.tasks import build_task_plan

    src, out = unique_name("ev"), unique_name("win")
    create_topics(bootstrap_servers, {src: 1, out: 1})
    recs = [(f"k{i % 3}", i, 1 + (i * 37) % 500) for i in range(50)]  # 0: "now" to Kafka
    produce(bootstrap_servers, src, recs, "string", "long")
    app = unique_name("w1")
    (sid,) = build_task_plan(windowed_sums((src, out)), app).order
    offsets = tmp_path / app / f"subtopology-{sid}" / "offsets"
    offsets.mkdir(parents=True)
    left = [offsets / ".0.3f3b8873-2fdc-443e-84ee-60b512d65bd3.tmp"]
    left.append(offsets / f".{left[0].name}.crc")
    for f in left:
        f.write_bytes(b"")
    run_spark(spark, windowed_sums((src, out)), app, bootstrap_servers, tmp_path)
    assert not any(f.exists() for f in left)
    assert (offsets / "0").exists()

    ks = time_windowed_serde("string", 100)
    ref = driver_outputs(
        windowed_sums((src, out)), {src: ("string", "long", recs)}, {out: (ks, "long")}
    )
    assert pairs(bootstrap_servers, out, ks, "long") == ref[out]


class Held(Processor):
    """Holds records in its store; passes them on, in offset order, when the wall clock says."""

    def init(self, ctx: Any) -> None:
        super().init(ctx)
        self.held = ctx.get_store("held")
        ctx.schedule(1, "wall_clock", self.release)

    def process(self, record: Record) -> None:
        self.held.put(record.offset, record.value)

    def release(self, now: int) -> None:
        with self.held.all() as cur:
            entries = list(cur)
        for offset, value in entries:
            self.held.delete(offset)
            self.ctx.forward(Record(offset, value, now))


def test_wall_clock_punctuation_fires_per_micro_batch(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    """A punctuation due fires at the end of the batch: what one batch holds the next releases."""
    from kstream.spark import run

    src, out = unique_name("in"), unique_name("out")
    create_topics(bootstrap_servers, {src: 1, out: 1})
    produce(
        bootstrap_servers, src, [("k", f"v{i}", 1_000 + i) for i in range(30)], "string", "string"
    )
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").process(
        Held, stores=[stores.key_value("held", key_serde="long", value_serde="string")]
    ).to(out, key_serde="long", value_serde="string")
    app = unique_name("held")
    run(
        b.build(),
        app,
        bootstrap_servers,
        checkpoint_dir=str(tmp_path / app),
        spark=spark,
        max_records_per_batch=10,  # three batches: the first holds, the next two release
    )
    assert pairs(bootstrap_servers, out, "long", "string") == [(i, f"v{i}") for i in range(30)]


def test_repeats_of_an_aborted_transaction_are_processed_once(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Any
) -> None:
    """An upstream kstream writer aborts a transaction and writes the same records again (the
    same provenance ids). Where a broker still shows the aborted ones (this test broker does),
    Spark drops the repeats as the native runtime does: the same windows as with one copy."""
    from kstream.kafka.producer import Producer
    from kstream.serde import serde
    from kstream.state import provenance

    src, out, nat = unique_name("ev"), unique_name("win"), unique_name("native-win")
    create_topics(bootstrap_servers, {src: 1, out: 1, nat: 1})
    recs = [(f"k{i % 3}", i, 10 + i * 7) for i in range(30)]
    ks, vs = serde("string"), serde("long")

    def write(p: Producer, first: int, last: int) -> None:
        for i in range(first, last):
            k, v, ts = recs[i]
            hdrs = [(provenance.HEADER, provenance.encode("upstream", 0, 100 + i))]
            p.produce(src, vs.to_bytes(v), ks.to_bytes(k), timestamp=ts, headers=hdrs)

    with Producer(bootstrap_servers, transactional_id=unique_name("txn")) as p:
        p.begin()
        write(p, 0, 20)
        p.flush()
        p.abort()
        p.begin()
        write(p, 0, 30)
        p.commit()
    shown = len(read_all(bootstrap_servers, src, "string", "long", keep_repeats=True))
    app = native(windowed_sums((src, nat)), unique_name, bootstrap_servers, tmp_path)
    run_spark(spark, windowed_sums((src, out)), unique_name("ab"), bootstrap_servers, tmp_path)
    finish_native(app, bootstrap_servers)

    wks = time_windowed_serde("string", 100)
    ref = driver_outputs(
        windowed_sums((src, out)), {src: ("string", "long", recs)}, {out: (wks, "long")}
    )[out]
    got = pairs(bootstrap_servers, out, wks, "long")
    assert got == ref
    assert pairs(bootstrap_servers, nat, wks, "long") == ref
    # read_committed readers of this broker are shown the aborted copies too (on a broker that
    # hides them, 30): either way each record counts once
    assert shown in (30, 50)


def row(
    collector: Any, src: tuple[str, int, int], topic: str, key: bytes | None, part: int | None
) -> None:
    """One sink record whose input record was `src` (topic, partition, offset), as a sink
    hands it to the task's collector."""
    from kstream.records import Record

    collector.send_many(topic, [Record(key, b"v", 1, (), *src)], [key], [b"v"], [part])


def test_a_tasks_provenance_ids_grow_in_the_order_it_writes() -> None:
    """A row carrying an older record's context than rows written before it (an update a
    cache or suppress buffer held back, a window closing late) takes the next id after the
    highest written for its source partition, across batches too (the task's metadata), so
    the next sub-topology's repeat check (`HighMarks`) never takes it for a repeat."""
    from kstream.broker_compat import HighMarks
    from kstream.spark.task_rows import TaskRows
    from kstream.state import provenance

    def written(collector: TaskRows, sources: list[tuple[str, int, int]]) -> list[Any]:
        for src in sources:
            row(collector, src, "out", b"k", 0)
        cols = collector.take()
        return list(zip(cols["ptopic"], cols["ppart"], cols["poff"], cols["seq"], strict=True))

    first = TaskRows({"out": 1})
    ids = written(first, [("in", 0, 5), ("in", 0, 3), ("in", 1, 2), ("in", 0, 5), ("in", 0, 7)])
    assert ids == [
        ("in", 0, 5, 0),
        ("in", 0, 5, 1),
        ("in", 1, 2, 0),
        ("in", 0, 5, 2),
        ("in", 0, 7, 0),
    ]
    later = TaskRows({"out": 1}, high=first.high)  # the next batch: a held-back update of 6
    ids += written(later, [("in", 0, 6), ("in", 0, 9)])
    assert ids[-2:] == [("in", 0, 7, 1), ("in", 0, 9, 0)]
    marks = HighMarks()
    assert all(marks.admit("rep", provenance.encode(*i), 0, None) for i in ids)


def test_a_row_without_a_key_goes_to_the_tasks_own_partition() -> None:
    """A keyless row (a left foreign-key join's subscription for a row without a foreign key)
    is placed by the task: left to the producer it could land in a partition another write
    slot writes in the same batch, and the ids in that partition would not grow in write
    order (a reader drops the later ones as repeats). Keyed rows go by their key."""
    from kstream.spark.sink import destination
    from kstream.spark.task_rows import TaskRows

    for task in range(5):
        c = TaskRows({"subs": 2, "out": 3}, partition=task)
        row(c, ("in", task, 1), "subs", None, None)
        row(c, ("in", task, 2), "out", None, None)
        row(c, ("in", task, 3), "out", b"k", None)
        row(c, ("in", task, 4), "missing", None, None)
        assert c.take()["part"] == [
            task % 2,
            task % 3,
            destination("out", b"k", None, {"out": 3}),
            None,
        ]


def test_a_versioned_tables_batches_read_what_they_touch() -> None:
    """A task opens its stores every batch; a versioned store purging afresh at each opening
    would scan every key's latest version per batch. With the purge mark in the task's
    metadata, a batch of a few records reads a few entries of a table of 2,000 keys."""
    from kstream.dsl.joined import Joined
    from kstream.serde import serde
    from kstream.spark.task_state import DictMap, MapBackend
    from kstream.spark.tasks import TaskRun, build_task_plan

    b = StreamBuilder()
    prices = b.table("prices", key_serde="string", value_serde="long", versioned=1000)
    b.stream("orders", key_serde="string", value_serde="long").join(
        prices, lambda o, p: o * p, joined=Joined.with_grace_period(10)
    ).to("out", key_serde="string", value_serde="long")
    plan = build_task_plan(b.build(), "app")
    plan.partitions = {"prices": 1, "orders": 1, "out": 1}
    maps: dict[str, DictMap] = {}
    dirs: dict[str, dict[bytes, list[int]]] = {}
    meta: dict[str, Any] = {}
    s, ln = serde("string"), serde("long")

    def batch(records: list[Record]) -> list[Any]:
        backends: list[MapBackend] = []

        def backend(spec: Any) -> MapBackend:
            m = maps.setdefault(spec.name, DictMap())
            got = MapBackend(spec.name, spec.kind, m, dirs.setdefault(spec.name, {}))
            backends.append(got)
            return got

        task = TaskRun(plan, 0, 0, meta, backend)
        try:
            cols = task.run(records)
            for got in backends:
                got.sync()
            meta.clear()
            meta.update(task.snapshot())
        finally:
            task.close()
        pairs = zip(cols["k"], cols["v"], strict=True)
        return [(s.from_bytes(k), ln.from_bytes(v)) for k, v in pairs]

    def rec(topic: str, key: str, value: int, ts: int, offset: int) -> Record:
        return Record(s.to_bytes(key), ln.to_bytes(value), ts, (), topic, 0, offset)

    batch([rec("prices", f"p{i}", i, 100 + i % 50, i) for i in range(2000)])
    for m in maps.values():
        m.reads = 0
    orders = [rec("orders", f"p{i}", 2, 200 + i, i) for i in range(3)]
    out = batch([*orders, rec("prices", "p1", 7, 205, 2000)])
    assert sum(m.reads for m in maps.values()) < 20
    out += batch([rec("orders", "p9", 1, 300, 3)])  # stream time passes the grace: released
    assert out == [("p0", 0), ("p1", 2), ("p2", 4)]
