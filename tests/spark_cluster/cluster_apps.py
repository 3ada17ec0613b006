"""Targets for `kstreamd run` in the cluster tests: topologies on topics named by variables."""

from __future__ import annotations

import os

from bad_input import Topics, only_stateless

from examples import clicks_per_minute as _clicks
from examples import word_count as _word_count
from kstream.dsl import StreamBuilder
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
