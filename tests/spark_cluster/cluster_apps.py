"""Targets for `kstreamd run` in the cluster tests: topologies on topics named by variables."""

from __future__ import annotations

import os

from bad_input import Topics, only_stateless

from examples import clicks_per_minute as _clicks
from examples import word_count as _word_count
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.topology.topology import Topology


def both_examples(lines: str, counts: str, clicks: str, cpm: str) -> Topology:
    """Both examples in one topology (so one job, one driver, runs them side by side): the
    word count `lines` -> `counts`, the clicks per minute `clicks` -> `cpm`."""
    builder = StreamBuilder()
    _word_count.count_words(builder, lines, counts)
    _clicks.count_clicks(builder, clicks, cpm)
    return builder.build()


def every_example() -> Topology:
    """`both_examples` on the topics named by `TEST_LINES_TOPIC`, `TEST_COUNTS_TOPIC`,
    `TEST_CLICKS_TOPIC` and `TEST_CPM_TOPIC` (the job's target)."""
    env = os.environ
    return both_examples(
        env["TEST_LINES_TOPIC"],
        env["TEST_COUNTS_TOPIC"],
        env["TEST_CLICKS_TOPIC"],
        env["TEST_CPM_TOPIC"],
    )


def bad_input() -> Topology:
    """`bad_input.only_stateless` (JSON in, 100 // d out) from `TEST_IN_TOPIC` to
    `TEST_OUT_TOPIC`."""
    inp, out = os.environ["TEST_IN_TOPIC"], os.environ["TEST_OUT_TOPIC"]
    return only_stateless(Topics(inp, inp, out, out))


def fk_join_and_windows(orders: str, customers: str, joined: str, counts: str) -> Topology:
    """Orders ("<customer> <n>", keyed by order id) as a table joined on their customer with
    the customers table (a foreign-key join: `<order> -> "<order value>|<name>"` to `joined`),
    and counted per customer in tumbling 10 s windows (grace 1 h: none is late) to `counts`,
    keyed `<customer>@<window start>`, every update."""
    b = StreamBuilder()
    stream = b.stream(orders, key_serde="string", value_serde="string")
    names = b.table(customers, key_serde="string", value_serde="string")
    stream.to_table().join(names, lambda v: v.split()[0], lambda o, c: f"{o}|{c}").to_stream().to(
        joined, key_serde="string", value_serde="string"
    )
    (
        stream.group_by(lambda _k, v: v.split()[0], key_serde="string", value_serde="string")
        .windowed_by(TimeWindows.of("10s", grace="1h"))
        .count()
        .to_stream()
        .map(lambda wk, n: (f"{wk.key}@{wk.start}", n))
        .to(counts, key_serde="string", value_serde="long")
    )
    return b.build()


def fk_join_and_windows_app() -> Topology:
    """`fk_join_and_windows` on the topics named by `TEST_ORDERS_TOPIC`, `TEST_CUSTOMERS_TOPIC`,
    `TEST_JOINED_TOPIC` and `TEST_COUNTS_TOPIC` (the job's target)."""
    env = os.environ
    return fk_join_and_windows(
        env["TEST_ORDERS_TOPIC"],
        env["TEST_CUSTOMERS_TOPIC"],
        env["TEST_JOINED_TOPIC"],
        env["TEST_COUNTS_TOPIC"],
    )
