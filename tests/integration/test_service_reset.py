"""`kstreamd reset` on the real broker: an app reset starts over from the beginning."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.kafka.admin import Admin
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier
from kstream.runtime import App, AppState
from kstream.service.cli import main
from kstream.service.reset import reset_app

FAST_GROUP = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300}


def _count(src: str, dst: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(src, key_serde="string", value_serde="string").group_by_key().count(
        store="counts"
    ).to_stream().to(dst, key_serde="string", value_serde="long")
    return b


def _app_module(where: Path, src: str, dst: str) -> str:
    """A module `MODULE` with `topology`, the counting topology over `src` and `dst`, for
    `kstreamd reset MODULE:topology` (`where` must be on sys.path)."""
    name = f"reset_app_{uuid.uuid4().hex[:8]}"
    (where / f"{name}.py").write_text(
        "from kstream.dsl import StreamBuilder\n"
        "b = StreamBuilder()\n"
        f"b.stream({src!r}, key_serde='string', value_serde='string').group_by_key()"
        ".count(store='counts').to_stream()"
        f".to({dst!r}, key_serde='string', value_serde='long')\n"
        "topology = b.build()\n"
    )
    return name


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
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    bs = kafka_broker.bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    p = Producer(bs)
    for i in range(12):
        p.produce(src, b"v", key=b"k%d" % (i % 4))
    p.flush()
    config = {"state_dir": str(tmp_path), "default_backend": "lmdb", "kafka": FAST_GROUP}
    _run_until(App(_count(src, dst), app_id, bs, "at_least_once", config), dst, bs, 12)
    changelog = f"{app_id}-counts-changelog"
    assert changelog in admin.list_topics()
    assert os.path.isdir(tmp_path / app_id)

    module = _app_module(tmp_path, src, dst)
    code = main(
        [
            "reset",
            f"{module}:topology",
            "--app-id",
            app_id,
            "--bootstrap-servers",
            bs,
            "--state-dir",
            str(tmp_path),
        ]
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


def _reset(*args: str) -> int:
    return main(["reset", *args])


def test_reset_of_one_app_leaves_an_app_sharing_its_prefix_alone(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Apps `A` and `A-x`: resetting `A` deletes A's topics and state, never A-x's."""
    monkeypatch.syspath_prepend(str(tmp_path))
    bs = kafka_broker.bootstrap_servers
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("wc")
    other = f"{app}-x"
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    p = Producer(bs)
    for i in range(8):
        p.produce(src, b"v", key=b"k%d" % (i % 4))
    p.flush()
    state = tmp_path / "state"
    config = {"state_dir": str(state), "default_backend": "lmdb", "kafka": FAST_GROUP}
    _run_until(App(_count(src, dst), app, bs, "at_least_once", config), dst, bs, 8)
    _run_until(App(_count(src, dst), other, bs, "at_least_once", config), dst, bs, 16)
    # the marks' changelog exists where the broker-compatibility component is on
    marks = Config().broker_compat == "tansu"
    mine = {f"{app}-counts-changelog"} | (
        {f"{app}-kstream-src-marks-0-changelog"} if marks else set()
    )
    theirs = {f"{other}-counts-changelog"}
    theirs |= {f"{other}-kstream-src-marks-0-changelog"} if marks else set()
    assert mine | theirs <= set(admin.list_topics())
    common = ["--app-id", app, "--bootstrap-servers", bs, "--state-dir", str(state)]

    # without the topology: the look-alikes of both apps are listed, nothing is changed
    assert _reset(*common) == 2
    err = capsys.readouterr().err
    assert "nothing was changed" in err and f"{other}-counts-changelog" in err, err
    assert mine | theirs <= set(admin.list_topics())
    assert (state / app).is_dir()
    assert _reset("--dry-run", *common) == 0
    assert "not deleted" in capsys.readouterr().out

    # a dry run with the topology names exactly A's topics and changes nothing
    module = _app_module(tmp_path, src, dst)
    assert _reset(f"{module}:topology", "--dry-run", *common) == 0
    out = capsys.readouterr().out
    assert "would delete topics" in out and other not in out, out
    assert mine | theirs <= set(admin.list_topics())
    assert (state / app).is_dir()

    assert _reset(f"{module}:topology", *common) == 0
    topics = _topics_after_deletes(admin, mine)
    assert not mine & topics
    assert theirs <= topics
    assert not (state / app).exists()
    assert (state / other).is_dir()


def _topics_after_deletes(admin: Admin, deleted: set[str], timeout: float = 10.0) -> set[str]:
    """The broker's topics once `deleted` are gone from its metadata (Apache Kafka deletes a
    topic asynchronously: its metadata may list it for a moment after the delete returned),
    or as they are after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        topics = set(admin.list_topics())
        if not deleted & topics or time.monotonic() > deadline:
            return topics
        time.sleep(0.1)


@pytest.mark.parametrize("bad", ["..", ".", "a/b", "../escape", "my app", ""])
def test_reset_rejects_an_app_id_that_is_not_a_topic_name(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "keep").write_text("not the reset's business")
    code = _reset("--app-id", bad, "--bootstrap-servers", "127.0.0.1:1", "--state-dir", str(state))
    assert code == 2
    err = capsys.readouterr().err
    assert "app_id" in err and "letters, digits" in err, err
    assert state.is_dir() and (tmp_path / "keep").exists()


def test_reset_refuses_a_running_app(
    kafka_broker: EmbeddedBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    bs = kafka_broker.bootstrap_servers
    src, dst, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    admin = Admin(bs)
    admin.create_topic(src, 2)
    admin.create_topic(dst, 2)
    p = Producer(bs)
    for i in range(4):
        p.produce(src, b"v", key=b"k%d" % i)
    p.flush()
    config = {"state_dir": str(tmp_path), "kafka": FAST_GROUP}
    app = App(_count(src, dst), app_id, bs, "at_least_once", config)
    app.start()
    module = _app_module(tmp_path, src, dst)
    args = [f"{module}:topology", "--app-id", app_id, "--bootstrap-servers", bs]
    try:
        assert app.wait_for(AppState.RUNNING, timeout=60)
        deadline = time.monotonic() + 60
        while len(_read_all(bs, dst)) < 4 and time.monotonic() < deadline:
            pass
        assert len(_read_all(bs, dst)) == 4
        assert _reset(*args, "--state-dir", str(tmp_path)) == 1
        err = capsys.readouterr().err
        assert f"app {app_id!r} is running" in err and "--force" in err, err
        assert f"{app_id}-counts-changelog" in admin.list_topics()
        assert (tmp_path / app_id).is_dir()
    finally:
        app.close()
    assert _reset(*args, "--state-dir", str(tmp_path)) == 0
    assert f"{app_id}-counts-changelog" not in admin.list_topics()


class _RecordingSupplier(KafkaClientSupplier):
    """Kafka's clients; `asked` lists each request as (role, config)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, ClientConfig]] = []

    def consumer(self, config: ClientConfig) -> Consumer:
        self.asked.append(("consumer", config))
        return super().consumer(config)

    def admin(self, config: ClientConfig) -> Admin:
        self.asked.append(("admin", config))
        return super().admin(config)


def test_reset_gets_its_clients_from_the_supplier(
    kafka_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    src, app_id = unique_name("in"), unique_name("app")
    Admin(bs).create_topic(src, 1)
    p = Producer(bs)
    for _ in range(3):
        p.produce(src, b"v", key=b"k")
    p.flush()
    with Consumer(bs, group_id=app_id) as c:
        c.commit([TopicPartition(src, 0, 3)])
    supplier = _RecordingSupplier()
    report = reset_app(
        app_id, bs, state_dir=str(tmp_path), kafka=FAST_GROUP, client_supplier=supplier
    )
    assert any("set to earliest on 1 partition(s)" in line for line in report), report
    assert [role for role, _ in supplier.asked] == ["admin", "consumer"]
    assert supplier.asked[1][1].group_id == app_id
    assert supplier.asked[1][1].kafka == FAST_GROUP
    with Consumer(bs, group_id=app_id) as c:
        assert [tp.offset for tp in c.committed([(src, 0)])] == [0]
