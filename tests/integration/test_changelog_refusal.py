"""A restore refuses changelog records kstream did not write, and names them where they are.

A plain producer writes into the real changelog of a count store on the real broker, the app
is restarted (memory stores: every start restores the whole changelog), and new input for the
key is waiting. Before, a garbage value was restored silently and the app then failed on that
innocent input record (`topic='...-in' partition=0 offset=...`), again after every restart.
Now the restore stops at the changelog record (topic, partition, offset), before any input is
processed; with `on_restore_error="skip"` it leaves the record out and counts on from the
key's previous value. With `broker_compat="tansu"` a well-formed forged value is refused too:
it lacks the provenance header every changelog record kstream writes there carries (without
that component such a value is indistinguishable from a real one, docs/architecture.md).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as PlainProducer
from e2e.independent_reader import IndependentReader, committed_offsets

from kstream.dsl import StreamBuilder
from kstream.errors import ChangelogRecordError, RecordError
from kstream.kafka.admin import Admin
from kstream.kafka.producer import Producer
from kstream.runtime import App, AppState
from kstream.state.provenance import HEADER, encode

KEYS = ["k0", "k1"]
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def _produce(bs: str, topic: str, per_key: int) -> None:
    p = Producer(bs)
    for i in range(per_key):
        for k in KEYS:
            p.produce(topic, b"v%d" % i, key=k.encode())
    p.flush()


def _plain_write(
    bs: str, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None
) -> int:
    """Write one record with a plain confluent-kafka producer; its offset."""
    got: list[Any] = []
    p = PlainProducer({"bootstrap.servers": bs})
    p.produce(topic, value, key, headers=headers, on_delivery=lambda err, msg: got.append(msg))
    p.flush(10)
    assert got and got[0].error() is None, got
    return int(got[0].offset())


class Run:
    """One count app of the test (the same app id each time: a restart)."""

    def __init__(self, bs: str, src: str, dst: str, app_id: str, state_dir: Path) -> None:
        self.bs, self.src, self.dst, self.app_id = bs, src, dst, app_id
        self.state_dir = state_dir
        self.changelog = f"{app_id}-counts-changelog"

    def app(self, **config: Any) -> App:
        b = StreamBuilder()
        b.stream(self.src, key_serde="string", value_serde="string").group_by_key().count(
            store="counts"
        ).to_stream().to(self.dst, key_serde="string", value_serde="long")
        settings = {
            "state_dir": str(self.state_dir),
            "commit_interval": 50,
            "kafka": FAST_GROUP,
            **config,
        }
        return App(b, self.app_id, self.bs, "exactly_once_v2", settings)

    def count_to(self, want: int, **config: Any) -> None:
        """Run until every key's count is `want`, then close (which commits)."""
        app = self.app(**config)
        app.start()
        try:
            _await(app, lambda: all(app.query("counts", k) == want for k in KEYS))
        finally:
            app.close()
        assert app.error is None

    def outputs(self) -> dict[str, list[int | None]]:
        with IndependentReader(self.bs, [self.dst]) as reader:
            reader.read_to_end()
            return reader.updates(self.dst)


def _await(app: App, check: Callable[[], bool], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.state == AppState.ERROR:
            raise AssertionError(f"app failed: {app.error}")
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out; state {app.state}")


@pytest.fixture
def run(bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path) -> Run:
    src, dst = unique_name("in"), unique_name("out")
    admin = Admin(bootstrap_servers)
    admin.create_topic(src, 1)
    admin.create_topic(dst, 1)
    return Run(bootstrap_servers, src, dst, unique_name("app"), tmp_path)


def _fails_at_restore(run: Run, offset: int, **config: Any) -> ChangelogRecordError:
    """Start the app again with new input waiting: it must stop in the restore, naming the
    changelog record, and process nothing."""
    _produce(run.bs, run.src, 5)
    app = run.app(**config)
    app.start()
    try:
        deadline = time.monotonic() + 40
        while app.state != AppState.ERROR and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        app.close()
    err = app.error
    assert isinstance(err, ChangelogRecordError) and not isinstance(err, RecordError), repr(err)
    assert (err.topic, err.partition, err.offset) == (run.changelog, 0, offset)
    assert f"changelog topic={run.changelog!r} partition=0 offset={offset}" in str(err)
    assert f"topic={run.src!r}" not in str(err), err  # no input record is blamed
    # nothing was processed: no output past the first run's, no input offset committed past it
    assert {k: len(v) for k, v in run.outputs().items()} == dict.fromkeys(KEYS, 10)
    assert committed_offsets(run.bs, run.app_id, run.src, 1) == 20
    return err


def test_a_garbage_changelog_record_stops_the_restore_naming_it(run: Run) -> None:
    _produce(run.bs, run.src, 10)
    run.count_to(10)
    offset = _plain_write(run.bs, run.changelog, b"k0", b"\x01\x02\x03", None)
    err = _fails_at_restore(run, offset)
    assert "does not decode as store 'counts' writes" in str(err)
    assert "on_restore_error='skip'" in str(err)


def test_skip_restores_without_the_garbage_record_and_counts_on(
    run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    _produce(run.bs, run.src, 10)
    run.count_to(10)
    offset = _plain_write(run.bs, run.changelog, b"k0", b"garbage", None)
    _produce(run.bs, run.src, 5)
    with caplog.at_level(logging.WARNING, logger="kstream.state.restore"):
        run.count_to(15, on_restore_error="skip")
    said = [r.getMessage() for r in caplog.records if "left out of the restore" in r.getMessage()]
    assert said and f"partition=0 offset={offset}" in said[0], said
    assert run.outputs() == {k: list(range(1, 16)) for k in KEYS}


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="no-header"),
        pytest.param(encode("someone-elses-topic", 0, 3), id="foreign-source"),
    ],
)
def test_under_broker_compat_a_well_formed_forged_value_is_refused(
    run: Run, header: bytes | None
) -> None:
    """The forged value (a count store's layout: an 8-byte timestamp, then the 8-byte long
    999) decodes as a count: only its provenance gives it away."""
    _produce(run.bs, run.src, 10)
    run.count_to(10, broker_compat="tansu")
    forged = struct.pack(">qq", 1_000, 999)
    headers = None if header is None else [(HEADER, header)]
    offset = _plain_write(run.bs, run.changelog, b"k0", forged, headers)
    err = _fails_at_restore(run, offset, broker_compat="tansu")
    if header is None:
        assert f"it has no {HEADER} header" in str(err), err
    else:
        assert "names someone-elses-topic[0] offset 3, which its task does not read" in str(err)
