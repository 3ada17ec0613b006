"""Stream-stream, stream-table and table-table joins through the test driver, exact outputs."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.errors import ProcessingError, TopologyError
from kstream.testing.driver import TopologyTestDriver

Triples = list[tuple[Any, Any, int]]


def plus(a: Any, b: Any) -> str:
    return f"{a}+{b}"


def read(d: TopologyTestDriver, topic: str = "out") -> Triples:
    return [
        (r.key, r.value, r.timestamp)
        for r in d.output_topic(topic, "string", "json").read_records()
    ]


# --- stream-stream ---------------------------------------------------------------------------


def stream_stream(kind: str, window: JoinWindows, name: str | None = None) -> StreamBuilder:
    b = StreamBuilder()
    left = b.stream("left", "string", "json")
    right = b.stream("right", "string", "json")
    joined = getattr(left, "join" if kind == "inner" else f"{kind}_join")(
        right, plus, window=window, name=name
    )
    joined.to("out", "string", "json")
    return b


def test_inner_join_window_bounds_are_inclusive_and_timestamp_is_the_max() -> None:
    with TopologyTestDriver(stream_stream("inner", JoinWindows.of(10))) as d:
        left = d.input_topic("left", "string", "json")
        right = d.input_topic("right", "string", "json")
        left.pipe("a", "L1", timestamp=100)
        right.pipe("a", "R0", timestamp=90)  # exactly `before` earlier: joins
        right.pipe("a", "R1", timestamp=110)  # exactly `after` later: joins
        right.pipe("a", "R2", timestamp=111)  # one ms too late for L1
        right.pipe("b", "R3", timestamp=100)  # other key
        left.pipe("a", "L2", timestamp=101)  # out of order: joins R1 and R2, not R0
        left.pipe(None, "no key", timestamp=101)
        left.pipe("a", None, timestamp=101)
        assert read(d) == [
            ("a", "L1+R0", 100),
            ("a", "L1+R1", 110),
            ("a", "L2+R1", 110),
            ("a", "L2+R2", 111),
        ]


def test_inner_join_asymmetric_window() -> None:
    # A left record at t joins right records in [t - 0, t + 10].
    with TopologyTestDriver(stream_stream("inner", JoinWindows.of(0, after=10, grace=50))) as d:
        left = d.input_topic("left", "string", "json")
        right = d.input_topic("right", "string", "json")
        left.pipe("a", "L", timestamp=100)
        right.pipe("a", "R-before", timestamp=99)
        right.pipe("a", "R-same", timestamp=100)
        right.pipe("a", "R-after", timestamp=110)
        right.pipe("a", "R-too-late", timestamp=111)
        assert read(d) == [("a", "L+R-same", 100), ("a", "L+R-after", 110)]


def test_out_of_order_records_join_what_the_other_store_still_retains() -> None:
    """Kafka drops no late record: it joins while the partner is retained.

    A window store keeps a record while `ts > newest - (before + after + grace)`.
    """

    def run(grace: int) -> tuple[Triples, dict[str, int]]:
        with TopologyTestDriver(stream_stream("inner", JoinWindows.of(10, grace=grace))) as d:
            left = d.input_topic("left", "string", "json")
            right = d.input_topic("right", "string", "json")
            left.pipe("a", "L", timestamp=100)
            left.pipe("z", "advance", timestamp=200)  # the left store's newest: 200
            right.pipe("z", "advance", timestamp=200)  # the right store's newest: 200
            right.pipe("a", "R", timestamp=105)  # L retained iff 100 > 200 - (20 + grace)
            return read(d)[1:], d.dropped_records()

    # R finds nothing and is too old for its own store: nothing is left of it.
    assert run(grace=0) == ([], {"expired_window": 1})
    assert run(grace=75) == ([], {"expired_window": 1})
    # R too old to be kept, but L is still retained: they join.
    assert run(grace=81) == ([("a", "L+R", 105)], {})
    assert run(grace=85) == ([("a", "L+R", 105)], {})  # 105 > 200 - 105: R is kept too


def test_left_join_emits_non_joined_only_after_the_window_closes() -> None:
    with TopologyTestDriver(stream_stream("left", JoinWindows.of(10, grace=5))) as d:
        left = d.input_topic("left", "string", "json")
        right = d.input_topic("right", "string", "json")
        left.pipe("a", "L1", timestamp=100)
        assert read(d) == []  # a partner may still come
        right.pipe("a", "R1", timestamp=108)
        assert read(d) == [("a", "L1+R1", 108)]
        left.pipe("b", "L2", timestamp=110)
        right.pipe("c", "R-alone", timestamp=111)  # a left join never emits right alone
        right.pipe("x", "tick", timestamp=125)  # 110 + 10 + 5 = 125: not closed yet
        assert read(d) == []
        right.pipe("x", "tick", timestamp=126)
        assert read(d) == [("b", "L2+None", 110)]  # L1 joined: no spurious L1+None
        right.pipe("x", "tick", timestamp=500)
        assert read(d) == []


def test_left_join_out_of_order_partner_within_grace_cancels_the_non_joined_result() -> None:
    with TopologyTestDriver(stream_stream("left", JoinWindows.of(10, grace=20))) as d:
        left = d.input_topic("left", "string", "json")
        right = d.input_topic("right", "string", "json")
        left.pipe("a", "L", timestamp=100)
        right.pipe("x", "tick", timestamp=125)  # past 100 + 10, but within grace
        right.pipe("a", "R", timestamp=95)  # late but within grace: joins
        right.pipe("x", "tick", timestamp=200)
        assert read(d) == [("a", "L+R", 100)]


def test_outer_join_emits_both_sides_alone_in_timestamp_order() -> None:
    with TopologyTestDriver(stream_stream("outer", JoinWindows.of(10))) as d:
        left = d.input_topic("left", "string", "json")
        right = d.input_topic("right", "string", "json")
        right.pipe("r", "R1", timestamp=100)
        left.pipe("l", "L1", timestamp=100)
        left.pipe("l", "L2", timestamp=100)  # same key and time: both kept
        left.pipe("j", "L3", timestamp=105)
        right.pipe("j", "R3", timestamp=106)
        assert read(d) == [("j", "L3+R3", 106)]
        left.pipe("x", "tick", timestamp=111)  # closes the records at 100
        assert read(d) == [
            ("r", "None+R1", 100),
            ("l", "L1+None", 100),
            ("l", "L2+None", 100),
        ]
        right.pipe("y", "tock", timestamp=200)
        assert read(d) == [("x", "tick+None", 111)]  # "tock" itself is still pending


def test_self_join() -> None:
    b = StreamBuilder()
    s = b.stream("in", "string", "json")
    s.join(s, plus, window=JoinWindows.of(10)).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        inp = d.input_topic("in", "string", "json")
        inp.pipe("a", "x", timestamp=100)
        inp.pipe("a", "y", timestamp=105)
        assert read(d) == [
            ("a", "x+x", 100),
            ("a", "y+x", 105),
            ("a", "x+y", 105),
            ("a", "y+y", 105),
        ]


def test_stream_stream_join_repartitions_a_rekeyed_side() -> None:
    b = StreamBuilder()
    left = b.stream("left", "string", "json").select_key(lambda k, v: v["user"])
    right = b.stream("right", "string", "json")
    left.join(right, lambda lv, rv: [lv["n"], rv], window=JoinWindows.of(5), name="j").to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("left", "string", "json").pipe(
            "ignored", {"user": "u1", "n": 1}, timestamp=10
        )
        d.input_topic("right", "string", "json").pipe("u1", "hello", timestamp=12)
        assert read(d) == [("u1", [1, "hello"], 12)]
        assert list(d.compiled.repartition_topics) == ["app-j-left-repartition"]
        assert sorted(d.compiled.changelog_topics) == [
            "app-j-other-join-store-changelog",
            "app-j-this-join-store-changelog",
        ]


def test_named_outer_join_stores() -> None:
    topo = stream_stream("outer", JoinWindows.of(10, grace=5), name="oj").build()
    assert sorted(topo.stores) == [
        "oj-other-join-store",
        "oj-outer-shared-join-store",
        "oj-this-join-store",
    ]
    assert topo.stores["oj-this-join-store"].retention == 25
    assert topo.stores["oj-this-join-store"].retain_duplicates


def test_joiner_error_is_a_processing_error() -> None:
    b = StreamBuilder()
    left = b.stream("left", "string", "json")
    left.join(b.stream("right", "string", "json"), lambda a, c: a + c, window=JoinWindows.of(1)).to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("left", "string", "json").pipe("a", 1, timestamp=0)
        with pytest.raises(ProcessingError, match="KSTREAM-JOIN"):
            d.input_topic("right", "string", "json").pipe("a", "text", timestamp=0)


# --- stream-table ----------------------------------------------------------------------------


def stream_table(kind: str) -> StreamBuilder:
    b = StreamBuilder()
    users = b.table("users", "string", "json", store="users")
    clicks = b.stream("clicks", "string", "json")
    getattr(clicks, "join" if kind == "inner" else "left_join")(users, plus).to(
        "out", "string", "json"
    )
    return b


def stream_table_run(kind: str) -> Triples:
    with TopologyTestDriver(stream_table(kind)) as d:
        users = d.input_topic("users", "string", "json")
        clicks = d.input_topic("clicks", "string", "json")
        users.pipe("alice", "eu", timestamp=1)
        clicks.pipe("alice", "c1", timestamp=5)
        clicks.pipe("bob", "c2", timestamp=6)
        users.pipe("alice", "us", timestamp=7)  # table updates alone emit nothing
        clicks.pipe("alice", "c3", timestamp=8)
        users.pipe("alice", None, timestamp=9)  # tombstone
        clicks.pipe("alice", "c4", timestamp=10)
        clicks.pipe(None, "no key", timestamp=11)
        clicks.pipe("bob", None, timestamp=12)
        return read(d)


def test_stream_table_inner_join() -> None:
    assert stream_table_run("inner") == [("alice", "c1+eu", 5), ("alice", "c3+us", 8)]


def test_stream_table_left_join() -> None:
    assert stream_table_run("left") == [
        ("alice", "c1+eu", 5),
        ("bob", "c2+None", 6),
        ("alice", "c3+us", 8),
        ("alice", "c4+None", 10),
        (None, "no key+None", 11),  # KIP-962: a left join keeps None-key records
    ]


def test_stream_table_join_repartitions_after_a_key_change_and_shares_the_task() -> None:
    b = StreamBuilder()
    users = b.table("users", "string", "json", store="users")
    b.stream("clicks", "string", "json").select_key(lambda _k, v: v["user"]).join(
        users, lambda c, u: [c["page"], u], name="enrich"
    ).to("out", "string", "json")
    topo = b.build()
    compiled = topo.compile("app")
    assert list(compiled.repartition_topics) == ["app-enrich-repartition"]
    assert ["app-enrich-repartition", "users"] in [sorted(g) for g in compiled.copartition_groups()]
    with TopologyTestDriver(topo, app_id="app") as d:
        d.input_topic("users", "string", "json").pipe("u1", "Ann", timestamp=0)
        d.input_topic("clicks", "string", "json").pipe(
            "x", {"user": "u1", "page": "/"}, timestamp=3
        )
        assert read(d) == [("u1", ["/", "Ann"], 3)]


def test_stream_joins_a_filtered_table_through_its_getter() -> None:
    b = StreamBuilder()
    users = b.table("users", "string", "json", store="users")
    adults = users.filter(lambda _k, v: v["age"] >= 18).map_values(lambda v: v["name"])
    b.stream("clicks", "string", "json").left_join(adults, plus).to("out", "string", "json")
    with TopologyTestDriver(b) as d:
        users_in = d.input_topic("users", "string", "json")
        users_in.pipe("a", {"name": "Ann", "age": 30})
        users_in.pipe("b", {"name": "Bo", "age": 12})
        clicks = d.input_topic("clicks", "string", "json")
        clicks.pipe("a", "c1", timestamp=1)
        clicks.pipe("b", "c2", timestamp=2)
        assert read(d) == [("a", "c1+Ann", 1), ("b", "c2+None", 2)]


# --- table-table -----------------------------------------------------------------------------


def table_table_run(kind: str) -> Triples:
    b = StreamBuilder()
    lt = b.table("l", "string", "json", store="l")
    rt = b.table("r", "string", "json", store="r")
    getattr(lt, "join" if kind == "inner" else f"{kind}_join")(rt, plus).to_stream().to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        left = d.input_topic("l", "string", "json")
        right = d.input_topic("r", "string", "json")
        left.pipe("k", "a", timestamp=1)
        right.pipe("k", "x", timestamp=2)
        left.pipe("k", "b", timestamp=3)
        right.pipe("k", None, timestamp=4)
        left.pipe("k", None, timestamp=5)
        right.pipe("k", "y", timestamp=6)
        right.pipe("k2", None, timestamp=7)  # delete of a key that never existed
        return read(d)


def test_table_table_inner_join() -> None:
    assert table_table_run("inner") == [
        ("k", "a+x", 2),
        ("k", "b+x", 3),
        ("k", None, 4),  # right deleted: the result is deleted
    ]


def test_table_table_left_join() -> None:
    assert table_table_run("left") == [
        ("k", "a+None", 1),
        ("k", "a+x", 2),
        ("k", "b+x", 3),
        ("k", "b+None", 4),
        ("k", None, 5),
    ]


def test_table_table_outer_join() -> None:
    assert table_table_run("outer") == [
        ("k", "a+None", 1),
        ("k", "a+x", 2),
        ("k", "b+x", 3),
        ("k", "b+None", 4),
        ("k", None, 5),
        ("k", "None+y", 6),
    ]


def test_joined_table_is_readable_by_later_joins_and_filters() -> None:
    b = StreamBuilder()
    lt = b.table("l", "string", "json", store="l")
    rt = b.table("r", "string", "json", store="r")
    joined = lt.outer_join(rt, lambda a, c: [a, c]).filter(lambda _k, v: v[0] is not None)
    joined.to_stream().to("table-out", "string", "json")
    b.stream("s", "string", "json").left_join(joined, lambda v, t: [v, t]).to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("l", "string", "json").pipe("k", 1, timestamp=0)
        d.input_topic("r", "string", "json").pipe("k", 2, timestamp=0)
        d.input_topic("r", "string", "json").pipe("only-right", 3, timestamp=0)
        s = d.input_topic("s", "string", "json")
        s.pipe("k", "s1", timestamp=1)
        s.pipe("only-right", "s2", timestamp=2)  # filtered out of the joined table
        assert read(d) == [("k", ["s1", [1, 2]], 1), ("only-right", ["s2", None], 2)]
        # a join result sends old values (Kafka's KTableKTableJoinMerger), so the filter
        # forwards nothing for only-right, which it never let through
        assert read(d, "table-out") == [
            ("k", [1, None], 0),
            ("k", [1, 2], 0),
        ]


# --- restarts ---------------------------------------------------------------------------------


def test_join_state_survives_a_restart(tmp_path: Any) -> None:
    """Window stores, pending unmatched records and table timestamps live in stores: a new
    driver on the same state directory carries on where the last one stopped."""

    def topology() -> StreamBuilder:
        b = stream_stream("left", JoinWindows.of(10, grace=5))
        t1 = b.table("t1", "string", "json")
        t2 = b.table("t2", "string", "json")
        t1.join(t2, plus).to_stream().to("tables", "string", "json")
        return b

    state = str(tmp_path)
    with TopologyTestDriver(topology(), state_dir=state, default_backend="lmdb") as d:
        d.input_topic("left", "string", "json").pipe("a", "L1", timestamp=100)
        d.input_topic("left", "string", "json").pipe("b", "L2", timestamp=101)
        d.input_topic("t2", "string", "json").pipe("k", "Y", timestamp=50)
        assert read(d) == []
    with TopologyTestDriver(topology(), state_dir=state, default_backend="lmdb") as d:
        right = d.input_topic("right", "string", "json")
        right.pipe("b", "R", timestamp=103)  # L2 is still in the left window store
        right.pipe("x", "tick", timestamp=200)  # L1's window has closed
        assert read(d) == [("b", "L2+R", 103), ("a", "L1+None", 100)]
        d.input_topic("t1", "string", "json").pipe("k", "X", timestamp=20)
        assert read(d, "tables") == [("k", "X+Y", 50)]  # Y's timestamp was kept


# --- validation when the topology is built ---------------------------------------------------


def test_invalid_joins_fail_when_built() -> None:
    b = StreamBuilder()
    s = b.stream("s", "string", "json")
    s2 = b.stream("s2", "string", "json")
    t = b.table("t", "string", "json")
    g = b.global_table("g", "string", "json")
    with pytest.raises(TopologyError, match="JoinWindows"):
        s.join(s2, plus)
    with pytest.raises(TopologyError, match="inner or left"):
        s.outer_join(t, plus)
    with pytest.raises(TopologyError, match="no window"):
        s.join(t, plus, window=JoinWindows.of(1))
    with pytest.raises(TopologyError, match="joiner must be a function"):
        s.join(t, "not a function")
    with pytest.raises(TopologyError, match="key_selector"):
        s.join(g, plus)
    with pytest.raises(TopologyError, match="key_selector is only"):
        s.join(t, lambda k, v: k, plus)
    with pytest.raises(TopologyError, match="can join a KStream"):
        s.join(42, plus)
    with pytest.raises(TopologyError, match="can join a KTable"):
        t.join(s, plus)  # type: ignore[arg-type]
    other = StreamBuilder()
    with pytest.raises(TopologyError, match="same StreamBuilder"):
        s.join(other.stream("x"), plus, window=JoinWindows.of(1))
    with pytest.raises(TopologyError, match="one StreamBuilder"):
        s.join(other.table("y"), plus)
    with pytest.raises(TopologyError, match="not part of this StreamBuilder"):
        s.join(other.global_table("z", store="z"), lambda k, v: k, plus)
