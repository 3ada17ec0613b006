"""`rebalance_protocol="streams"` (KIP-1071) on a broker that offers Streams groups.

A running count per key over a 4-partition topic under exactly_once_v2, whose every update is
an output: per key the outputs must be 1, 2, ..., n with nothing missing, repeated or wrong, as
a plain read_committed consumer reads them. One instance takes all four tasks from the
broker's assignor; a second joining takes some over (the first keeps the rest running), and
after the first leaves the second runs all four. Skipped where the broker lacks Streams groups
(before Apache Kafka 4.2), with the broker named.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import running_counts
from support.committed_reader import read_committed
from support.running_counts import check_exact, fed, produce
from support.waiting import wait_for_app

from kstream.kafka.broker import EmbeddedBroker
from kstream.runtime import App

pytestmark = pytest.mark.kafka_feature("streams_group_protocol")


@pytest.fixture
def streams_groups(kafka_broker: EmbeddedBroker) -> Iterator[str]:
    from kstream.kafka.streams_group import StreamsGroupClient

    bs = kafka_broker.bootstrap_servers
    client = StreamsGroupClient(bs)
    try:
        offered = client.supports_streams_groups()
    finally:
        client.close()
    if not offered:
        pytest.skip(f"the broker at {bs} does not offer Streams groups (KIP-1071)")
    yield bs


def _app(bs: str, app_id: str, inp: str, out: str, state: Path) -> App:
    return running_counts.app(bs, app_id, inp, out, state, {"rebalance_protocol": "streams"})


def _tasks(app: App) -> list[tuple[int, int]]:
    stream = app._stream
    return [] if stream is None else sorted(stream.tasks)


def test_one_instance_runs_every_task_the_broker_assigns(
    streams_groups: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = streams_groups
    inp, out, app_id = fed(bs, unique_name)
    app = _app(bs, app_id, inp, out, tmp_path / "a")
    app.start()
    try:
        wait_for_app("200 outputs", lambda: len(read_committed(bs, out)) >= 200, app, 120, 0.5)
        assert _tasks(app) == [(0, p) for p in range(4)]
        # as an operator sees it: Kafka's own kafka-streams-groups.sh lists the member, its
        # process and its tasks
        listed = _streams_groups_tool(bs, "--describe", "--group", app_id, "--members")
        member = app._stream.consumer.member  # type: ignore[union-attr]
        (line,) = [ln for ln in listed.splitlines() if member.member_id in ln]
        assert line.split()[0] == app_id and member.process_id in line, listed
        assert "ACTIVE: 0:[0,1,2,3]" in line, listed
    finally:
        app.close()
    assert app.error is None
    check_exact(bs, out, 200)


def _streams_groups_tool(bs: str, *args: str) -> str:
    """The output of Kafka's kafka-streams-groups.sh (its class, from the broker's jars)."""
    from kstream.testing.kafka import _java, kafka_libs

    tool = "org.apache.kafka.tools.streams.StreamsGroupCommand"
    done = subprocess.run(
        [_java(), "-cp", f"{kafka_libs()}/*", tool, "--bootstrap-server", bs, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_second_instance_takes_tasks_over_and_the_counts_stay_exact(
    streams_groups: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = streams_groups
    inp, out, app_id = fed(bs, unique_name)
    a = _app(bs, app_id, inp, out, tmp_path / "a")
    a.start()
    b = _app(bs, app_id, inp, out, tmp_path / "b")
    try:
        wait_for_app("200 outputs", lambda: len(read_committed(bs, out)) >= 200, a, 120, 0.5)
        assert a._stream is not None
        running = dict(a._stream.tasks)
        b.start()
        wait_for_app(
            "the second instance holding tasks",
            lambda: bool(_tasks(b)) and len(_tasks(a)) + len(_tasks(b)) == 4,
            b,
            120,
            0.2,
        )
        # the tasks the first instance kept were never closed (the same objects run on)
        for task in _tasks(a):
            assert a._stream.tasks[task] is running[task]
        produce(bs, inp, 200, 200)
        wait_for_app("400 outputs", lambda: len(read_committed(bs, out)) >= 400, b, 120, 0.5)
        a.close()
        wait_for_app("the second instance runs all four", lambda: len(_tasks(b)) == 4, b, 120)
        produce(bs, inp, 400, 200)
        wait_for_app("600 outputs", lambda: len(read_committed(bs, out)) >= 600, b, 120, 0.5)
        time.sleep(1.0)  # a repeat, were there one, would come within a commit or two
    finally:
        a.close()
        b.close()
    assert a.error is None and b.error is None
    check_exact(bs, out, 600)
