"""The instance registry's part in standby placement (kstream.runtime.instances), on the mock
cluster: what an instance publishes (active and standby partitions, the time), the heartbeat
that tells live instances from killed ones, and knowing when the topic has been read."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kstream.runtime import instances
from kstream.runtime.instances import LIVE_S, InstanceInfo, InstanceRegistry
from kstream.testing import MockCluster
from kstream.testing.supplier import MockClientSupplier


def _registry(cluster: MockCluster, instance: str) -> InstanceRegistry:
    return InstanceRegistry(
        "app",
        "mock:9092",
        instance_id=instance,
        endpoint=f"http://{instance}",
        client_supplier=MockClientSupplier(cluster),
    )


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def test_active_and_standby_partitions_round_trip() -> None:
    info = InstanceInfo("a", "http://a", {"in": [1, 0]}, standbys={"in": [2]})
    back = InstanceInfo.from_json(info.to_json(), 7)
    assert (back.partitions, back.standbys, back.offset) == ({"in": [0, 1]}, {"in": [2]}, 7)
    assert back.holds("in", 0) and back.holds_standby("in", 2) and not back.holds_standby("in", 0)
    assert abs(back.published_ms - time.time() * 1000) < 60_000
    # a record of an older kstream, without standbys or a time, reads as none and 0
    old = InstanceInfo.from_json(b'{"instance_id": "o", "endpoint": "", "partitions": {}}', 1)
    assert (old.standbys, old.published_ms) == ({}, 0)


def test_instances_not_heard_of_lately_are_not_live() -> None:
    cluster = MockCluster()
    one, two = _registry(cluster, "one"), _registry(cluster, "two")
    one.start()
    two.start()
    try:
        assert two.wait_caught_up(10)
        assert one.publish([("in", 0)], [("in", 1)])
        assert not one.publish([("in", 0)], [("in", 1)])  # unchanged: not published again
        assert two.publish([("in", 1)])
        _until(lambda: len(two.instances()) == 2)
        [seen] = [i for i in two.instances() if i.instance_id == "one"]
        assert seen.holds("in", 0) and seen.holds_standby("in", 1)
        now = seen.published_ms
        assert {i.instance_id for i in two.live(now)} == {"one", "two"}
        # "one" killed: no tombstone, no heartbeat; after LIVE_S it is gone, "two" stays
        later = now + int(LIVE_S * 1000) + 1
        assert {i.instance_id for i in two.live(later)} == {"two"}
    finally:
        one.close()
        two.close()
        two.close()  # closing twice is harmless (the App and kstreamd run may both)


def test_a_running_instance_publishes_again_as_a_heartbeat(monkeypatch: Any) -> None:
    monkeypatch.setattr(instances, "HEARTBEAT_S", 0.05)
    cluster = MockCluster()
    one = _registry(cluster, "one")
    one.start()
    try:
        assert one.publish([("in", 0)])
        _until(lambda: len(cluster.messages("app-instances")) >= 3)
        beats = [InstanceInfo.from_json(m.value(), 0) for m in cluster.messages("app-instances")]
        assert all(b.partitions == {"in": [0]} for b in beats)  # the same claim, again
        assert beats[-1].published_ms >= beats[0].published_ms
    finally:
        one.close()
    assert cluster.messages("app-instances")[-1].value() is None  # the tombstone ends it


def test_a_heartbeat_never_claims_partitions_a_new_publication_gave_up() -> None:
    """A heartbeat that read the old assignment just before a rebalance's publication must not
    send it after that publication: the newest claim wins routing, so the instance would
    claim partitions it no longer holds, and its next heartbeats would repeat them."""
    cluster = MockCluster()
    one, two = _registry(cluster, "one"), _registry(cluster, "two")
    two.start()
    assert two.wait_caught_up(10)
    one.start()
    try:
        assert one.publish([("in", 0), ("in", 1)])
        send = one._send
        in_heartbeat = threading.Event()

        def slow_send(*args: Any) -> None:  # the heartbeat's send, overtaken meanwhile
            if threading.current_thread().name.startswith("kstream-instances-"):
                in_heartbeat.set()
                time.sleep(0.3)
            send(*args)

        one._send = slow_send  # type: ignore[method-assign]
        one._published_at -= instances.HEARTBEAT_S  # a heartbeat is due
        assert in_heartbeat.wait(10)
        assert one.publish([("in", 0)])  # the rebalance took partition 1 away
        _until(lambda: any(i.instance_id == "one" for i in two.instances()))
        time.sleep(0.5)  # the heartbeat's send has ended, whichever order they took
        [seen] = [i for i in two.instances() if i.instance_id == "one"]
        assert seen.holds("in", 0) and not seen.holds("in", 1)
        assert two.owner("in", 1) is None
    finally:
        one.close()
        two.close()
