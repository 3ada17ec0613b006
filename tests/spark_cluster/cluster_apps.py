"""Targets for `kstreamd run` in the cluster tests: the examples on topics named by variables."""

from __future__ import annotations

import os

from examples import clicks_per_minute as _clicks
from examples import word_count as _word_count
from kstream.dsl import StreamBuilder
from kstream.topology.topology import Topology


def every_example() -> Topology:
    """Both examples in one topology (so one job, one driver, runs them side by side): the
    word count on `TEST_LINES_TOPIC` -> `TEST_COUNTS_TOPIC`, the clicks per minute on
    `TEST_CLICKS_TOPIC` -> `TEST_CPM_TOPIC`."""
    env = os.environ
    builder = StreamBuilder()
    _word_count.count_words(builder, env["TEST_LINES_TOPIC"], env["TEST_COUNTS_TOPIC"])
    _clicks.count_clicks(builder, env["TEST_CLICKS_TOPIC"], env["TEST_CPM_TOPIC"])
    return builder.build()
