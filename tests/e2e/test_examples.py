"""The examples run on the broker with the results the test driver computes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.groups import fast_group

from e2e.inprocess import per_key, read_until, running
from e2e.support import create_topics, produce
from examples import orders_enriched, payments_dedup, word_count
from kstream.broker_compat.reader import TopicReader
from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App
from kstream.testing import TopologyTestDriver

T0 = 1_700_000_000_000


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2", "at_least_once"])
def test_word_count(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    guarantee: str,
) -> None:
    bs = kafka_broker.bootstrap_servers
    lines, out = unique_name("lines"), unique_name("counts")
    create_topics(bs, 3, lines, out)
    text = [
        (f"l{i}", f"the quick fox {i % 13} jumps over the lazy dog {i % 5}", T0 + i)
        for i in range(600)
    ]
    produce(bs, lines, text, "string", "string")
    with TopologyTestDriver(word_count.build_topology(lines, out)) as d:
        inp = d.input_topic(lines, "string", "string")
        for k, v, ts in text:
            inp.pipe(k, v, ts)
        want = per_key(d.output_topic(out, "string", "long").read_key_values())
    app = App(
        word_count.build_topology(lines, out),
        unique_name("wc"),
        bs,
        guarantee,
        fast_group({"state_dir": str(tmp_path)}),
    )
    with running(app), TopicReader(bs, out, "string", "long") as reader:
        total = sum(len(v) for v in want.values())
        got = read_until(reader, lambda rs: len(rs) >= total, app)
    if guarantee != "at_least_once":
        assert per_key(got) == want
    else:  # duplicates are allowed, loss is not
        assert {k: v[-1] for k, v in per_key(got).items()} == {k: v[-1] for k, v in want.items()}


def test_payments_dedup(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    inp, out = unique_name("payments"), unique_name("deduped")
    create_topics(bs, 2, inp, out)
    payments = [
        (f"acct{i % 50 % 7}", {"idempotency_key": f"p{i % 50}", "amount": i}, T0 + i * 60_000)
        for i in range(150)
    ]
    produce(bs, inp, payments, "string", "json")
    with TopologyTestDriver(payments_dedup.build_topology(inp, out)) as d:
        src = d.input_topic(inp, "string", "json")
        for k, v, ts in payments:
            src.pipe(k, v, ts)
        want = d.output_topic(out, "string", "json").read_key_values()
    assert 0 < len(want) < len(payments)
    app = App(
        payments_dedup.build_topology(inp, out),
        unique_name("pay"),
        bs,
        config=fast_group({"state_dir": str(tmp_path)}),
    )
    with running(app), TopicReader(bs, out, "string", "json") as reader:
        got = read_until(reader, lambda rs: len(rs) >= len(want), app)
    assert per_key(got) == per_key(want)


def test_orders_enriched(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    orders, customers, products, out = (
        unique_name("orders"),
        unique_name("customers"),
        unique_name("products"),
        unique_name("enriched"),
    )
    create_topics(bs, 2, orders, customers, out)
    create_topics(bs, 1, products)
    custs = [
        (f"c{i}", {"name": f"cust{i}", "region": "eu" if i % 2 else "us"}, T0) for i in range(10)
    ]
    prods = [(f"p{i}", {"name": f"prod{i}", "price": i + 1}, T0) for i in range(5)]
    ords = [
        (
            f"o{i}",
            {"customer_id": f"c{i % 12}", "product_id": f"p{i % 6}", "quantity": i},
            T0 + 1000 + i,
        )
        for i in range(200)
    ]
    produce(bs, customers, custs, "string", "json")
    produce(bs, products, prods, "string", "json")
    topo = orders_enriched.build_topology(orders, customers, products, out)
    with TopologyTestDriver(topo) as d:
        for topic, recs in ((customers, custs), (products, prods), (orders, ords)):
            src = d.input_topic(topic, "string", "json")
            for k, v, ts in recs:
                src.pipe(k, v, ts)
        want = dict(d.output_topic(out, "string", "json").read_key_values())
    app = App(
        orders_enriched.build_topology(orders, customers, products, out),
        unique_name("enrich"),
        bs,
        config=fast_group({"state_dir": str(tmp_path)}),
    )
    with running(app), TopicReader(bs, out, "string", "json") as reader:
        produce(bs, orders, ords, "string", "json")
        got = read_until(reader, lambda rs: len(rs) >= len(want), app)
    assert {r.key: r.value for r in got} == want
