"""Orders enriched with their customer and product: a stream joined with two tables.

`orders` (key: order id, value: JSON `{"customer_id", "product_id", "quantity"}`) is re-keyed
by customer and joined with the `customers` KTable (key: customer id, value: JSON `{"name",
"region"}`): orders of unknown customers are dropped (inner join). Re-keying changes the key,
so the orders pass through a repartition topic first and then meet the customers that live in
the same partition. Products (key: product id, value: JSON `{"name", "price"}`) are a
GlobalKTable: every instance holds all of them, so the lookup by the order's product id needs no
repartition, and an unknown product still gives a result (left join, `product` is None).
The result goes to `orders-enriched`, keyed by order id again.

Run it with `kstreamd run examples.orders_enriched:topology`, or print it with
`kstreamd describe examples.orders_enriched:topology --format mermaid`.
"""

from __future__ import annotations

from typing import Any

from kstream.dsl import StreamBuilder
from kstream.topology import Topology


def with_customer(order: dict[str, Any], customer: dict[str, Any]) -> dict[str, Any]:
    return {**order, "customer": customer["name"], "region": customer["region"]}


def with_product(order: dict[str, Any], product: dict[str, Any] | None) -> dict[str, Any]:
    if product is None:
        return {**order, "product": None, "total": None}
    return {**order, "product": product["name"], "total": product["price"] * order["quantity"]}


def build_topology(
    orders_topic: str = "orders",
    customers_topic: str = "customers",
    products_topic: str = "products",
    output_topic: str = "orders-enriched",
) -> Topology:
    builder = StreamBuilder()
    customers = builder.table(
        customers_topic, key_serde="string", value_serde="json", store="customers"
    )
    products = builder.global_table(
        products_topic, key_serde="string", value_serde="json", store="products"
    )
    (
        builder.stream(orders_topic, key_serde="string", value_serde="json")
        .map(lambda order_id, o: (o["customer_id"], {**o, "order_id": order_id}))
        .join(customers, with_customer, name="orders-by-customer")
        .left_join(products, lambda _customer_id, o: o["product_id"], with_product)
        .select_key(lambda _customer_id, o: o["order_id"])
        .to(output_topic, key_serde="string", value_serde="json")
    )
    return builder.build()


topology = build_topology()
