"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.redis_server import RedisServer, available


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A real redis-server of the test's own, gone after it (the Redis tests)."""
    if not available():
        pytest.skip("redis-server is not installed")
    s = RedisServer().start()
    yield s
    s.cleanup()
