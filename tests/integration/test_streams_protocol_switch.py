"""Which group protocol an app starts under, on the real broker (kstream.runtime.streams_protocol).

- `rebalance_protocol="auto"` (the default) runs the Streams protocol (KIP-1071) where the
  broker offers it, and the classic one where it does not: on the compatibility lanes' 3.9 and
  4.1 brokers, and on a 4.4 broker whose `group.coordinator.rebalance.protocols` leaves out
  `streams` (which still lists the RPCs in ApiVersions, and answers each with
  UNSUPPORTED_VERSION).
- A group does not switch protocol while instances run in it: an app that asks for a protocol
  its group's type refuses fails at start-up, naming the group, its type, the protocol asked
  and what to do, instead of a member that retries for ever (librdkafka's JoinGroup to a
  streams group: INCONSISTENT_GROUP_PROTOCOL, again and again) or stops later.
- After a full stop it does: an app that ran under the classic protocol, restarted under
  `auto` on Apache Kafka 4.4.0, becomes a streams group with the classic group's committed
  offsets and its stores' changelogs kept: its counts go on from where they were, with nothing
  missing, repeated or wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from support import kafka_features, running_counts
from support.committed_reader import read_committed
from support.running_counts import check_exact, fed, produce
from support.waiting import wait_for_app

from kstream.kafka.streams_group import GroupListing, StreamsGroupClient
from kstream.runtime import App
from kstream.runtime.app import AppState
from kstream.runtime.streams_protocol import GroupProtocolMismatch
from kstream.testing.kafka import KafkaCluster

STREAMS = pytest.mark.kafka_feature("streams_group_protocol")


def _group(bs: str, group_id: str) -> GroupListing | None:
    with StreamsGroupClient(bs, request_timeout_s=30) as client:
        return client.group_type(group_id)


def _runs(app: App) -> str:
    assert app._stream is not None
    return app._stream.rebalance_protocol


def _counted(bs: str, app: App, out: str, n: int) -> None:
    wait_for_app(f"{n} outputs", lambda: len(read_committed(bs, out)) >= n, app, 120, 0.5)


@pytest.fixture
def member_of() -> Iterator[Callable[[str, str, str, str], Consumer]]:
    """A plain consumer in group `group` (protocol "classic" or "consumer"), subscribed to
    `topic` and holding its partitions; closed after the test."""
    consumers: list[Consumer] = []

    def join(bs: str, group: str, topic: str, protocol: str) -> Consumer:
        conf = {"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        c = Consumer(conf)
        consumers.append(c)
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while not c.assignment():
            assert time.monotonic() < deadline, f"{protocol} consumer never joined {group}"
            c.poll(0.2)
        return c

    yield join
    for c in consumers:
        c.close()


def test_auto_runs_streams_where_the_broker_offers_it_and_classic_elsewhere(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    offered = kafka_features.missing("streams_group_protocol") is None
    inp, out, app_id = fed(bs, unique_name)
    app = running_counts.app(bs, app_id, inp, out, tmp_path, {})
    app.start()
    try:
        _counted(bs, app, out, 200)
        assert _runs(app) == ("streams" if offered else "cooperative")
        group = _group(bs, app_id)
        assert group is not None and group.type == ("streams" if offered else "classic")
    finally:
        app.close()
    assert app.error is None
    check_exact(bs, out, 200)


@STREAMS
def test_auto_is_classic_where_the_coordinator_has_streams_off(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    with KafkaCluster(overrides={"group.coordinator.rebalance.protocols": "classic,consumer"}) as k:
        bs = k.bootstrap_servers
        with StreamsGroupClient(bs, request_timeout_s=30) as client:
            assert not client.supports_streams_groups()
        inp, out, app_id = fed(bs, unique_name)
        app = running_counts.app(bs, app_id, inp, out, tmp_path, {})
        app.start()
        try:
            _counted(bs, app, out, 200)
            assert _runs(app) == "cooperative"
        finally:
            app.close()
        assert app.error is None
        check_exact(bs, out, 200)
        explicit = running_counts.app(
            bs, app_id, inp, out, tmp_path / "b", {"rebalance_protocol": "streams"}
        )
        with pytest.raises(Exception, match="does not offer Streams groups") as refused:
            explicit.start()
        assert "group.coordinator.rebalance.protocols" in str(refused.value)


@STREAMS
def test_streams_asked_of_a_classic_group_with_members_fails_at_start(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    member_of: Callable[[str, str, str, str], Consumer],
) -> None:
    bs = bootstrap_servers
    inp, out, app_id = fed(bs, unique_name)
    member_of(bs, app_id, inp, "classic")
    app = running_counts.app(bs, app_id, inp, out, tmp_path, {"rebalance_protocol": "streams"})
    with pytest.raises(GroupProtocolMismatch) as refused:
        app.start()
    text = str(refused.value)
    assert f"group {app_id!r} at {bs} is a classic group (Stable)" in text, text
    assert "rebalance_protocol='streams'" in text and "stop every instance" in text, text
    assert app.state == AppState.ERROR
    # `auto` joins the group as it is (a rolling upgrade from the classic protocol)
    joining = running_counts.app(bs, app_id, inp, out, tmp_path / "b", {})
    joining.start()
    try:
        assert _runs(joining) in ("cooperative", "eager")
    finally:
        joining.close()


@STREAMS
def test_classic_asked_of_a_streams_group_with_members_fails_at_start(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    inp, out, app_id = fed(bs, unique_name)
    running = running_counts.app(bs, app_id, inp, out, tmp_path / "a", {})
    running.start()
    try:
        _counted(bs, running, out, 200)
        assert _runs(running) == "streams"
        for protocol in ("cooperative", "eager", "consumer"):
            config = {"state_dir": str(tmp_path / protocol), "rebalance_protocol": protocol}
            # (the consumer protocol takes no client-side session settings)
            app = App(running_counts.topology(inp, out), app_id, bs, "exactly_once_v2", config)
            with pytest.raises(GroupProtocolMismatch) as refused:
                app.start()
            text = str(refused.value)
            assert f"group {app_id!r} at {bs} is a streams group (Stable)" in text, text
            assert f"rebalance_protocol={protocol!r}" in text, text
    finally:
        running.close()
    assert running.error is None
    check_exact(bs, out, 200)


@STREAMS
def test_a_consumer_group_never_becomes_a_streams_group(
    bootstrap_servers: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    member_of: Callable[[str, str, str, str], Consumer],
) -> None:
    bs = bootstrap_servers
    inp, out, app_id = fed(bs, unique_name)
    c = member_of(bs, app_id, inp, "consumer")
    c.commit(offsets=[TopicPartition(inp, 0, 1)], asynchronous=False)
    c.close()
    group = _group(bs, app_id)
    assert group == GroupListing("consumer", "Empty")
    app = running_counts.app(bs, app_id, inp, out, tmp_path, {"rebalance_protocol": "streams"})
    with pytest.raises(GroupProtocolMismatch, match="delete the group"):
        app.start()


@STREAMS
def test_a_classic_group_restarted_under_auto_becomes_a_streams_group_keeping_its_offsets(
    bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = bootstrap_servers
    inp, out, app_id = fed(bs, unique_name)
    classic = running_counts.app(
        bs, app_id, inp, out, tmp_path / "a", {"rebalance_protocol": "cooperative"}
    )
    classic.start()
    try:
        _counted(bs, classic, out, 200)
    finally:
        classic.close()
    assert classic.error is None
    group = _group(bs, app_id)
    assert group == GroupListing("classic", "Empty")
    produce(bs, inp, 200, 200)
    # a fresh state directory: the counts go on from the changelogs, the inputs from the
    # classic group's committed offsets (inputs read again would count twice)
    streams = running_counts.app(bs, app_id, inp, out, tmp_path / "b", {})
    streams.start()
    try:
        _counted(bs, streams, out, 400)
        assert _runs(streams) == "streams"
        group = _group(bs, app_id)
        assert group is not None and group.type == "streams"
        time.sleep(1.0)  # a repeat, were there one, would come within a commit or two
    finally:
        streams.close()
    assert streams.error is None
    check_exact(bs, out, 400)
