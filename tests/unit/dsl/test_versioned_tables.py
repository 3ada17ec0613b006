"""Versioned tables (KIP-889/914) and the grace period of stream-table joins (KIP-923).

The join cases replay Kafka's own tests with their expected outputs (each test names the one it
mirrors): `StreamTableJoinIntegrationTest` and `StreamTableJoinWithGraceIntegrationTest`
(`test{Inner,Left}WithVersionedStore`, run there on a TopologyTestDriver too) and
`KStreamKTableJoinTest` (the grace-period cases).
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.dsl.joined import Joined
from kstream.errors import TopologyError
from kstream.testing import TopologyTestDriver

LEFT, RIGHT, OUT = "left", "right", "out"

# AbstractJoinIntegrationTest.input: (topic, value, timestamp), every record with key 0
INPUT: list[tuple[str, str | None, int]] = [
    (LEFT, None, 1),
    (RIGHT, None, 2),
    (LEFT, "A", 3),
    (RIGHT, "a", 4),
    (LEFT, "B", 5),
    (RIGHT, "b", 6),
    (LEFT, None, 7),
    (RIGHT, None, 8),
    (LEFT, "C", 9),
    (RIGHT, "c", 10),
    (RIGHT, None, 11),
    (LEFT, None, 12),
    (RIGHT, None, 13),
    (RIGHT, "d", 7),  # out-of-order data with null as latest
    (LEFT, "D", 6),
    (LEFT, None, 2),
    (RIGHT, None, 3),
    (RIGHT, "e", 14),
    (LEFT, "E", 15),
    (LEFT, None, 10),  # out-of-order data with non-null as latest
    (RIGHT, None, 9),
    (LEFT, "F", 4),
    (RIGHT, "f", 3),
]


def _java_concat(v1: str, v2: str | None) -> str:
    """AbstractJoinIntegrationTest.valueJoiner: `value1 + "-" + value2` (null prints "null")."""
    return f"{v1}-{'null' if v2 is None else v2}"


def _run(kind: str, joined: Joined | None) -> dict[int, list[tuple[str, int]]]:
    """Pipe INPUT one record at a time; the outputs after each, by input index."""
    b = StreamBuilder()
    stream = b.stream(LEFT, "long", "str")
    table = b.table(RIGHT, "long", "str", store=stores.versioned_key_value("table-store", "5m"))
    join = stream.join if kind == "inner" else stream.left_join
    join(table, _java_concat, joined=joined).to(OUT, "long", "str")
    seen: dict[int, list[tuple[str, int]]] = {}
    with TopologyTestDriver(b) as d:
        inputs = {t: d.input_topic(t, "long", "str") for t in (LEFT, RIGHT)}
        out = d.output_topic(OUT, "long", "str")
        for i, (topic, value, ts) in enumerate(INPUT):
            inputs[topic].pipe(0, value, timestamp=ts)
            got = [(r.value, r.timestamp) for r in out.read_records()]
            if got:
                seen[i] = got
    return seen


def test_inner_join_reads_the_table_as_of_the_stream_record() -> None:
    """StreamTableJoinIntegrationTest.testInnerWithVersionedStore"""
    assert _run("inner", None) == {
        4: [("B-a", 5)],
        14: [("D-b", 6)],
        18: [("E-e", 15)],
        21: [("F-a", 4)],
    }


def test_left_join_reads_the_table_as_of_the_stream_record() -> None:
    """StreamTableJoinIntegrationTest.testLeftWithVersionedStore"""
    assert _run("left", None) == {
        2: [("A-null", 3)],
        4: [("B-a", 5)],
        8: [("C-null", 9)],
        14: [("D-b", 6)],
        18: [("E-e", 15)],
        21: [("F-a", 4)],
    }


GRACE = Joined.with_grace_period(2).with_name("Grace")


def test_inner_join_with_grace() -> None:
    """StreamTableJoinWithGraceIntegrationTest.testInnerWithVersionedStore"""
    assert _run("inner", GRACE) == {8: [("B-a", 5)], 14: [("D-b", 6)], 21: [("F-a", 4)]}


def test_left_join_with_grace() -> None:
    """StreamTableJoinWithGraceIntegrationTest.testLeftWithVersionedStore"""
    assert _run("left", GRACE) == {
        4: [("A-null", 3)],
        8: [("B-a", 5)],
        14: [("D-b", 6)],
        18: [("C-null", 9)],
        21: [("F-a", 4)],
    }


def _grace_driver(grace: int) -> tuple[TopologyTestDriver, Any, Any, Any]:
    """KStreamKTableJoinTest.makeJoin: versioned table "V-grace" (5 min), joined "Grace"."""
    b = StreamBuilder()
    stream = b.stream("streamTopic", "long", "str")
    table = b.table("tableTopic2", "long", "str", store=stores.versioned_key_value("V-grace", "5m"))
    stream.join(table, lambda v1, v2: f"{v1}+{v2}", joined=Joined("Grace", grace)).to(
        OUT, "long", "str"
    )
    d = TopologyTestDriver(b)
    return (
        d,
        d.input_topic("streamTopic", "long", "str"),
        d.input_topic("tableTopic2", "long", "str"),
        d.output_topic(OUT, "long", "str"),
    )


def _kvt(out: Any) -> list[tuple[int, str, int]]:
    return [(r.key, r.value, r.timestamp) for r in out.read_records()]


def test_delay_join_by_grace_period() -> None:
    """KStreamKTableJoinTest.shouldDelayJoinByGracePeriod"""
    d, stream, table, out = _grace_driver(2)
    with d:
        for k in range(4):
            table.pipe(k, f"Y{k}", timestamp=0)
        assert _kvt(out) == []
        for k in range(4):
            stream.pipe(k, f"X{k}", timestamp=k)
        assert _kvt(out) == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
        for k in range(4):
            table.pipe(k, f"YY{k}", timestamp=0)
        assert _kvt(out) == []
        for k in range(4):
            stream.pipe(k, f"X{k}", timestamp=k)
        assert _kvt(out) == [(0, "X0+YY0", 0), (1, "X1+YY1", 1)]
        stream.pipe(5, "test", timestamp=7)
        assert _kvt(out) == [
            (2, "X2+YY2", 2),
            (2, "X2+YY2", 2),
            (3, "X3+YY3", 3),
            (3, "X3+YY3", 3),
        ]
        for k in range(4):
            table.pipe(k, f"YYY{k}", timestamp=0)
        assert _kvt(out) == []


def test_late_join_with_grace_period() -> None:
    """KStreamKTableJoinTest.shouldHandleLateJoinsWithGracePeriod"""
    d, stream, table, out = _grace_driver(2)
    with d:
        for k in range(4):
            table.pipe(k, f"Y{k}", timestamp=0)
        for k in range(4):
            stream.pipe(k, f"X{k}", timestamp=k)
        assert _kvt(out) == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
        stream.pipe(0, "X0", timestamp=0)  # joined at once, evicts nothing
        assert _kvt(out) == [(0, "X0+Y0", 0)]


def test_grace_needs_a_versioned_table() -> None:
    """KStreamKTableJoinTest.shouldFailIfTableIsNotVersioned and
    ...IfTableIsNotVersionedButMaterializationIsInherited (checked when the join is built);
    shouldNotFailIfTableIsVersionedButMaterializationIsInherited."""
    b = StreamBuilder()
    s = b.stream("topic", "str", "str")
    plain = b.table("topic2", "str", "str")
    with pytest.raises(TopologyError, match="KTable must be versioned to use a grace period"):
        s.join(plain, lambda a, c: a + c, joined=Joined("first-join", 6))
    with pytest.raises(TopologyError, match="KTable must be versioned to use a grace period"):
        s.join(plain.filter(lambda k, v: True), lambda a, c: a + c, joined=Joined("j2", 6))
    versioned = b.table("topic3", "str", "str", store=stores.versioned_key_value("tableB", "5m"))
    s.join(versioned.filter(lambda k, v: True), lambda a, c: a + c, joined=Joined("j3", 6))
    b.build()


def test_grace_must_not_exceed_history_retention() -> None:
    """KStreamKTableJoinTest.shouldFailIfGracePeriodIsLongerThanHistoryRetention and
    ...AndInheritedStore"""
    b = StreamBuilder()
    s = b.stream("topic", "str", "str")
    t = b.table("topic2", "str", "str", store=stores.versioned_key_value("tableB", "5m"))
    with pytest.raises(TopologyError, match="History retention must be at least grace period"):
        s.join(t, lambda a, c: a + c, joined=Joined("first-join", 6 * 60_000))
    t0 = b.table("topic3", "str", "str", store=stores.versioned_key_value("V-grace", 0))
    with pytest.raises(TopologyError, match="History retention must be at least grace period"):
        s.join(t0.filter(lambda k, v: True), lambda a, c: a + c, joined=Joined("j", 6))


def test_out_of_order_table_update_goes_to_history_only() -> None:
    """KTableSource over a versioned store: an update older than the latest is kept in history
    (a later stream record as of its time sees it) and forwarded marked as not the latest,
    which `to_stream` emits (KIP-914); one older than history retention is dropped and
    counted."""
    b = StreamBuilder()
    t = b.table("t", "str", "str", versioned="10ms")
    t.to_stream().to("changes", "str", "str")
    b.stream("s", "str", "str").join(t, lambda a, c: f"{a}:{c}").to("joined", "str", "str")
    with TopologyTestDriver(b) as d:
        ti, si = d.input_topic("t", "str", "str"), d.input_topic("s", "str", "str")
        changes, joined = (
            d.output_topic("changes", "str", "str"),
            d.output_topic("joined", "str", "str"),
        )
        ti.pipe("k", "v20", timestamp=20)
        ti.pipe("k", "v15", timestamp=15)  # out of order: history only
        ti.pipe("k", "v5", timestamp=5)  # older than 20 - 10: dropped
        ti.pipe("k", "v25", timestamp=25)
        assert [(r.value, r.timestamp) for r in changes.read_records()] == [
            ("v20", 20),
            ("v15", 15),
            ("v25", 25),
        ]
        for ts in (16, 22, 30):
            si.pipe("k", "s", timestamp=ts)
        assert joined.read_values() == ["s:v15", "s:v20", "s:v25"]
        store = d.get_store(t.store_name)
        assert store.get("k", 17).value == "v15"
        assert store.get("k", 6) is None
        assert d.dropped_records().get("late_record") == 1


def test_to_table_versioned_and_on_spark() -> None:
    """`to_table(versioned=...)` builds the same versioned table, and its plan builds on Spark
    (which runs versioned tables: tests/spark)."""
    from kstream.spark.tasks import build_task_plan

    b = StreamBuilder()
    t = b.stream("in", "str", "str").to_table("tbl", versioned="1m")
    b.stream("s", "str", "str").join(t, lambda a, c: (a, c)).to("out", "str", "json")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "str", "str").pipe("k", "new", timestamp=10)
        d.input_topic("in", "str", "str").pipe("k", "old", timestamp=5)
        d.input_topic("s", "str", "str").pipe("k", "x", timestamp=7)
        assert d.output_topic("out", "str", "json").read_values() == [["x", "old"]]
    assert build_task_plan(b.build(), "app").stateful


def test_versioned_refusals() -> None:
    b = StreamBuilder()
    with pytest.raises(TopologyError, match="not both"):
        b.table("t", store=stores.versioned_key_value("v", "1m"), versioned="1m")
    with pytest.raises(TopologyError, match="cannot be versioned"):
        b.global_table("g", store=stores.versioned_key_value("gv", "1m"))
    s = b.stream("s")
    with pytest.raises(TopologyError, match="Joined is for a stream-table join"):
        s.join(s, lambda a, c: a, joined=Joined.with_grace_period(1))


def test_grace_buffer_and_stream_time_roll_back_with_the_batch() -> None:
    """A rolled-back batch (aborted transaction) neither keeps the stream time it reached nor
    the evictions it made: the retried records are buffered and released as if it never ran."""
    b = StreamBuilder()
    t = b.table("t", "str", "str", versioned="1m")
    s = b.stream("s", "str", "str")
    s.join(t, lambda a, c: f"{a}+{c}", joined=Joined.with_grace_period(2)).to("out", "str", "str")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "str", "str").pipe("k", "T", timestamp=0)
        stream = d.input_topic("s", "str", "str")
        out = d.output_topic("out", "str", "str")
        stream.pipe("k", "a", timestamp=1)  # buffered
        d._enqueue("s", b"k", b"x", 100, ())  # would release "a", then is rolled back
        task = d._task_of["s"]
        task.process([d._queue.popleft()])
        task.discard()
        out.read_records()  # whatever the aborted batch sent is not committed
        stream.pipe("k", "b", timestamp=2)  # stream time 2: still nothing due
        assert out.read_values() == []
        stream.pipe("k", "c", timestamp=4)  # releases a@1 and b@2, in time order
        assert [(r.value, r.timestamp) for r in out.read_records()] == [("a+T", 1), ("b+T", 2)]


def test_zero_grace_releases_every_key_at_once() -> None:
    """With grace 0 a record is buffered and released at once, whatever its key bytes (a
    negative long starts with 0xff)."""
    b = StreamBuilder()
    t = b.table("t", "long", "str", versioned="1m")
    s = b.stream("s", "long", "str")
    s.left_join(t, _java_concat, joined=Joined.with_grace_period(0)).to("out", "long", "str")
    with TopologyTestDriver(b) as d:
        d.input_topic("t", "long", "str").pipe(-1, "neg", timestamp=0)
        stream = d.input_topic("s", "long", "str")
        for k in (-1, 7, -(2**62)):
            stream.pipe(k, "v", timestamp=5)
        assert d.output_topic("out", "long", "str").read_key_values() == [
            (-1, "v-neg"),
            (7, "v-null"),
            (-(2**62), "v-null"),
        ]


def test_suppress_of_a_versioned_table_is_refused() -> None:
    """SuppressTopologyTest.shouldThrowOnSuppressFor{Materialized,NonMaterialized}VersionedTable:
    a versioned table, or one derived from it by operators without a store of their own
    (filter, map_values, transform_values), cannot be suppressed; one materialized in a plain
    store can."""
    from kstream.dsl.suppress import BufferConfig, Suppressed

    held = Suppressed.until_time_limit(10, BufferConfig.unbounded())
    b = StreamBuilder()
    t = b.table("t", "str", "str", versioned="1m")
    derived = [
        t,
        t.filter(lambda k, v: True),
        t.map_values(str.upper),
        t.transform_values(lambda: _Same()),
    ]
    for table in derived:
        with pytest.raises(TopologyError, match="only supported for non-versioned KTables"):
            table.suppress(held)
    t.filter(lambda k, v: True, materialized="plain").suppress(held)


class _Same:
    def transform(self, key: Any, value: Any) -> Any:
        return value


def test_out_of_order_update_keeps_its_mark_through_stateless_operators() -> None:
    """An out-of-order update (KIP-914) passes filter, map_values and transform_values and
    reaches to_stream, while a table-table join and a regroup below the same operators drop
    it (counted as `late_record`): their inputs' latest values did not change."""
    b = StreamBuilder()
    t = b.table("t", "str", "str", versioned="1m")
    other = b.table("o", "str", "str")
    derived = t.filter(lambda k, v: v != "skip").map_values(str.upper)
    derived = derived.transform_values(lambda: _Same())
    derived.to_stream().to("changes", "str", "str")
    derived.join(other, lambda a, c: f"{a}+{c}").to_stream().to("joined", "str", "str")
    derived.group_by(lambda k, v: ("all", v)).count().to_stream().to("counts", "str", "long")
    with TopologyTestDriver(b) as d:
        d.input_topic("o", "str", "str").pipe("k", "o", timestamp=0)
        ti = d.input_topic("t", "str", "str")
        ti.pipe("k", "new", timestamp=20)
        ti.pipe("k", "old", timestamp=10)  # out of order
        ti.pipe("k", "skip", timestamp=5)  # out of order, filtered out: a delete
        changes = d.output_topic("changes", "str", "str").read_records()
        assert [(r.value, r.timestamp) for r in changes] == [
            ("NEW", 20),
            ("OLD", 10),
            (None, 5),
        ]
        assert d.output_topic("joined", "str", "str").read_values() == ["NEW+o"]
        assert d.output_topic("counts", "str", "long").read_values() == [1]
        assert d.dropped_records().get("late_record") == 4
