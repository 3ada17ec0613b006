"""Backends for the conformance suite: every built-in backend behind one factory fixture."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.redis_server import RedisServer, available

import store_backends
from store_backends import Backend

BACKENDS = ["memory", "lru", "lmdb", "redis"]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    if not available():
        pytest.skip("redis-server is not installed")
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def open_backend(
    backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], Backend]]:
    """Opens (and reopens) the same store partition on the backend under test."""
    ns = uuid.uuid4().hex[:8]
    if backend_kind == "redis":
        url = request.getfixturevalue("redis_url")
    elif backend_kind == "lru":
        url = "lru://?max_entries=100000"
    else:
        url = backend_kind
    opened: list[Backend] = []

    def make() -> Backend:
        be = store_backends.open(url, name="s", partition=3, state_dir=str(tmp_path), namespace=ns)
        opened.append(be)
        return be

    yield make
    for be in opened:
        be.close()
