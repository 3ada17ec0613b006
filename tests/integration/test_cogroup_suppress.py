"""Cogroup and suppress on the native runtime against the real broker, exactly-once.

One app cogroups two inputs (one of them re-keyed, so it goes through the cogroup's
repartition topic) into a table of sums, and suppresses that table until 10 s of stream time
after each key's first update. It is stopped with an update still held in the suppression
buffer and started again on empty local state, so the buffer comes back from its changelog:
the held update must be emitted once after the restart, when stream time passes it (not lost,
not repeated), with the value it had when the app stopped.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

from e2e.independent_reader import IndependentReader
from support.waiting import wait_for_app

from kstream.dsl import StreamBuilder
from kstream.dsl.suppress import BufferConfig, Suppressed
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App

FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
_LONG = struct.Struct(">q")


class Topics:
    def __init__(self, unique_name: Callable[[str], str]) -> None:
        self.a, self.c = unique_name("a"), unique_name("c")
        self.sums, self.held = unique_name("sums"), unique_name("held")


def _builder(t: Topics) -> StreamBuilder:
    b = StreamBuilder()
    a = b.stream(t.a, "string", "long").group_by_key()
    # c's records are keyed "<key>/<anything>": re-keyed before the cogroup
    c = b.stream(t.c, "string", "long").group_by(
        lambda k, _v: k.split("/")[0], key_serde="string", value_serde="long"
    )
    sums = (
        a.cogroup(lambda _k, v, s: s + v)
        .cogroup(c, lambda _k, v, s: s + 100 * v)
        .aggregate(lambda: 0, store="sums", value_serde="long")
    )
    sums.to_stream().to(t.sums, "string", "long")
    held = sums.suppress(
        Suppressed.until_time_limit("10s", BufferConfig.unbounded()).with_name("held")
    )
    held.to_stream().to(t.held, "string", "long")
    return b


def _app(bs: str, t: Topics, app_id: str, state_dir: Path) -> App:
    config = {"state_dir": str(state_dir), "commit_interval": 50, "kafka": FAST_GROUP}
    return App(_builder(t), app_id, bs, "exactly_once_v2", config)


def _produce(bs: str, records: list[tuple[str, str, int, int]]) -> None:
    p = Producer(bs)
    for topic, key, value, ts in records:
        p.produce(topic, _LONG.pack(value), key.encode(), partition=0, timestamp=ts)
    p.flush()


def _read(bs: str, topics: list[str]) -> dict[str, list[tuple[str | None, int | None, int]]]:
    with IndependentReader(bs, topics) as reader:
        reader.read_to_end()
        return {t: [(u.key, u.value, u.timestamp) for u in reader.records[t]] for t in topics}


def _run_until(bs: str, t: Topics, app_id: str, state_dir: Path, check: Callable[[], bool]) -> None:
    app = _app(bs, t, app_id, state_dir)
    app.start()
    try:
        wait_for_app("the expected outputs", check, app, timeout=90)
    finally:
        assert app.close(timeout=30)
    assert app.error is None


def test_cogroup_and_suppress_survive_a_restart(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    t = Topics(unique_name)
    with Admin(bs) as admin:
        for topic in (t.a, t.c, t.sums, t.held):
            admin.create_topic(topic, 1)
    app_id = unique_name("app")
    base = 1_700_000_000_000

    _produce(bs, [(t.a, "k1", 1, base), (t.c, "k1/x", 2, base + 1000), (t.a, "k2", 5, base + 2000)])
    # k1 first buffered at base: held until stream time reaches base + 10 s

    def sums_done() -> bool:
        return len(_read(bs, [t.sums])[t.sums]) == 3

    _run_until(bs, t, app_id, tmp_path / "run1", sums_done)
    first = _read(bs, [t.sums, t.held])
    # the re-keyed input reaches the cogroup through its repartition topic, so the two inputs
    # interleave in any order: per key the updates are in order
    assert sorted(first[t.sums]) == [
        ("k1", 1, base),
        ("k1", 201, base + 1000),
        ("k2", 5, base + 2000),
    ]
    assert first[t.held] == []  # everything still held

    # a new state dir: the stores (the buffer too) come back from their changelogs
    _produce(bs, [(t.a, "k1", 3, base + 10_000), (t.a, "k3", 7, base + 12_500)])

    def held_done() -> bool:
        return len(_read(bs, [t.held])[t.held]) >= 2

    _run_until(bs, t, app_id, tmp_path / "run2", held_done)
    time.sleep(1)  # anything wrongly emitted late would show up now
    second = _read(bs, [t.sums, t.held])
    assert second[t.sums][3:] == [("k1", 204, base + 10_000), ("k3", 7, base + 12_500)]
    assert second[t.sums][:3] == first[t.sums]  # nothing processed twice
    # at base + 10 s k1 (buffered at base) goes, with its latest value and timestamp; at
    # base + 12.5 s k2 (buffered at base + 2 s) goes; k3 stays held
    assert second[t.held] == [("k1", 204, base + 10_000), ("k2", 5, base + 2000)]
