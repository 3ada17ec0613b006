"""Targets for `kstreamd run` in the cluster tests: the examples on topics named by variables."""

from __future__ import annotations

import os

from examples import clicks_per_minute as _clicks
from examples import word_count as _word_count
from kstream.topology.topology import Topology


def word_count() -> Topology:
    return _word_count.build_topology(os.environ["TEST_SRC_TOPIC"], os.environ["TEST_OUT_TOPIC"])


def clicks_per_minute() -> Topology:
    return _clicks.build_topology(os.environ["TEST_SRC_TOPIC"], os.environ["TEST_OUT_TOPIC"])
