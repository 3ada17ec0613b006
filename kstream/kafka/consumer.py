"""Consumer for the micro-batch engine: batches of raw messages, end-of-partition tracking.

`consume_batch` hands back confluent-kafka `Message` objects as they come, dropping only the
partition-EOF events it turns into state, so the engine pays for no wrapping it does not use.

"Where is the end of this partition" comes from fetch responses (the cached high watermark and
EOF events), never from a ListOffsets request: some brokers answer ListOffsets LATEST wrongly,
and the fetch high watermark is what the consumer will actually reach.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer as _RawConsumer
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kstream.duration import DurationLike
from kstream.errors import ConfigError, KafkaClientError
from kstream.kafka.client import ErrorLog, build_config, check_connected, connect_timeout_s
from kstream.kafka.errors import COORDINATOR_RETRY_S, coordinator_not_ready, map_error
from kstream.kafka.roles import client_config

__all__ = [
    "CONSUMER_DEFAULTS",
    "TO_END_POLL_S",
    "Consumer",
    "RebalanceCallback",
    "TopicPartition",
    "split_events",
    "to_end_settings",
]

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "partition.assignment.strategy": "range",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    # librdkafka stops fetching a partition whose local queue holds queued.min.messages
    # (100,000) and looks again only after fetch.queue.backoff.ms, 1,000 ms by default: a
    # consumer that drains its queue faster than that idles, fetching a burst a second. A
    # sustained 1M-record P1 run went at 110-130k records/s on 0.37-0.44 of a core with the
    # default, 158-226k/s with 10 ms (docs/performance.md); Java's consumer has no such wait
    "fetch.queue.backoff.ms": 10,
}

_CLASSIC_ONLY = ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms")
"""Defaults of the classic group protocol only."""

#: How long a fetch of a consumer that reads to the end may wait for data, in ms.
TO_END_FETCH_WAIT_MS = 10
#: How long such a consumer's consume calls wait: a call returns when it has its batch or at its
#: timeout, and the end (an end-of-partition event, no records) shows only at the timeout.
TO_END_POLL_S = 0.02


def to_end_settings(kafka: Mapping[str, Any] | None) -> dict[str, Any]:
    """librdkafka settings for a consumer that reads partitions up to their end (a store's
    restore, Spark's offset ranges), over the user's `kafka`.

    The end is known from the end-of-partition event, which comes with a fetch's answer; a
    fetch that finds nothing new is answered only when `fetch.wait.max.ms` has passed (500 ms
    by default). So every read to the end would take that long for its last, empty fetch: a
    task whose three stores had empty changelogs took 1.7 s to start. A fetch that finds data
    is answered at once whatever the wait, so the short wait costs a catching-up read nothing.
    """
    return {
        **(kafka or {}),
        "enable.partition.eof": True,
        "fetch.wait.max.ms": TO_END_FETCH_WAIT_MS,
    }


RebalanceCallback = Callable[[list[TopicPartition]], None]
TP = tuple[str, int]


class Consumer:
    """A Kafka consumer in group mode (`subscribe`) or assigned mode (`assign`).

    Without `group_id` the consumer is meant for `assign` only (restore, global tables,
    tests); it gets a throw-away group id because librdkafka insists on one, and must not
    commit. `kafka` holds librdkafka settings applied over `CONSUMER_DEFAULTS`.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        group_id: str | None = None,
        kafka: Mapping[str, Any] | None = None,
        connect_timeout: DurationLike | None = None,
        client_id: str | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self._errors = ErrorLog()
        self._timeout = connect_timeout_s(connect_timeout)
        forced: dict[str, Any] = {}
        if group_id is not None:
            if not isinstance(group_id, str) or not group_id:
                raise ConfigError(f"group_id must be a non-empty string, got {group_id!r}")
            forced["group.id"] = group_id
        elif not (kafka or {}).get("group.id"):
            forced["group.id"] = f"kstream-unmanaged-{uuid.uuid4().hex}"
        if client_id:
            forced["client.id"] = client_id
        defaults = CONSUMER_DEFAULTS
        if str((kafka or {}).get("group.protocol", "")).lower() == "consumer":
            # the consumer group protocol (KIP-848) takes these from the broker, and
            # librdkafka refuses them with it
            defaults = {k: v for k, v in defaults.items() if k not in _CLASSIC_ONLY}
        conf = build_config(
            bootstrap_servers,
            client_config("consumer", kafka),
            defaults=defaults,
            forced=forced,
            errors=self._errors,
            where="Consumer",
        )
        try:
            self._c = _RawConsumer(conf)
        except KafkaException as e:
            raise ConfigError(f"Consumer: invalid kafka settings: {e}") from None
        self._closed = False
        try:
            check_connected(self._c, bootstrap_servers, self._timeout, self._errors, "Consumer")
        except BaseException:
            self._c.close()
            self._closed = True
            raise
        self._eof: dict[TP, int] = {}
        # an error event that came with records: raised by the next `consume_batch`
        self._deferred: KafkaClientError | None = None

    @property
    def raw(self) -> _RawConsumer:
        """The underlying confluent-kafka Consumer."""
        return self._c

    # -- assignment ------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the group for `topics`. Callbacks run inside `consume_batch`.

        If `on_assign` does not call `assign`, the assignment is applied after it returns.
        Partitions revoked or lost are forgotten by the end-of-partition tracking.
        """
        if self.group_id is None:
            raise ConfigError("Consumer.subscribe needs a group_id; use assign() without one")

        def assigned(_c: Any, parts: list[TopicPartition]) -> None:
            if on_assign is not None:
                on_assign(parts)

        def revoked(_c: Any, parts: list[TopicPartition]) -> None:
            self._forget(parts)
            if on_revoke is not None:
                on_revoke(parts)

        def lost(_c: Any, parts: list[TopicPartition]) -> None:
            self._forget(parts)
            cb = on_lost or on_revoke
            if cb is not None:
                cb(parts)

        try:
            self._c.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=lost)
        except KafkaException as e:
            raise map_error(e, f"subscribing to {list(topics)!r}") from None

    def unsubscribe(self) -> None:
        """Leave the group's subscription (partitions are revoked on the next poll)."""
        try:
            self._c.unsubscribe()
        except KafkaException as e:
            raise map_error(e, "unsubscribing") from None

    def assign(self, partitions: Iterable[TopicPartition | TP | tuple[str, int, int]]) -> None:
        """Read exactly these partitions (optionally from given offsets): no group protocol."""
        tps = [_tp(p) for p in partitions]
        self._forget(tps)
        try:
            self._c.assign(tps)
        except KafkaException as e:
            raise map_error(e, f"assigning {_names(tps)}") from None

    def unassign(self) -> None:
        self._eof.clear()
        self._c.unassign()

    def assignment(self) -> list[TopicPartition]:
        return list(self._c.assignment())

    def _forget(self, parts: Iterable[TopicPartition]) -> None:
        for p in parts:
            self._eof.pop((p.topic, p.partition), None)

    # -- consuming -------------------------------------------------------------------------

    def consume_batch(self, max_records: int, timeout_s: float) -> list[Message]:
        """Up to `max_records` messages, gathered for at most `timeout_s`.

        librdkafka returns when `max_records` have arrived or the timeout has passed, so under a
        light flow a batch always takes the whole wait (that is the micro-batch). Returning as
        soon as anything is queued, as Kafka's `poll` does, was tried: it took ~2 ms off the
        median latency at 5,000 records/s and 10-20% off stateful throughput (more, smaller
        batches), so the engine keeps full batches and `batch_max_wait` is the latency knob.

        Partition-EOF events are recorded (see `eof_offset`) and left out. Any other error
        event is raised as a kstream exception, but never at the cost of the batch's records:
        librdkafka has moved its positions past every record it returned, so records dropped
        with the error would never be read again (lost outputs, or a task waiting for good on
        offsets already behind the consumer). A batch holding records and an error returns
        the records; the error is raised by the next call, before it consumes anything.
        """
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        try:
            msgs = self._c.consume(max_records, timeout_s)
        except KafkaException as e:
            raise map_error(e, "consuming") from None
        for m in msgs:
            if m.error() is not None:
                return self._without_events(msgs)
        return msgs

    def _without_events(self, msgs: list[Message]) -> list[Message]:
        out, error = split_events(msgs, self._eof)
        if error is not None:
            if not out:
                raise error
            self._deferred = error
        return out

    def eof_offset(self, topic: str, partition: int) -> int | None:
        """The end offset reported by the last EOF event of this partition, if any."""
        return self._eof.get((topic, partition))

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's end as of the last fetch response (None before any fetch)."""
        try:
            wm = self._c.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        except KafkaException:
            wm = None
        high = wm[1] if wm else -1
        eof = self._eof.get((topic, partition))
        if high is None or high < 0:
            return eof
        if eof is not None and eof > high:
            return eof
        return int(high)

    def get_watermark_offsets(
        self, tp: TopicPartition, cached: bool = True, timeout: float | None = None
    ) -> tuple[int, int] | None:
        """confluent-kafka's call; `cached=True` (the default here) reads the fetch state."""
        try:
            if cached:
                return self._c.get_watermark_offsets(tp, cached=True)
            return self._c.get_watermark_offsets(
                tp, timeout=self._timeout if timeout is None else timeout
            )
        except KafkaException as e:
            raise map_error(e, f"reading watermarks of {_names([tp])}") from None

    # -- positions -------------------------------------------------------------------------

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Continue reading the (assigned) partition from `offset`."""
        self._eof.pop((topic, partition), None)
        try:
            self._c.seek(TopicPartition(topic, partition, offset))
        except KafkaException as e:
            raise map_error(
                e, f"seeking topic={topic!r} partition={partition} to {offset}"
            ) from None

    def position(self, partitions: Iterable[TopicPartition | TP]) -> list[TopicPartition]:
        return list(self._c.position([_tp(p) for p in partitions]))

    def committed(
        self, partitions: Iterable[TopicPartition | TP], timeout: float | None = None
    ) -> list[TopicPartition]:
        """Committed offsets (`OFFSET_INVALID` where none) of the group.

        While the group's coordinator is not ready (`COORDINATOR_NOT_READY`: a broker that has
        just created `__consumer_offsets` or is loading it answers NOT_COORDINATOR, then
        COORDINATOR_LOAD_IN_PROGRESS) the offsets are asked for again until the timeout, as
        Kafka's consumer does; librdkafka hands those answers back."""
        tps = [_tp(p) for p in partitions]
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        while True:
            try:
                left = max(deadline - time.monotonic(), COORDINATOR_RETRY_S)
                return list(self._c.committed(tps, timeout=left))
            except KafkaException as e:
                if coordinator_not_ready(e) and time.monotonic() < deadline:
                    time.sleep(COORDINATOR_RETRY_S)
                    continue
                raise map_error(e, f"reading committed offsets of {_names(tps)}") from None

    def commit(
        self,
        offsets: Iterable[TopicPartition | tuple[str, int, int]] | None = None,
    ) -> None:
        """Commit `offsets` (next offsets to read) synchronously; None: the current positions."""
        if self.group_id is None:
            raise ConfigError("Consumer.commit needs a group_id")
        try:
            if offsets is None:
                current = self._c.position(self._c.assignment())
                tps = [tp for tp in current if tp.offset is not None and tp.offset >= 0]
            else:
                tps = [_tp(o) for o in offsets]
            if not tps:
                return
            result = self._c.commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            raise map_error(e, f"committing offsets of group {self.group_id!r}") from None
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            tp = failed[0]
            raise KafkaClientError(
                f"committing offsets of group {self.group_id!r}: topic={tp.topic!r} "
                f"partition={tp.partition}: {tp.error}"
            )

    def pause(self, partitions: Iterable[TopicPartition | TP]) -> None:
        self._c.pause([_tp(p) for p in partitions])

    def resume(self, partitions: Iterable[TopicPartition | TP]) -> None:
        self._c.resume([_tp(p) for p in partitions])

    def consumer_group_metadata(self) -> Any:
        """Group metadata for `Producer.send_offsets`."""
        return self._c.consumer_group_metadata()

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        """Partition ids of `topic` (empty if it does not exist)."""
        try:
            md = self._c.list_topics(topic, timeout=self._timeout if timeout is None else timeout)
        except KafkaException as e:
            raise map_error(e, f"reading metadata of topic {topic!r}") from None
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return []
        return sorted(t.partitions)

    def answers(self, timeout: float) -> bool:
        """Whether a broker answers a metadata request within `timeout` seconds: the stream
        thread's probe of a broker outage (kstream.runtime.outage). librdkafka sends the
        request to a broker it is connected to, so no broker up means no answer."""
        if self._closed:
            return False
        try:
            md = self._c.list_topics(timeout=timeout)
        except KafkaException:
            return False
        return bool(md.brokers)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Leave the group (if any) and release the client; idempotent."""
        if not self._closed:
            self._closed = True
            self._c.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def split_events(
    msgs: Sequence[Any], eof: dict[TP, int]
) -> tuple[list[Any], KafkaClientError | None]:
    """A consumed batch's records, and its first error event as a kstream exception (None if
    it has none); its partition-EOF events are recorded in `eof` (partition -> end offset).
    `Consumer.consume_batch` hands the records over and raises the error at its next call
    (the simulator's consumer does the same with the same function)."""
    out: list[Any] = []
    error: KafkaClientError | None = None
    for m in msgs:
        err = m.error()
        if err is None:
            out.append(m)
        elif err.code() == KafkaError._PARTITION_EOF:
            eof[(m.topic() or "", m.partition() or 0)] = m.offset() or 0
        elif error is None:
            where = f"topic={m.topic()!r} partition={m.partition()}"
            error = map_error(err, f"consuming from {where}")
    return out, error


def _tp(p: TopicPartition | TP | tuple[str, int, int]) -> TopicPartition:
    if isinstance(p, TopicPartition):
        return p
    if len(p) == 2:
        return TopicPartition(p[0], p[1])
    if len(p) == 3:
        return TopicPartition(p[0], p[1], p[2])
    raise ConfigError(f"expected TopicPartition or (topic, partition[, offset]), got {p!r}")


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t.topic}[{t.partition}]" for t in tps)
