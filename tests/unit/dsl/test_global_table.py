"""GlobalKTable: fed by the driver into its global store, joined by a key derived per record."""

from __future__ import annotations

from typing import Any

from kstream.dsl import StreamBuilder
from kstream.testing.driver import TopologyTestDriver


def build(kind: str) -> StreamBuilder:
    b = StreamBuilder()
    products = b.global_table("products", "string", "json", store="products")
    orders = b.stream("orders", "string", "json")
    join = orders.join if kind == "inner" else orders.left_join
    join(products, lambda _k, o: o.get("product"), lambda o, p: [o["n"], p]).to(
        "out", "string", "json"
    )
    return b


def run(kind: str) -> list[tuple[Any, Any, int]]:
    with TopologyTestDriver(build(kind)) as d:
        products = d.input_topic("products", "string", "json")
        orders = d.input_topic("orders", "string", "json")
        products.pipe("p1", "pen", timestamp=50)  # loaded before the orders arrive
        orders.pipe("o1", {"n": 1, "product": "p1"}, timestamp=1)
        orders.pipe("o2", {"n": 2, "product": "p2"}, timestamp=2)
        orders.pipe(None, {"n": 3, "product": "p1"}, timestamp=3)  # the stream key may be None
        orders.pipe("o4", {"n": 4}, timestamp=4)  # no product: the selected key is None
        products.pipe("p1", None, timestamp=60)
        orders.pipe("o5", {"n": 5, "product": "p1"}, timestamp=5)
        orders.pipe("o6", None, timestamp=6)
        out = d.output_topic("out", "string", "json").read_records()
        return [(r.key, r.value, r.timestamp) for r in out]


def test_stream_global_table_inner_join() -> None:
    assert run("inner") == [("o1", [1, "pen"], 1), (None, [3, "pen"], 3)]


def test_stream_global_table_left_join() -> None:
    assert run("left") == [
        ("o1", [1, "pen"], 1),
        ("o2", [2, None], 2),
        (None, [3, "pen"], 3),
        ("o4", [4, None], 4),  # no key selected: Kafka 4.x joins it to None too
        ("o5", [5, None], 5),
    ]


def test_global_store_is_readable_has_no_changelog_and_is_described() -> None:
    b = build("inner")
    topo = b.build()
    compiled = topo.compile("app")
    assert compiled.global_topics == ["products"]
    assert compiled.changelog_topics == {}
    assert "for global store (will not generate tasks)" in str(topo.describe())
    with TopologyTestDriver(topo) as d:
        d.input_topic("products", "string", "json").pipe_many([("p1", "pen"), ("p2", "ink")])
        d.input_topic("products", "string", "json").pipe("p1", None)
        with d.get_store("products").all() as cur:
            assert list(cur) == [("p2", "ink")]


def test_global_join_needs_no_repartition_after_a_key_change() -> None:
    b = StreamBuilder()
    products = b.global_table("products", "string", "json", store="products")
    b.stream("orders", "string", "json").select_key(lambda _k, v: v["id"]).join(
        products, lambda _k, v: v["product"], lambda o, p: p
    ).to("out", "auto", "json")
    with TopologyTestDriver(b, app_id="app") as d:
        assert d.compiled.repartition_topics == {}
        d.input_topic("products", "string", "json").pipe("p", "pen")
        d.input_topic("orders", "string", "json").pipe("x", {"id": 7, "product": "p"})
        assert d.output_topic("out", "auto", "json").read_key_values() == [(7, "pen")]
