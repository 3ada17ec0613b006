"""The orders-enrichment example end to end: a repartition, a table join, a global join."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

from kstream.testing.driver import TopologyTestDriver

ROOT = pathlib.Path(__file__).resolve().parents[3]


def load_example() -> ModuleType:
    path = ROOT / "examples" / "orders_enriched.py"
    spec = importlib.util.spec_from_file_location("example_orders_enriched", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_orders_enriched_example() -> None:
    ex = load_example()
    with TopologyTestDriver(ex.build_topology(), app_id="shop") as d:
        customers = d.input_topic("customers", "string", "json")
        products = d.input_topic("products", "string", "json")
        orders = d.input_topic("orders", "string", "json")
        customers.pipe("c1", {"name": "Ann", "region": "eu"}, timestamp=1)
        products.pipe("p1", {"name": "pen", "price": 2}, timestamp=1)
        orders.pipe("o1", {"customer_id": "c1", "product_id": "p1", "quantity": 3}, timestamp=10)
        orders.pipe("o2", {"customer_id": "c9", "product_id": "p1", "quantity": 1}, timestamp=11)
        orders.pipe("o3", {"customer_id": "c1", "product_id": "p9", "quantity": 1}, timestamp=12)
        customers.pipe("c1", {"name": "Ann", "region": "us"}, timestamp=13)
        orders.pipe("o4", {"customer_id": "c1", "product_id": "p1", "quantity": 1}, timestamp=14)
        out = d.output_topic("orders-enriched", "string", "json").read_records()
        base = {"customer_id": "c1", "customer": "Ann"}
        assert [(r.key, r.value, r.timestamp) for r in out] == [
            (
                "o1",
                {
                    **base,
                    "order_id": "o1",
                    "product_id": "p1",
                    "quantity": 3,
                    "region": "eu",
                    "product": "pen",
                    "total": 6,
                },
                10,
            ),
            (
                "o3",
                {
                    **base,
                    "order_id": "o3",
                    "product_id": "p9",
                    "quantity": 1,
                    "region": "eu",
                    "product": None,
                    "total": None,
                },
                12,
            ),
            (
                "o4",
                {
                    **base,
                    "order_id": "o4",
                    "product_id": "p1",
                    "quantity": 1,
                    "region": "us",
                    "product": "pen",
                    "total": 2,
                },
                14,
            ),
        ]
        assert list(d.compiled.repartition_topics) == ["shop-orders-by-customer-repartition"]
        assert d.get_store("customers").get("c1") == {"name": "Ann", "region": "us"}


def test_orders_enriched_module_level_topology() -> None:
    ex = load_example()
    assert str(ex.topology.describe()) == str(ex.build_topology().describe())
