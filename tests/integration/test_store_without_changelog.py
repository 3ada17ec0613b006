"""A store with `changelog=False` (Kafka's logging disabled) on the native runtime.

Such a store has no changelog topic, so there is nothing to restore it from: the app must
start, process and commit without creating or reading one (it used to wait for the missing
changelog until the restore timed out and then fail).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from e2e.independent_reader import IndependentReader
from support.waiting import wait_for_app

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App

_LONG = struct.Struct(">q")


def test_a_count_into_a_store_without_changelog_runs_and_logs_nothing(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    src, out, app_id = unique_name("words"), unique_name("counts"), unique_name("app")
    with Admin(bs) as admin:
        admin.create_topic(src, 1)
        admin.create_topic(out, 1)
    b = StreamBuilder()
    counts = (
        b.stream(src, "string", "string")
        .group_by_key()
        .count(store=stores.key_value("counts", changelog=False))
    )
    counts.to_stream().to(out, "string", "long")
    p = Producer(bs)
    for i, word in enumerate(["a", "b", "a", "a"]):
        p.produce(src, b"x", word.encode(), partition=0, timestamp=1_000 + i)
    p.flush()

    def read() -> list[tuple[str | None, int | None]]:
        with IndependentReader(bs, [out]) as reader:
            reader.read_to_end()
            return [(u.key, u.value) for u in reader.records[out]]

    config = {"state_dir": str(tmp_path), "commit_interval": 50}
    app = App(b, app_id, bs, "exactly_once_v2", config)
    app.start()
    try:
        wait_for_app("four counts", lambda: len(read()) == 4, app, timeout=60)
    finally:
        assert app.close(timeout=30)
    assert app.error is None
    assert read() == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]
    with Admin(bs) as admin:
        assert f"{app_id}-counts-changelog" not in admin.list_topics()
