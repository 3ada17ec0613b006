"""How a topology becomes Spark queries (`kstream.spark.tasks.build_task_plan`), and what
crosses to Spark's workers."""

from __future__ import annotations

from typing import Any

import pytest

from examples.word_count import build_topology as word_count
from kstream.dsl import StreamBuilder
from kstream.errors import ConfigError
from kstream.topology.processor import Processor
from kstream.topology.topology import SourceDef

pytest.importorskip("pyspark")


class Upper(Processor):
    def process(self, record: Any) -> None:
        self.ctx.forward(record.with_value(record.value.upper()))


def test_a_stateless_topology_is_one_query_in_the_read_tasks() -> None:
    """No state, no repartition: one sub-topology, run inside the source's read tasks."""
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("in").filter(lambda _k, v: v).map_values(str.upper).to("out")
    plan = build_task_plan(b.build(), "app")
    assert len(plan.order) == 1
    assert plan.stateful == set()
    assert plan.repartition_topics == []


def test_word_count_is_one_query_its_repartition_hop_spark_s_shuffle() -> None:
    """The re-keying runs in the read tasks of the count's query, whose tasks (Spark state)
    get what the repartition topic would have held through Spark's shuffle; a checkpoint
    written with two queries keeps them (`unfuse`)."""
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(word_count("lines", "counts"), "app")
    rekey = plan.compiled.subtopology_for_topic("lines").id
    [hop] = plan.repartition_topics
    [count] = [s.id for s in plan.compiled.subtopologies if hop in s.source_topics]
    assert plan.order == [count]
    assert plan.fused == {count: rekey}
    assert plan.read_topics(count) == ["lines"]
    assert plan.stateful == {count}
    assert plan.upstream == {count: set()}
    assert plan.user_sink_topics == ["counts"]
    plan.unfuse({rekey})
    assert plan.order == [rekey, count] and plan.fused == {}
    assert plan.upstream == {rekey: set(), count: {rekey}}
    assert plan.read_topics(count) == [hop]


def test_a_hop_is_fused_only_where_spark_s_shuffle_is_all_it_is() -> None:
    """Not fused: a re-keyed stream joined with a table (the task merges two topics), a
    repartition topic that two sub-topologies write, and one whose writer also writes an
    output topic."""
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    table = b.table("users", key_serde="string", value_serde="string")
    b.stream("clicks").select_key(lambda _k, v: v).join(table, lambda c, u: u).to("out")
    assert build_task_plan(b.build(), "app").fused == {}

    b = StreamBuilder()
    one = b.stream("a").select_key(lambda _k, v: v)
    two = b.stream("b").select_key(lambda _k, v: v)
    one.merge(two).group_by_key().count().to_stream().to("out")
    assert build_task_plan(b.build(), "app").fused == {}

    b = StreamBuilder()
    keyed = b.stream("a").select_key(lambda _k, v: v)
    keyed.to("copy")
    keyed.group_by_key().count().to_stream().to("out")
    assert build_task_plan(b.build(), "app").fused == {}


def test_user_processors_and_chained_aggregations_keep_spark_state() -> None:
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("in").process(Upper, name="shout").to("out")
    assert build_task_plan(b.build(), "app").stateful == {0}
    b = StreamBuilder()
    counts = b.stream("in", key_serde="string").group_by_key().count()
    counts.to_stream().group_by(lambda _k, n: n).count().to_stream().to("out")
    plan = build_task_plan(b.build(), "app")
    assert plan.stateful == set(plan.order) and len(plan.order) == 2


def test_the_plan_pickles_builtin_serdes_by_name() -> None:
    from kstream.serde import BUILTIN
    from kstream.spark.tasks import build_task_plan
    from kstream.spark.wire import dumps, loads

    plan = build_task_plan(word_count("lines", "counts"), "app")
    again = loads(dumps(plan))
    [src] = [
        n
        for n in again.compiled.topology.nodes.values()
        if isinstance(n, SourceDef) and "lines" in n.topics
    ]
    assert src.value_serde is BUILTIN["string"]


def test_trigger_parsing() -> None:
    from kstream.spark.runner import parse_trigger

    assert parse_trigger("availableNow") == {"availableNow": True}
    assert parse_trigger("processingTime=1s") == {"processingTime": "1000 milliseconds"}
    with pytest.raises(ConfigError, match="trigger"):
        parse_trigger("once")


def test_every_example_runs_and_queries_are_ordered_upstream_first() -> None:
    from examples import clicks_per_minute, orders_enriched, payments_dedup, word_count
    from kstream.spark.tasks import build_task_plan

    for module in (clicks_per_minute, payments_dedup, orders_enriched, word_count):
        build_task_plan(module.build_topology(), "app")
    plan = build_task_plan(orders_enriched.build_topology(), "app")
    compiled = plan.compiled
    rekey = compiled.subtopology_for_topic("orders").id
    join = compiled.subtopology_for_topic("customers").id
    assert plan.order == [rekey, join]
    assert plan.stateful == {join}  # the re-keying side runs without state
    assert plan.repartition_topics == ["app-orders-by-customer-repartition"]
    assert plan.global_topics == ["products"]


def settled(topics: list[str], stopped: Any) -> None:
    """No broker here: nothing to wait for."""


class FakeQuery:
    """A streaming query that runs until the test finishes it."""

    def __init__(self, sid: int, started: list[int]) -> None:
        self.sid, self.isActive = sid, True
        started.append(sid)

    def exception(self) -> None:
        return None

    def awaitTermination(self, timeout: float) -> bool:
        return not self.isActive


def test_available_now_starts_a_query_once_its_upstream_finished_and_others_side_by_side() -> None:
    from kstream.spark.runner import TaskQueries
    from kstream.spark.tasks import build_task_plan

    builder = StreamBuilder()
    builder.stream("lines").group_by(lambda _k, v: v).count(store="counts").to_stream().to("out")
    builder.stream("clicks").group_by_key().count(store="clicks").to_stream().to("cpm")
    plan = build_task_plan(builder.build(), "app")
    # the re-keying's own query, as a checkpoint from before its hop was fused keeps it
    plan.unfuse(set(plan.fused.values()))
    rekey = plan.compiled.subtopology_for_topic("lines").id
    count = next(sid for sid in plan.order if plan.upstream.get(sid))
    other = plan.compiled.subtopology_for_topic("clicks").id
    assert plan.upstream == {rekey: set(), count: {rekey}, other: set()}

    started: list[int] = []
    queries: dict[int, FakeQuery] = {}

    def starter(sid: int) -> Any:
        def start() -> tuple[FakeQuery, None]:
            queries[sid] = FakeQuery(sid, started)
            return queries[sid], None

        return start

    starters = {sid: starter(sid) for sid in plan.order}
    tq = TaskQueries(plan, starters, sequential=True, settled=settled)
    assert sorted(started) == sorted([rekey, other])  # independent ones side by side
    queries[other].isActive = False
    tq._start_ready()
    assert count not in started  # its upstream still runs
    queries[rekey].isActive = False
    tq._start_ready()
    assert started[-1] == count
    queries[count].isActive = False
    tq.wait()  # every query has finished: returns

    started.clear()
    TaskQueries(plan, {sid: starter(sid) for sid in plan.order}, sequential=False)
    assert sorted(started) == sorted(plan.order)  # processingTime: all at once


class FailingQuery(FakeQuery):
    """A query that fails, and stops, right after its first check for a failure."""

    def __init__(self, sid: int, started: list[int]) -> None:
        super().__init__(sid, started)
        self.checks = 0

    def exception(self) -> Any:
        self.checks += 1
        if self.checks == 1:
            return None
        return RuntimeError("the batch failed")

    @property  # type: ignore[override]
    def isActive(self) -> bool:
        return self.checks == 0

    @isActive.setter
    def isActive(self, value: bool) -> None:
        pass

    def stop(self) -> None:
        return None


def test_a_query_failing_between_the_checks_fails_the_run() -> None:
    """A query that fails after `wait` asked it for a failure and before it asked whether it
    still runs ends the run with its failure; before, `wait` returned as if it had finished
    (tests/spark/test_error_policies.py saw a run that failed on a record return)."""
    from kstream.spark.runner import TaskQueries
    from kstream.spark.tasks import build_task_plan

    builder = StreamBuilder()
    builder.stream("clicks").group_by_key().count(store="clicks").to_stream().to("cpm")
    plan = build_task_plan(builder.build(), "app")
    (sid,) = plan.order
    tq = TaskQueries(
        plan, {sid: lambda: (FailingQuery(sid, []), None)}, sequential=True, settled=settled
    )
    with pytest.raises(RuntimeError, match="the batch failed"):
        tq.wait()


class FakeSink:
    """What a turn of a loop wrote, as `TransactionalSink` counts it."""

    def __init__(self, written: int) -> None:
        self.records_written, self.batches_skipped = written, 0


def test_sub_topologies_that_feed_one_another_take_turns_until_a_round_writes_nothing() -> None:
    """A foreign-key join's two sides feed each other (subscriptions one way, responses the
    other): a loop, after its upstream and before its downstream. Under availableNow each turn
    runs one member to the end of its input, in id order, until as many turns in a row as the
    loop has members wrote nothing."""
    from kstream.spark.runner import TaskQueries
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    orders = b.stream("raw").group_by(lambda k, _v: k, key_serde="string").reduce(lambda a, v: v)
    customers = b.table("customers", key_serde="string")
    joined = orders.join(customers, lambda v: v[:1], lambda o, c: f"{o}|{c}")
    joined.to_stream().group_by(lambda k, v: v).count().to_stream().to("out")
    plan = build_task_plan(b.build(), "app")
    rekey = plan.compiled.subtopology_for_topic("raw").id
    left, right = plan.loops[0]
    assert len(plan.loops) == 1 and rekey not in (left, right)
    [after] = [sid for sid in plan.order if sid not in (rekey, left, right)]
    assert plan.order == [rekey, left, right, after]
    assert plan.upstream == {rekey: set(), left: {rekey}, right: set(), after: {left}}

    started: list[int] = []
    queries: dict[int, FakeQuery] = {}
    writes = iter([5, 3, 2, 0, 0])  # left, right, left (the responses), then nothing

    def starter(sid: int) -> Any:
        def start() -> tuple[FakeQuery, FakeSink]:
            queries[sid] = FakeQuery(sid, started)
            return queries[sid], FakeSink(next(writes) if sid in (left, right) else 1)

        return start

    starters = {sid: starter(sid) for sid in plan.order}
    tq = TaskQueries(plan, starters, sequential=True, settled=settled)
    assert started == [rekey]  # the loop waits for its upstream
    for _ in range(6):  # each turn's end starts the next query
        queries[started[-1]].isActive = False
        tq._start_ready()
    assert started == [rekey, left, right, left, right, left, after]
    queries[after].isActive = False
    tq.wait()


def test_a_sub_topology_reading_what_it_writes_is_a_loop_of_one() -> None:
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("a").process(Upper).to("b")
    b.stream("b").filter(lambda _k, v: v).to("a")
    plan = build_task_plan(b.build(), "app")
    assert plan.loops == [plan.order]


def test_partition_queues_merged_by_head_keep_partition_order() -> None:
    from kstream.records import Record, merge_by_head
    from kstream.spark.tasks import partition_queues

    a = [Record("k", i, ts, (), "a", 0, i) for i, ts in enumerate([5, 1, 9])]
    b = [Record("k", i, ts, (), "b", 0, i) for i, ts in enumerate([3, 7])]
    queues = partition_queues(list(reversed(b + a)))
    assert [[(r.topic, r.offset) for r in q] for q in queues] == [
        [("a", 0), ("a", 1), ("a", 2)],
        [("b", 0), ("b", 1)],
    ]
    got = [(r.topic, r.offset) for r in merge_by_head(queues, lambda r: r.timestamp)]
    assert got == [("b", 0), ("a", 0), ("a", 1), ("b", 1), ("a", 2)]


def test_grouping_labels_spread_evenly_over_spark_partitions(spark: Any) -> None:
    """Label i lands in Spark partition i mod P for every P dividing the modulus."""
    from kstream.spark.labels import spread_labels

    small, labels = spread_labels(32, 32), spread_labels(6, 1024)
    assert labels[:4] == spread_labels(4, 1024)  # a longer list keeps the labels it had
    rows = spark.createDataFrame([(x,) for x in small + labels], "x int")
    hashes = [r.h for r in rows.selectExpr("hash(x) as h").collect()]
    assert [h % 32 for h in hashes[:32]] == list(range(32))
    assert [h % 1024 for h in hashes[32:]] == list(range(6))


def test_packed_outputs_go_to_the_sinks_slots_in_order() -> None:
    """A task's outputs, packed per write slot, unpack to the very rows it gave: each in the
    slot `slot_of` names for its destination, in the task's order within the slot."""
    from kstream.spark.packing import output_batch, pack_by_slot, unpack_output
    from kstream.spark.sink import slot_of
    from kstream.spark.wire import ROW_ARROW_SCHEMA

    topics = ["out", "counts-app-repartition", "ümlaut-topic", "x" * 200, ""]
    dests = [(t, p) for t in topics for p in (None, 0, 1, 7, 63)]
    rows = [
        {
            "topic": t,
            "k": None if i % 7 == 0 else b"k%d" % i,
            "v": None if i % 5 == 0 else b"v" * i,
            "ts": 1_000 + i,
            "part": part,
            "ptopic": "in",
            "ppart": i % 3,
            "poff": i,
            "seq": i % 2,
            "h": b"\x00\x01" if i % 4 == 0 else None,
        }
        for i, (t, part) in enumerate(dests * 2)
    ]
    cols = {n: [r[n] for r in rows] for n in ROW_ARROW_SCHEMA.names}
    for slots in (1, 2, 5, 64):
        packed = pack_by_slot(cols, slots)
        batch = output_batch(packed)
        assert batch.column("slot").to_pylist() == sorted(packed)
        for slot, blob in packed.items():
            got = unpack_output([blob]).to_pylist()
            want = [
                r
                for r in rows
                if slot_of(r["topic"], -1 if r["part"] is None else r["part"], slots) == slot
            ]
            assert got == want
        assert sum(len(unpack_output([b])) for b in packed.values()) == len(rows)
    assert pack_by_slot({n: [] for n in ROW_ARROW_SCHEMA.names}, 4) == {}


def test_packed_source_batches_give_the_records_read() -> None:
    """A read task's Arrow batch, packed into one row, gives the task the same records."""
    import pyarrow as pa

    from kstream.spark.packing import pack_input, unpack_input
    from kstream.spark.wire import SOURCE_ARROW_SCHEMA as ARROW_SCHEMA
    from kstream.spark.wire import ArrowChunk, encode_headers, input_records

    def batch(part: int, first: int, n: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {
                "topic": ["in"] * n,
                "partition": [part] * n,
                "offset": list(range(first, first + n)),
                "timestamp": [10 * o for o in range(first, first + n)],
                "key": [None if o % 3 == 0 else b"k%d" % o for o in range(first, first + n)],
                "value": [b"v%d" % o for o in range(first, first + n)],
                "headers": [
                    encode_headers([("h", b"%d" % o)]) if o % 2 else None
                    for o in range(first, first + n)
                ],
                "timestamp_type": [2 if o % 5 == 0 else 1 for o in range(first, first + n)],
            },
            schema=ARROW_SCHEMA,
        )

    batches = [batch(2, 0, 5), batch(2, 5, 0), batch(0, 40, 3)]
    rows = list(pack_input(ArrowChunk(b) for b in batches))
    assert [r.column("partition").to_pylist() for r in rows] == [[2], [0]]  # empty: no row
    got = unpack_input([r.column("rows")[0].as_py() for r in rows])
    want = input_records(batches[0]) + input_records(batches[2])
    assert got == want
    assert [(r.offset, list(r.headers)) for r in got[:2]] == [(0, []), (1, [("h", b"1")])]
    assert [r.timestamp_type.name for r in got[:2]] == ["LOG_APPEND_TIME", "CREATE_TIME"]


def test_a_stateless_merge_of_two_topics_runs_as_a_task() -> None:
    """A sub-topology reading two topics merges their records by timestamp in one task (as a
    Kafka Streams task does): it runs grouped by partition, not in the read tasks, which each
    read one topic partition."""
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    b.stream("a").merge(b.stream("b")).filter(lambda _k, v: v).to("out")
    b.stream(["c", "d"]).to("out2")
    plan = build_task_plan(b.build(), "app")
    assert plan.stateful == set(plan.order) and len(plan.order) == 2


def _row(ptopic: str, ppart: int, poff: int, ts: int, value: bytes) -> dict[str, Any]:
    return {
        "topic": "out",
        "k": b"k",
        "v": value,
        "ts": ts,
        "part": 0,
        "ptopic": ptopic,
        "ppart": ppart,
        "poff": poff,
        "seq": 0,
        "h": None,
    }


def test_a_slot_writes_each_tasks_rows_in_the_tasks_order() -> None:
    """What a task wrote keeps its order in the slot, though its inputs' timestamps and offsets
    are out of order across its topics (the task merged them as Kafka Streams does); tasks
    (partitions) interleave by head timestamp, whatever order the shuffle hands their packed
    blobs over in, and a read task's several blobs of one partition go in offset order."""
    from kstream.spark.packing import pack_by_slot
    from kstream.spark.sink import COLUMNS, slot_rows, write_order
    from kstream.spark.wire import ROW_ARROW_SCHEMA

    def packed(rows: list[dict[str, Any]]) -> bytes:
        return pack_by_slot({n: [r[n] for r in rows] for n in ROW_ARROW_SCHEMA.names}, 1)[0]

    # task 0 processed b@0 (ts 30) before a@5 (ts 40) before a@3 (ts 20, late); task 1 wrote two
    # blobs (a read task's batches, offsets 0-1 then 2)
    task0 = [_row("b", 0, 0, 30, b"1"), _row("a", 0, 5, 40, b"2"), _row("a", 0, 3, 20, b"3")]
    task1 = [_row("a", 1, 0, 10, b"4"), _row("a", 1, 1, 35, b"5")]
    task1_more = [_row("a", 1, 2, 36, b"6")]
    want = [b"4", b"1", b"5", b"6", b"2", b"3"]
    blobs = [packed(task0), packed(task1), packed(task1_more)]
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        table = slot_rows([blobs[i] for i in order]).select(list(COLUMNS)).to_pydict()
        rows = write_order(zip(*(table[c] for c in COLUMNS), strict=True))
        assert [r[6] for r in rows] == want
