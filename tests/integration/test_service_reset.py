"""`kstreamd reset` on the real broker: an app reset starts over from the beginning."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState
from kstream.service.cli import main


def _count(src: str, dst: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(dst, key_serde="string", value_serde="long")
    return b


def _read_all(bs: str, topic: str) -> list[tuple[str, int]]:
    """Every record of `topic` (a plain reader: this test runs at-least-once, without
    failures, so every output record is there exactly once)."""
    c = Consumer(bs)
    try:
        c.assign([(topic, 0, 0), (topic, 1, 0)])
        out: list[tuple[str, int]] = []
        while True:
            msgs = c.consume_batch(1000, 1.0)
            if not msgs:
                return out
            out += [(m.key().decode(), int.from_bytes(m.value(), "big")) for m in msgs]
    finally:
        c.close()


def _run_until(app: App, dst: str, bs: str, n: int) -> None:
    app.start()
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        for _ in range(300):
            if len(_read_all(bs, dst)) >= n:
                return
        raise AssertionError(f"{dst}: fewer than {n} records")
    finally:
        app.close()


def test_reset_moves_offsets_back_and_removes_internal_topics_and_state(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_broker.bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    p = Producer(bs)
    for i in range(12):
        p.produce(src, b"v", key=b"k%d" % (i % 4))
    p.flush()
    config = {"state_dir": str(tmp_path), "default_backend": "lmdb"}
    _run_until(App(_count(src, dst), app_id, bs, "at_least_once", config), dst, bs, 12)
    changelog = f"{app_id}-counts-changelog"
    assert changelog in admin.list_topics()
    assert os.path.isdir(tmp_path / app_id)

    code = main(
        ["reset", "--app-id", app_id, "--bootstrap-servers", bs, "--state-dir", str(tmp_path)]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "set to earliest on" in out and src in out, out
    assert changelog not in admin.list_topics()
    assert not os.path.exists(tmp_path / app_id)
    c = Consumer(bs, group_id=app_id)
    try:
        committed = c.committed([(src, 0), (src, 1)])
    finally:
        c.close()
    # partitions that had input are back at 0; one that had none has no committed offset
    offsets = [tp.offset for tp in committed]
    assert 0 in offsets and all(o == 0 or o < 0 for o in offsets), offsets

    # Started again, the app counts from scratch: each key's counts 1, 2, 3 appear twice.
    _run_until(App(_count(src, dst), app_id, bs, "at_least_once", config), dst, bs, 24)
    by_key: dict[str, list[int]] = {}
    for k, v in _read_all(bs, dst):
        by_key.setdefault(k, []).append(v)
    assert by_key == {f"k{i}": [1, 2, 3, 1, 2, 3] for i in range(4)}
