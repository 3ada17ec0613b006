"""A Redis that restarts empty mid-run: kstream notices, rebuilds from the changelog, counts on.

Without loss detection the next batch reads "absent" for every key, counts restart at 1 and the
wrong counts are committed to the output and the changelog alike. The tests here kill a real
redis-server, start it again empty on the same port and check exact final counts, in the store
and after a later restore from the changelog alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer
from support.waiting import wait_for_app

from kstream.dsl import StreamBuilder
from kstream.errors import StoreError
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState

pytestmark = pytest.mark.redis

KEYS = [f"k{i}" for i in range(4)]
PER_PHASE = 40
FAST_GROUP = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300}


def _count(src: str, dst: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(dst, key_serde="string", value_serde="long")
    return b


def _produce(bs: str, topic: str, per_key: int) -> None:
    p = Producer(bs)
    for i in range(per_key):
        for k in KEYS:
            p.produce(topic, b"v%d" % i, key=k.encode())
    p.flush()


def _await(what: str, check: Callable[[], bool], app: App, timeout: float = 60.0) -> None:
    wait_for_app(what, check, app, timeout, poll=0.05)


def _counts(app: App) -> dict[str, Any]:
    """The counts as queries see them; none while the store is down or being rebuilt (a query
    then fails with a StoreError, and the caller polls again)."""
    try:
        return {k: app.query("counts", k) for k in KEYS}
    except StoreError:
        return dict.fromkeys(KEYS)


def _app(
    bs: str,
    src: str,
    dst: str,
    app_id: str,
    url: str,
    state_dir: Path,
    guarantee: str = "exactly_once",
) -> App:
    config = {
        "state_dir": str(state_dir),
        "default_backend": url,
        "commit_interval": 50,
        "kafka": FAST_GROUP,
    }
    return App(_count(src, dst), app_id, bs, guarantee, config)


@pytest.mark.parametrize("guarantee", ["exactly_once", "exactly_once_v2", "at_least_once"])
def test_redis_restarted_empty_mid_run_is_rebuilt_from_the_changelog(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    server: RedisServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    guarantee: str,
) -> None:
    bs = bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    url = server.url + "?retry_for=30"
    app = _app(bs, src, dst, app_id, url, tmp_path, guarantee)
    app.start()
    try:
        _produce(bs, src, PER_PHASE)
        _await("the first phase", lambda: _counts(app) == dict.fromkeys(KEYS, 40), app)

        before = redis.Redis.from_url(server.url).info("server")["run_id"]
        server.stop()
        server.start()  # same port, no persistence: every key is gone
        # (the app reconnects and writes at once, so the keys themselves cannot show it)
        restarted = redis.Redis.from_url(server.url)
        assert restarted.info("server")["run_id"] != before
        assert restarted.config_get("save")["save"] == ""
        assert restarted.config_get("appendonly")["appendonly"] == "no"

        _produce(bs, src, PER_PHASE)
        _await("the second phase", lambda: _counts(app) == dict.fromkeys(KEYS, 80), app)
        # settled: nothing else arrives, and nothing counted twice
        time.sleep(0.3)
        assert _counts(app) == dict.fromkeys(KEYS, 80)
        assert app.state == AppState.RUNNING
    finally:
        app.close()
    assert app.error is None
    lost = [r.getMessage() for r in caplog.records if "lost its data" in r.getMessage()]
    assert lost, "the loss was not reported"

    # The changelog holds the right counts too: with Redis emptied again, a new instance
    # restores them from the changelog alone.
    redis.Redis.from_url(server.url).flushall()
    again = _app(bs, src, dst, app_id, url, tmp_path, guarantee)
    again.start()
    try:
        _await("the restore", lambda: _counts(again) == dict.fromkeys(KEYS, 80), again)
    finally:
        again.close()


def test_redis_restarted_empty_while_records_flow_keeps_counts_exact(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    server: RedisServer,
    tmp_path: Path,
) -> None:
    """The restart lands wherever it lands (a read, a check, a write after a commit): the
    final counts are exact all the same."""
    bs = bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    app = _app(bs, src, dst, app_id, server.url, tmp_path)
    app.start()
    try:
        _produce(bs, src, PER_PHASE)
        _await("the first phase", lambda: _counts(app) == dict.fromkeys(KEYS, 40), app)
        p = Producer(bs)

        def trickle() -> None:
            for i in range(PER_PHASE):
                for k in KEYS:
                    p.produce(src, b"w%d" % i, key=k.encode())
                p.flush()
                time.sleep(0.02)

        flow = threading.Thread(target=trickle)
        flow.start()
        try:
            _await("the flow to be counted", lambda: (_counts(app)["k0"] or 0) > 45, app)
            server.stop()
            server.start()
        finally:
            flow.join()
        _await("the second phase", lambda: _counts(app) == dict.fromkeys(KEYS, 80), app)
        time.sleep(0.3)
        assert _counts(app) == dict.fromkeys(KEYS, 80)
    finally:
        app.close()
    assert app.error is None


def test_redis_emptied_between_runs_is_restored_on_start(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    server: RedisServer,
    tmp_path: Path,
) -> None:
    bs = bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    url = server.url
    app = _app(bs, src, dst, app_id, url, tmp_path)
    app.start()
    try:
        _produce(bs, src, PER_PHASE)
        _await("the first run", lambda: _counts(app) == dict.fromkeys(KEYS, 40), app)
    finally:
        app.close()
    server.stop()
    server.start()
    again = _app(bs, src, dst, app_id, url, tmp_path)
    again.start()
    try:
        _produce(bs, src, PER_PHASE)
        _await("the second run", lambda: _counts(again) == dict.fromkeys(KEYS, 80), again)
    finally:
        again.close()
    assert again.error is None


def test_a_rolled_back_or_emptied_store_is_refused_before_anything_is_written(
    server: RedisServer,
) -> None:
    """The backend's own checks: a checkpoint older than the one this handle wrote (a failover
    to a replica that was behind) and a missing epoch (a restart with empty memory)."""
    import store_backends
    from kstream.errors import StoreLostError

    be = store_backends.open(server.url, name="counts", partition=1, namespace="app")
    be.write_batch({b"k": b"1"}, (), {"changelog_offset": 5})
    be.write_batch({b"k": b"2"}, (), {"changelog_offset": 6})
    be.check_intact()  # type: ignore[attr-defined]
    raw = redis.Redis.from_url(server.url)
    (cp_key,) = raw.keys("*:cp")
    raw.set(cp_key, b'{"changelog_offset":5}')  # the replica that took over was one write behind
    raw.hset(cp_key.replace(b":cp", b":v"), b"k", b"1")
    with pytest.raises(StoreLostError, match="rolled back"):
        be.check_intact()  # type: ignore[attr-defined]
    with pytest.raises(StoreLostError, match="rolled back"):
        be.write_batch({b"k": b"3"}, (), {"changelog_offset": 7})
    assert be.get(b"k") == b"1"  # nothing written over the rolled-back data

    fresh = store_backends.open(server.url, name="counts", partition=1, namespace="app")
    fresh.write_batch({b"k": b"3"}, (), {"changelog_offset": 7})  # a new handle adopts it
    raw.flushall()
    with pytest.raises(StoreLostError, match="lost its data"):
        fresh.check_intact()  # type: ignore[attr-defined]
    with pytest.raises(StoreLostError, match="lost its data"):
        fresh.write_batch({b"k": b"4"}, (), {"changelog_offset": 8})
    assert raw.dbsize() == 0
    be.close()
    fresh.close()
