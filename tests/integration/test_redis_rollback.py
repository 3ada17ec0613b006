"""A Redis restarted on an older snapshot: nothing computed from the old data may leave the app.

The server is killed (SIGKILL) after more commits than its last `SAVE` holds and started again
on that dump: the store's epoch is the one the task knows, its checkpoint is older, and every
key holds an older value. The first read from the restarted server must see it (before the
batch produces a single record), the task's stores are rebuilt from their changelogs and the
counts go on exactly.

Each output carries the count and the per-key sequence number of the record that made it
(`count * M + seq`), so a plain read_committed consumer can tell a right value from a wrong one
(the count must be seq + 1) without trusting kstream: under exactly-once every update appears
once, in order; under at-least-once a replay from the committed offsets may repeat right values,
never show a wrong one. Under exactly-once the read_uncommitted view is checked too: a value
computed from the rolled-back store must not even sit in an aborted transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from e2e.independent_reader import IndependentReader, check_updates
from support.redis_server import RedisServer

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState

pytestmark = pytest.mark.redis

KEYS = [f"k{i}" for i in range(4)]
PHASE = 25
M = 1_000_000
FAST_GROUP = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300}


def _step(key: str, value: str, agg: int) -> int:
    """The count so far and the sequence number of the record that moved it, in one long."""
    return (agg // M + 1) * M + int(value)


def _topology(src: str, dst: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().aggregate(
        lambda: 0, _step, store="counts", value_serde="long"
    ).to_stream().to(dst, key_serde="string", value_serde="long")
    return b


def _produce(bs: str, topic: str, first: int, n: int) -> None:
    p = Producer(bs)
    for seq in range(first, first + n):
        for k in KEYS:
            p.produce(topic, str(seq).encode(), key=k.encode())
    p.flush()


def _stored(url: str) -> dict[bytes, int]:
    """The counts as Redis holds them (written at commits, with the checkpoint); a stored
    value ends with the aggregate as an 8-byte big-endian long (after its timestamp)."""
    raw = redis.Redis.from_url(url)
    return {
        k: int.from_bytes(v[-8:], "big", signed=True) // M
        for key in raw.keys("*:counts:*:v")
        for k, v in raw.hgetall(key).items()
    }


def _await_counts(app: App, url: str, want: int, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    seen: dict[bytes, int] = {}
    while time.monotonic() < deadline:
        if app.state == AppState.ERROR:
            raise AssertionError(f"app failed while counting to {want}: {app.error}")
        seen = _stored(url)
        if len(seen) == len(KEYS) and set(seen.values()) == {want}:
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out counting to {want}: {seen}; state {app.state}")


def _wrong(values: list[int | None]) -> list[int | None]:
    """Values whose count is not their record's sequence number + 1."""
    return [v for v in values if v is None or v // M != v % M + 1]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", "exactly_once_v2"])
def test_redis_restarted_on_an_older_snapshot_produces_nothing_from_it(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    server: RedisServer,
    tmp_path: Path,
    guarantee: str,
) -> None:
    bs = bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    config = {
        "state_dir": str(tmp_path),
        "default_backend": server.url,
        "commit_interval": 50,
        "kafka": FAST_GROUP,
    }
    app = App(_topology(src, dst), app_id, bs, guarantee, config)
    app.start()
    try:
        _produce(bs, src, 0, PHASE)
        _await_counts(app, server.url, PHASE)
        redis.Redis.from_url(server.url).save()  # the snapshot the server will come back with
        _produce(bs, src, PHASE, PHASE)
        _await_counts(app, server.url, 2 * PHASE)  # committed past the snapshot

        server.kill()
        server.start()  # on the dump: the same epoch, an older checkpoint, older counts
        assert set(_stored(server.url).values()) == {PHASE}

        _produce(bs, src, 2 * PHASE, PHASE)
        _await_counts(app, server.url, 3 * PHASE)
        assert app.state == AppState.RUNNING
    finally:
        app.close()
    assert app.error is None

    per_key = {k: [(n + 1) * M + n for n in range(3 * PHASE)] for k in KEYS}
    with IndependentReader(bs, [dst]) as reader:
        reader.read_to_end()
        got = reader.updates(dst)
        wrong = {k: _wrong(vs) for k, vs in got.items() if _wrong(vs)}
        assert not wrong, f"values computed from the rolled-back store: {wrong}"
        verdict = check_updates(reader, dst, per_key)
    if guarantee == "at_least_once":
        assert verdict.missing == verdict.wrong == 0, str(verdict)
        for k, vs in got.items():  # a count only goes back to repeat what was sent before
            for i in range(1, len(vs)):
                assert vs[i] in vs[:i] or vs[i] == max(vs[:i]) + M + 1, (k, vs[i - 1], vs[i])
    else:
        assert verdict.exact, str(verdict)
        with IndependentReader(bs, [dst], isolation="read_uncommitted") as everything:
            everything.read_to_end()
            aborted_too = {k: _wrong(vs) for k, vs in everything.updates(dst).items()}
        assert not any(aborted_too.values()), (
            f"values computed from the rolled-back store, in aborted transactions: {aborted_too}"
        )


def test_the_first_read_from_a_server_restarted_on_an_older_dump_is_refused(
    server: RedisServer,
) -> None:
    """The backend alone: redis-py reconnects inside the read, and the answer (an older
    value) is refused before it is returned, by a get and by a scan alike."""
    import store_backends
    from kstream.errors import StoreLostError

    be = store_backends.open(server.url, name="counts", partition=0, namespace="app")
    be.write_batch({b"k": b"1"}, (), {"changelog_offset": 1})
    redis.Redis.from_url(server.url).save()
    be.write_batch({b"k": b"2"}, (), {"changelog_offset": 2})
    assert be.get(b"k") == b"2"
    server.kill()
    server.start()
    assert redis.Redis.from_url(server.url).hvals("kstream:{app:counts:0}:v") == [b"1"]
    with pytest.raises(StoreLostError, match=r"checkpoint is .*changelog_offset\":1.* rolled back"):
        be.get(b"k")
    with pytest.raises(StoreLostError, match="rolled back"):
        list(be.range())
    be.close()
