"""Which instance of an app holds which tasks: the `<app_id>-instances` topic.

See docs/architecture.md, "State" and "Standby replicas".

Every instance publishes `{instance_id, endpoint, partitions, standbys}` keyed by its instance
id to a compacted one-partition topic whenever its assignment changes, again every
`HEARTBEAT_S` while it runs, and a tombstone when it stops. Every instance reads the whole
topic, so any of them can tell who owns a partition without a coordinator. During a rebalance
two instances may briefly claim one partition; the claim published last (highest offset) wins,
because it reflects the newer assignment.

`partitions` are the input partitions of the instance's active tasks, `standbys` those of the
tasks it keeps standby replicas of (kstream.runtime.standby). An instance killed without its
tombstone stays in the topic: the heartbeat tells the live ones (`live`), which is what the
standby placement (kstream.runtime.placement) needs. The App runs the registry itself when it
keeps standbys; `kstreamd run` starts one for every app (its queries are routed with it) and
hands it to the App.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.runtime.app_shutdown import CONTROL_KEY

log = logging.getLogger("kstream.runtime")

__all__ = ["InstanceInfo", "InstanceRegistry", "instances_topic"]


def instances_topic(app_id: str) -> str:
    return f"{app_id}-instances"


@dataclass(frozen=True)
class InstanceInfo:
    """One instance as published: its id, HTTP endpoint, the input partitions of its active
    tasks and of its standby tasks, and when it published (its wall clock, ms)."""

    instance_id: str
    endpoint: str
    partitions: dict[str, list[int]] = field(default_factory=dict)
    offset: int = -1
    standbys: dict[str, list[int]] = field(default_factory=dict)
    published_ms: int = 0

    def to_json(self) -> bytes:
        body = {
            "instance_id": self.instance_id,
            "endpoint": self.endpoint,
            "partitions": {t: sorted(ps) for t, ps in sorted(self.partitions.items())},
            "standbys": {t: sorted(ps) for t, ps in sorted(self.standbys.items())},
            "published_ms": int(time.time() * 1000),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, offset: int) -> InstanceInfo:
        body = json.loads(data)
        parts = {str(t): [int(p) for p in ps] for t, ps in dict(body["partitions"]).items()}
        # records of versions without standbys or a publication time read as none and 0
        standbys = {
            str(t): [int(p) for p in ps] for t, ps in dict(body.get("standbys") or {}).items()
        }
        published = int(body.get("published_ms") or 0)
        return cls(
            str(body["instance_id"]), str(body["endpoint"]), parts, offset, standbys, published
        )

    def holds(self, topic: str, partition: int) -> bool:
        return partition in self.partitions.get(topic, ())

    def holds_standby(self, topic: str, partition: int) -> bool:
        return partition in self.standbys.get(topic, ())


def group_partitions(pairs: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in pairs:
        out.setdefault(t, []).append(p)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


FOLLOW_FETCH_WAIT_MS = 100
"""The registry follower's fetch wait (ms): how stale its view of other instances may get."""
HEARTBEAT_S = 3.0
"""How often a running instance publishes again what it holds, changed or not."""
LIVE_S = 15.0
"""An instance not heard of for this long (its publication time against this one's clock) is
taken for gone by `live`: a process killed without its tombstone. Five heartbeats, so a slow
loop or a small clock skew between hosts does not count an instance out."""


class InstanceRegistry:
    """Publishes this instance's assignment and follows everyone else's."""

    def __init__(
        self,
        app_id: str,
        bootstrap_servers: str,
        *,
        instance_id: str,
        endpoint: str,
        kafka: Mapping[str, Any] | None = None,
        connect_timeout: int = 10_000,
        client_supplier: ClientSupplier | None = None,
    ) -> None:
        """`client_supplier`: the app's (its clients come from it too); None: Kafka's."""
        self.topic = instances_topic(app_id)
        self._supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
        self.instance_id = instance_id
        self.endpoint = endpoint
        self._bootstrap = bootstrap_servers
        self._kafka = dict(kafka or {})
        self._timeout = connect_timeout
        self._lock = threading.Lock()
        # one publication at a time: a heartbeat re-sending what it read just before a
        # rebalance's publication would otherwise claim the old partitions again, last
        self._publishing = threading.Lock()
        self._known: dict[str, InstanceInfo] = {}
        self._published: tuple[dict[str, list[int]], dict[str, list[int]]] | None = None
        self._published_at = 0.0
        self._stop = threading.Event()
        # set once the follower has read the topic to its end: `instances` then knows every
        # instance that had published before this one started
        self._caught_up = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None

    def start(self) -> None:
        """Create the topic if needed and start following it."""
        config = ClientConfig(self._bootstrap, self._kafka, self._timeout)
        admin = self._supplier.admin(config)
        admin.create_topic(self.topic, 1, {"cleanup.policy": "compact", "retention.ms": "-1"})
        self._producer = self._supplier.producer(config)
        # a short fetch wait: another instance's new assignment is seen within 0.1 s (at the
        # default 500 ms a key query could answer owner_unknown for most of a second after a
        # rebalance); the topic holds a record per instance, so the fetches cost little
        self._consumer = self._supplier.consumer(
            ClientConfig(
                self._bootstrap,
                {**self._kafka, "fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS},
                self._timeout,
            )
        )
        self._consumer.assign([(self.topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(
            target=self._follow, name=f"kstream-instances-{self.instance_id}", daemon=True
        )
        self._thread.start()

    def publish(
        self, partitions: Iterable[tuple[str, int]], standbys: Iterable[tuple[str, int]] = ()
    ) -> bool:
        """Publish the input partitions of the active tasks and of the standby tasks if they
        changed since the last call (True if published)."""
        grouped = (group_partitions(partitions), group_partitions(standbys))
        with self._publishing:
            if grouped == self._published or self._producer is None:
                return False
            self._send(*grouped)
        log.info("instance %s: published partitions %s, standbys %s", self.instance_id, *grouped)
        return True

    def _send(self, partitions: dict[str, list[int]], standbys: dict[str, list[int]]) -> None:
        assert self._producer is not None
        info = InstanceInfo(self.instance_id, self.endpoint, partitions, standbys=standbys)
        with self._lock:
            self._producer.produce(self.topic, info.to_json(), self.instance_id.encode())
            self._producer.flush(10)
            self._published = (partitions, standbys)
            self._published_at = time.monotonic()

    def _heartbeat(self) -> None:
        """Publish again what was last published once `HEARTBEAT_S` has passed (`live`)."""
        with self._publishing:
            last = self._published
            if last is None or time.monotonic() - self._published_at < HEARTBEAT_S:
                return
            try:
                self._send(*last)
            except Exception as e:
                log.warning("instance %s: heartbeat to %s: %s", self.instance_id, self.topic, e)
                self._published_at = time.monotonic()  # not again at once

    def _follow(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            self._heartbeat()
            try:
                msgs = self._consumer.consume_batch(500, 0.05)
            except Exception as e:
                log.warning("reading %s: %s", self.topic, e)
                self._stop.wait(0.5)
                continue
            ended = self._consumer.eof_offset(self.topic, 0) is not None
            for m in msgs:
                if m.key() == CONTROL_KEY:  # the app-wide shutdown request, not an instance
                    continue
                key = (m.key() or b"").decode("utf-8", "replace")
                value = m.value()
                with self._lock:
                    if value is None:
                        self._known.pop(key, None)
                        continue
                    try:
                        self._known[key] = InstanceInfo.from_json(value, m.offset() or 0)
                    except (ValueError, KeyError, TypeError) as e:
                        log.warning("ignoring a malformed record in %s: %s", self.topic, e)
            if ended:  # after this batch's records: what was there before is known now
                self._caught_up.set()

    def instances(self) -> list[InstanceInfo]:
        with self._lock:
            return sorted(self._known.values(), key=lambda i: i.instance_id)

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until the follower has read the topic to its end (True), at most `timeout`
        seconds."""
        return self._caught_up.wait(timeout)

    def live(self, now_ms: int | None = None) -> list[InstanceInfo]:
        """The instances heard of within `LIVE_S` (by their publication time), this one
        always included once it has published."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        horizon = now - int(LIVE_S * 1000)
        return [
            i
            for i in self.instances()
            if i.published_ms >= horizon or i.instance_id == self.instance_id
        ]

    def owner(self, topic: str, partition: int) -> InstanceInfo | None:
        """The instance holding `topic[partition]` (the newest claim wins), if any is known."""
        with self._lock:
            claims = [i for i in self._known.values() if i.holds(topic, partition)]
        return max(claims, key=lambda i: i.offset) if claims else None

    def close(self) -> None:
        """Withdraw this instance (tombstone) and stop following; closing twice is harmless
        (the App and `kstreamd run` may both close the registry they share)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.produce(self.topic, None, self.instance_id.encode())
                producer.flush(5)
            except Exception as e:
                log.warning("withdrawing instance %s: %s", self.instance_id, e)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
