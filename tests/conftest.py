"""Shared fixtures: one embedded broker per test process, and unique topic names.

Tansu keeps everything in memory, so tests share one broker and stay apart by using unique
topic (and group) names instead of a fresh broker each. Under pytest-xdist every worker
process starts its own broker (the fixture is session-scoped, and a session is per worker).
Set `KSTREAM_TEST_BOOTSTRAP` to run the integration tests against another Kafka instead (e.g.
a real Apache Kafka); all workers then share it.

Tests marked `slow` run only with `KSTREAM_LONG=1`; otherwise they are deselected (listed as
such in the summary), not skipped.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from kstream.kafka.broker import EmbeddedBroker


@dataclass(frozen=True)
class ExternalBroker:
    """A Kafka the tests did not start: only its address is known."""

    bootstrap_servers: str


LONG = os.environ.get("KSTREAM_LONG") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.path).replace("\\", "/")
        # everything that needs the broker is `integration`; Spark tests are also `spark`
        if "/integration/" in path or "/e2e/" in path or "/spark/" in path:
            item.add_marker(pytest.mark.integration)
        if "/spark/" in path:
            item.add_marker(pytest.mark.spark)
            # one worker runs every Spark test (with `--dist loadgroup`): one JVM, not one
            # per worker
            item.add_marker(pytest.mark.xdist_group("spark"))
    if not LONG:
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker | ExternalBroker]:
    """The broker shared by every integration test (use `.bootstrap_servers`)."""
    external = os.environ.get("KSTREAM_TEST_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker: EmbeddedBroker | ExternalBroker) -> str:
    """The shared broker's address."""
    return kafka_broker.bootstrap_servers


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80]


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """`unique_name("orders")` -> a topic/group name no other test uses."""

    def make(prefix: str = "t") -> str:
        return f"{_slug(prefix)}-{_slug(request.node.name)}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_name(unique_name: Callable[[str], str]) -> str:
    """A topic name unique to this test."""
    return unique_name("topic")
