"""KTable re-grouping: adder and subtractor through the repartition topic, exact outputs."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.dsl.processors import Change
from kstream.dsl.processors.table_aggregate import ChangeSerde
from kstream.errors import ProcessingError, TopologyError
from kstream.serde import serde
from kstream.testing.driver import TopologyTestDriver

USERS: list[tuple[str, Any]] = [
    ("alice", {"region": "eu", "balance": 10}),
    ("bob", {"region": "eu", "balance": 5}),
    ("carol", {"region": "us", "balance": 7}),
    ("alice", {"region": "us", "balance": 10}),  # moves: eu loses her, us gains her
    ("bob", {"region": "eu", "balance": 8}),  # same region: one update for eu
    ("carol", None),  # deleted: us loses her
    ("dave", None),  # deleting an unknown key changes nothing
]


def by_region(_user: str, v: Any) -> tuple[str, Any]:
    return v["region"], v["balance"]


def run(build: Any, out_value_serde: str = "json") -> tuple[list[tuple[Any, Any]], dict]:
    b = StreamBuilder()
    users = b.table("users", "string", "json", store="users")
    build(users.group_by(by_region, key_serde="string", value_serde="json")).to_stream().to(
        "out", "string", out_value_serde
    )
    with TopologyTestDriver(b, app_id="app") as d:
        d.input_topic("users", "string", "json").pipe_many(USERS)
        out = d.output_topic("out", "string", out_value_serde).read_key_values()
        with d.get_store("agg").all() as cur:
            final = dict(cur)
        assert "app-agg-repartition" in d.compiled.repartition_topics
    return out, final


def test_count_users_per_region_as_they_move_and_leave() -> None:
    out, final = run(lambda g: g.count(store="agg"), "long")
    assert out == [
        ("eu", 1),
        ("eu", 2),
        ("us", 1),
        ("eu", 1),  # alice left eu ...
        ("us", 2),  # ... and joined us
        ("eu", 1),  # bob's update stays in eu: subtract and add, one result
        ("us", 1),  # carol deleted
    ]
    assert final == {"eu": 1, "us": 1}


def test_reduce_with_adder_and_subtractor() -> None:
    out, final = run(lambda g: g.reduce(lambda a, v: a + v, lambda a, v: a - v, store="agg"))
    assert out == [
        ("eu", 10),
        ("eu", 15),
        ("us", 7),
        ("eu", 5),
        ("us", 17),
        ("eu", 8),
        ("us", 10),
    ]
    assert final == {"eu": 8, "us": 10}


def test_aggregate_with_initializer_adder_and_subtractor() -> None:
    out, final = run(
        lambda g: g.aggregate(
            lambda: {"n": 0, "sum": 0},
            lambda _k, v, agg: {"n": agg["n"] + 1, "sum": agg["sum"] + v},
            lambda _k, v, agg: {"n": agg["n"] - 1, "sum": agg["sum"] - v},
            store="agg",
            value_serde="json",
        )
    )
    assert out[-3:] == [
        ("us", {"n": 2, "sum": 17}),
        ("eu", {"n": 1, "sum": 8}),
        ("us", {"n": 1, "sum": 10}),
    ]
    assert final == {"eu": {"n": 1, "sum": 8}, "us": {"n": 1, "sum": 10}}


def test_reduce_deletes_a_group_left_with_nothing() -> None:
    b = StreamBuilder()
    t = b.table("t", "string", "json", store="t")
    t.group_by(lambda k, v: (v, 1)).reduce(lambda a, v: a + v, lambda a, v: a - v, store="r")
    t.filter(lambda _k, v: v != "hidden").group_by(lambda k, v: (v, k)).count(
        store="c"
    ).to_stream().to("out", "auto", "long")
    with TopologyTestDriver(b) as d:
        inp = d.input_topic("t", "string", "json")
        inp.pipe("k1", "g")
        inp.pipe("k1", "hidden")  # the filter drops k1: it leaves "g"
        inp.pipe("k2", None)
        assert d.output_topic("out", "auto", "long").read_key_values() == [("g", 1), ("g", 0)]
        assert d.get_store("r").get("g") == 0
        assert d.get_store("c").get("g") == 0


def test_selector_returning_a_none_key_drops_the_row() -> None:
    b = StreamBuilder()
    b.table("t", "string", "json").group_by(
        lambda k, v: (v.get("group"), k), key_serde="string"
    ).count(store="c").to_stream().to("out", "string", "long")
    with TopologyTestDriver(b) as d:
        inp = d.input_topic("t", "string", "json")
        inp.pipe("a", {"group": None})
        inp.pipe("a", {"group": "x"})
        inp.pipe("a", {"group": None})
        assert d.output_topic("out", "string", "long").read_key_values() == [("x", 1), ("x", 0)]


def test_group_by_errors() -> None:
    b = StreamBuilder()
    t = b.table("t", "string", "json")
    with pytest.raises(TopologyError, match="selector must be a function"):
        t.group_by("region")  # type: ignore[arg-type]
    g = t.group_by(lambda k, v: (v, k))
    with pytest.raises(TopologyError, match="subtractor"):
        g.reduce(lambda a, v: a, None)
    with pytest.raises(TopologyError, match="initializer"):
        g.aggregate(0, lambda k, v, a: a, lambda k, v, a: a)
    b2 = StreamBuilder()
    b2.table("t", "string", "json").group_by(lambda k, v: v).count().to_stream().to(
        "out", "auto", "long"
    )
    with TopologyTestDriver(b2) as d, pytest.raises(ProcessingError, match="KTABLE-SELECT"):
        d.input_topic("t", "string", "json").pipe("k", 1)


def test_change_serde_round_trip() -> None:
    s = ChangeSerde(serde("json"))
    for ch in [Change(1, 2), Change(None, {"a": 1}), Change("x", None), Change(None, None)]:
        assert s.from_bytes(s.to_bytes(ch)) == ch
