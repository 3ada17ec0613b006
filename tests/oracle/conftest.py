"""The Kafka Streams harness, started once for the test session (tests/oracle/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oracle.harness import STAMP, Oracle, built


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    """The running harness; built by `make oracle-harness` (`make test` builds it first)."""
    if not built():
        pytest.skip(f"the Kafka Streams oracle is not built ({STAMP}): run `make oracle-harness`")
    with Oracle.start() as harness:
        yield harness
