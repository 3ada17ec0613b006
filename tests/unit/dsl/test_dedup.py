"""`KStream.deduplicate` through the test driver."""

from __future__ import annotations

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.errors import TopologyError
from kstream.testing.driver import TopologyTestDriver


def test_dedup_by_key_keeps_first_occurrence_within_interval() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "string").deduplicate(within=10, store="ids").to("out")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe_many(
            [
                ("a", "1", 0),
                ("a", "2", 5),
                ("b", "3", 6),
                ("a", "4", 10),
                ("a", "5", 11),
                (None, "6", 12),
                (None, "7", 12),
                ("a", "8", 15),
            ]
        )
        out = d.output_topic("out", "string", "string").read_key_values()
        # a@10 is within 10 of a@0; a@11 is not, and becomes the new first occurrence
        assert out == [("a", "1"), ("b", "3"), ("a", "5"), (None, "6"), (None, "7")]
        assert d.get_store("ids").first_seen("a") == 11


def test_dedup_by_id_from_value_none_ids_pass() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "json").deduplicate(lambda k, v: v.get("id"), within="1m").to(
        "out", "string", "json"
    )
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "json").pipe_many(
            [
                ("x", {"id": 1}, 0),
                ("y", {"id": 1}, 1),
                ("z", {}, 2),
                ("z", {}, 3),
                ("y", {"id": 2}, 4),
            ]
        )
        assert d.output_topic("out", "string", "json").read_key_values() == [
            ("x", {"id": 1}),
            ("z", {}),
            ("z", {}),
            ("y", {"id": 2}),
        ]


def test_dedup_repartitions_when_the_key_changed() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "string").select_key(lambda k, v: v).deduplicate(
        within=100, store="ids"
    ).to("out", "auto", "string")
    topo = b.build()
    assert "ids-repartition" in str(topo.describe())
    with TopologyTestDriver(topo) as d:
        d.input_topic("in", "string", "string").pipe_many(
            [("a", "v", 0), ("b", "v", 1), ("c", "w", 2)]
        )
        assert d.output_topic("out", "auto", "string").read_key_values() == [("v", "v"), ("w", "w")]


def test_dedup_id_from_value_does_not_repartition() -> None:
    b = StreamBuilder()
    b.stream("in", "string", "string").select_key(lambda k, v: v).deduplicate(
        lambda k, v: v, within=100
    ).to("out", "auto", "string")
    assert "repartition" not in str(b.build().describe())


def test_dedup_arguments_checked_at_build_time() -> None:
    s = StreamBuilder().stream("in")
    with pytest.raises(TopologyError, match="within"):
        s.deduplicate()
    with pytest.raises(TopologyError, match="retention"):
        s.deduplicate(within=5, store=stores.dedup("ids", 10))
    with pytest.raises(TopologyError, match="callable"):
        s.deduplicate("id", within=5)  # type: ignore[arg-type]
    s.deduplicate(store=stores.dedup("ids2", 10))  # the store's retention is the interval
