"""The apps of the DSL operators' crash tests (issue 37): a foreign-key join, a cogroup with a
suppress, a stream-table join with a grace period. Each takes a per-record delay that bounds its
speed, so that a SIGKILL lands mid-stream; e2e.dsl_worker runs one until SIGTERM.

Every input value is unique and every output value says which inputs made it, so a test can
tell a wrong result (inputs that were never joined so), a duplicated one (an aborted
transaction's copy read, or a result emitted twice) and a missing one from the outputs alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.dsl.joined import Joined
from kstream.dsl.suppress import BufferConfig, Suppressed


def _slow(delay: float) -> Callable[[Any, Any], None]:
    def pause(_k: Any, _v: Any) -> None:
        if delay:
            time.sleep(delay)

    return pause


def customer_of(order_value: str) -> str:
    """The foreign key of an order value `"<order>|<customer id>"`: the part after its last
    `|`."""
    return order_value.rsplit("|", 1)[1]


def fk_join(orders: str, customers: str, out: str, delay: float = 0.0) -> StreamBuilder:
    """Orders joined with customers on the order's customer id (KIP-213), inner, with the
    joiner `"<order value>+<customer value>"`: from one output value a test can tell which
    order value and which customer value were joined, and so whether the order had that
    customer then. `delay` seconds of work per order update."""

    def extract(order_value: str) -> str:
        if delay:
            time.sleep(delay)
        return customer_of(order_value)

    b = StreamBuilder()
    left = b.table(orders, "string", "string", store="orders")
    right = b.table(customers, "string", "string", store="customers")
    joined = left.join(right, extract, lambda o, c: f"{o}+{c}", materialized="joined")
    joined.to_stream().to(out, "string", "string")
    return b


def cogroup_suppress(
    a: str, c: str, sums: str, held: str, hold_ms: int, delay: float = 0.0
) -> StreamBuilder:
    """Two inputs cogrouped into running sums (KIP-150; `c` re-keyed, so through the cogroup's
    repartition topic) to `sums`, and the sums suppressed for `hold_ms` of stream time per key
    to `held`."""
    b = StreamBuilder()
    ga = b.stream(a, "string", "long").peek(_slow(delay)).group_by_key()
    gc = (
        b.stream(c, "string", "long")
        .peek(_slow(delay))
        .group_by(lambda k, _v: k, key_serde="string")
    )
    totals = (
        ga.cogroup(lambda _k, v, s: s + v)
        .cogroup(gc, lambda _k, v, s: s + v)
        .aggregate(lambda: 0, store="sums", value_serde="long")
    )
    totals.to_stream().to(sums, "string", "long")
    suppressed = Suppressed.until_time_limit(hold_ms, BufferConfig.unbounded()).with_name("held")
    totals.suppress(suppressed).to_stream().to(held, "string", "long")
    return b


def grace_join(
    orders: str, prices: str, out: str, grace_ms: int, delay: float = 0.0
) -> StreamBuilder:
    """Orders (keyed by product, valued by a unique order id) joined with a versioned table of
    prices as of each order's time, with a grace period (KIP-914, KIP-923): `"<order>|<price>"`
    to `out`. The table keeps an hour of history."""
    b = StreamBuilder()
    table = b.table(prices, "string", "string", store="prices", versioned="1h")
    (
        b.stream(orders, "string", "string")
        .peek(_slow(delay))
        .join(table, lambda o, p: f"{o}|{p}", joined=Joined.with_grace_period(grace_ms))
        .to(out, "string", "string")
    )
    return b
