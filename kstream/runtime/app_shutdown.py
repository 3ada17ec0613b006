"""SHUTDOWN_APPLICATION: one instance's uncaught exception handler stops every instance.

Kafka Streams carries the request in the group's assignment (an error code the group leader
puts in every member's assignment). confluent-kafka offers no custom assignor, so kstream sends
a well-known control record instead: key `CONTROL_KEY` on the app's `<app_id>-instances` topic
(the compacted one-partition topic of the instance registry, which kstream already owns and
`kstreamd reset` deletes), followed at once by its tombstone so compaction drops it. Every
instance follows that topic from its end as of its start, so a request made before an instance
started does not stop it (as a member joining after the shutdown runs in Kafka); on a request
it stops cleanly (the batch finishes and commits) and ends in state ERROR. The registry treats
the control record as one it cannot read and skips it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_END

from kstream.config import Config
from kstream.kafka.admin import TopicSpec
from kstream.kafka.supplier import ClientConfig, ClientSupplier

log = logging.getLogger("kstream.runtime")

CONTROL_KEY = b"\x00shutdown-application"
#: how long a follower's fetch waits: the other instances stop within about this much
FOLLOW_WAIT_S = 0.2


def control_topic(app_id: str) -> str:
    """The instance registry's topic (kstream.runtime.instances.instances_topic)."""
    return f"{app_id}-instances"


def control_topic_spec(app_id: str, config: Config) -> TopicSpec:
    """The topic as the instance registry creates it: compacted, one partition."""
    return TopicSpec(
        control_topic(app_id),
        1,
        {"cleanup.policy": "compact", "retention.ms": "-1"},
        config.replication_factor,
    )


class ApplicationShutdown:
    """Sends and follows shutdown requests for one instance of an app."""

    def __init__(
        self,
        app_id: str,
        bootstrap_servers: str,
        config: Config,
        supplier: ClientSupplier,
        on_request: Callable[[str], None],
    ) -> None:
        """`on_request(reason)`: called (once, from the follower's thread) when any instance,
        this one included, asks the app to shut down."""
        self.topic = control_topic(app_id)
        self._client = ClientConfig(
            bootstrap_servers,
            {**config.kafka, "fetch.wait.max.ms": int(FOLLOW_WAIT_S * 1000)},
            config.connect_timeout,
        )
        self._timeout_s = config.connect_timeout / 1000
        self._supplier = supplier
        self._on_request = on_request
        self._stop = threading.Event()
        self._consumer: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Follow the topic from its current end (it must exist: `control_topic_spec`)."""
        self._consumer = self._supplier.consumer(self._client)
        self._consumer.assign([(self.topic, 0, OFFSET_END)])
        self._thread = threading.Thread(
            target=self._follow, name=f"kstream-shutdown-{self.topic}", daemon=True
        )
        self._thread.start()

    def request(self, reason: str) -> None:
        """Ask every instance to shut down: the control record, then its tombstone."""
        producer = self._supplier.producer(self._client)
        try:
            body = json.dumps({"request": "shutdown_application", "reason": reason}).encode()
            producer.produce(self.topic, body, CONTROL_KEY)
            producer.produce(self.topic, None, CONTROL_KEY)
            producer.flush(self._timeout_s)
        finally:
            producer.close()
        log.error("asked every instance of the app to shut down: %s", reason)

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                msgs = self._consumer.consume_batch(100, FOLLOW_WAIT_S)
            except Exception as e:
                log.warning("following %s for shutdown requests: %s", self.topic, e)
                self._stop.wait(0.5)
                continue
            for m in msgs:
                if m.key() == CONTROL_KEY and m.value() is not None:
                    reason = _reason(m.value())
                    log.error("an instance asked the app to shut down: %s", reason)
                    self._stop.set()
                    self._on_request(reason)
                    return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception as e:
                log.warning("closing the shutdown follower: %s", e)


def _reason(value: bytes) -> str:
    try:
        return str(json.loads(value).get("reason", ""))
    except (ValueError, AttributeError):
        return value.decode("utf-8", "replace")
