"""The Redis backend retries through a lost connection and reports one it cannot get back."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from support.redis_server import RedisServer, available

import store_backends
from kstream.errors import StoreError, StoreLostError

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> RedisServer:
    if not available():
        pytest.skip("redis-server is not installed")
    s = RedisServer().start()
    yield s  # type: ignore[misc]
    s.cleanup()


def test_write_is_retried_until_the_server_is_back(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    be = store_backends.open(server.url + "?retry_for=30", name="s", namespace="app")
    be.put(b"a", b"1")
    server.stop()
    restarted = threading.Event()

    def restart() -> None:
        time.sleep(0.5)
        server.start()
        restarted.set()

    t = threading.Thread(target=restart)
    t.start()
    # The server comes back empty (no persistence): the write is retried until it answers,
    # then refused, because writing into a store that lost its data would corrupt it.
    with (
        caplog.at_level(logging.WARNING, logger="kstream.store_backends.redis"),
        pytest.raises(StoreLostError, match="lost its data"),
    ):
        be.write_batch({b"b": b"2"}, (), {"changelog_offset": 5})
    t.join()
    assert restarted.is_set()
    assert redis.Redis.from_url(server.url).dbsize() == 0  # nothing written into the empty store
    with pytest.raises(StoreLostError, match="lost its data"):
        be.get(b"b")  # nor read from it: "absent" would be a lie
    assert any("write_batch failed" in r.getMessage() for r in caplog.records)
    be.close()


def test_lost_server_is_reported_with_its_address(server: RedisServer) -> None:
    be = store_backends.open(
        server.url + "?retry_for=0.3", name="orders", partition=4, namespace="app"
    )
    server.stop()
    with pytest.raises(StoreError) as err:
        be.get(b"a")
    msg = str(err.value)
    assert "redis store 'orders' partition 4" in msg
    assert f"127.0.0.1:{server.port}" in msg
    assert "attempts" in msg
    be.close()


def test_keys_are_namespaced_per_app_store_and_partition(server: RedisServer) -> None:
    a = store_backends.open(server.url, name="s", partition=0, namespace="app1")
    b = store_backends.open(server.url, name="s", partition=1, namespace="app1")
    c = store_backends.open(server.url, name="s", partition=0, namespace="app2")
    a.put(b"k", b"a")
    b.put(b"k", b"b")
    c.put(b"k", b"c")
    assert (a.get(b"k"), b.get(b"k"), c.get(b"k")) == (b"a", b"b", b"c")
    a.destroy()
    assert b.get(b"k") == b"b" and c.get(b"k") == b"c"
    b.close()
    c.close()


def test_a_read_whose_connection_another_thread_closed_says_the_store_was_closed(
    server: RedisServer,
) -> None:
    """A query racing the task's rebuild: the stream thread closes the backend while the query's
    read is inside redis-py, which then fails on its torn-down connection (an AttributeError or
    a ValueError from deep inside). The query gets a StoreError it can retry on, naming the
    store; the same error on an open backend is a bug and propagates as it is."""
    be = store_backends.open(server.url, name="counts", partition=2, namespace="app")
    be.put(b"a", b"1")

    def torn_down() -> bytes:
        be.close()  # what the other thread does mid-read
        raise AttributeError("'NoneType' object has no attribute 'readline'")

    with pytest.raises(
        StoreError, match=r"'counts' partition 2 .*get failed: the store was closed"
    ):
        be._retry("get", torn_down)  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="is closed"):
        be.get(b"a")

    other = store_backends.open(server.url, name="counts", partition=3, namespace="app")

    def bug() -> bytes:
        raise AttributeError("a real bug")

    with pytest.raises(AttributeError, match="a real bug"):
        other._retry("get", bug)  # type: ignore[attr-defined]
    other.close()
