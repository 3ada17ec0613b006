"""The record collector: how a task's sink records reach its producer.

A task's sinks hand their serialized records here (`send_many`, the engine's innermost loop),
and the error policies their dead-letter copies (`send_raw`). Each record keeps its own headers,
as in Kafka Streams' RecordCollector, and is stamped with its provenance id when the
broker-compatibility component asks for it. The collector writes through whatever producer the
task has at the moment (the commit protocol may replace it), and counts what it sent per topic
for the stream thread's metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from kstream.broker_compat import BrokerCompat
from kstream.config import Config
from kstream.errors import ProduceError
from kstream.kafka.chosen_topic import partitions_from_metadata
from kstream.kafka.producer import UNASSIGNED, Producer
from kstream.records import Headers, Record, derive
from kstream.state.provenance import HEADER, encoder
from kstream.topology.task import Task

__all__ = ["CollectingTask", "Collector"]


class CollectingContext(Protocol):
    """What the collector reads of the app's shared context (`tasks.RuntimeContext`)."""

    @property
    def compat(self) -> BrokerCompat: ...

    @property
    def partition_counts(self) -> dict[str, int]: ...

    @property
    def config(self) -> Config: ...


class CollectingTask(Protocol):
    """What the collector needs of its task (`tasks.RuntimeTask`, which owns it): the producer
    the task writes through now (the commit protocol may replace it), the topology's task
    (the record being processed, where a failed send is reported) and the shared context. A
    protocol, so that the collector does not import the module of the task that imports it."""

    @property
    def producer(self) -> Producer: ...

    @property
    def task(self) -> Task: ...

    @property
    def ctx(self) -> CollectingContext: ...


class Collector:
    """Sends a task's sink records through its producer, with the records' own headers (as
    Kafka Streams' record collector), or stamped with their provenance id when the
    broker-compatibility component asks for it.

    This runs once per output record. Stamping, per source partition it keeps the header's
    encoder (`provenance.encoder`: the topic encoded once, one pack per record) and the count
    of outputs per source offset (the id's output index), so a record costs a lookup by
    (topic, partition), a counter and one pack.
    """

    __slots__ = ("_client_produce", "_producer", "counters", "produced", "rt", "stamp")

    def __init__(self, rt: CollectingTask) -> None:
        self.rt = rt
        self.stamp = rt.ctx.compat.provenance
        # the task's producer and its client's produce (None: the producer has none, e.g. a
        # mock); looked up again when the task gets a new producer
        self._producer: Any = None
        self._client_produce: Any = None
        # (source topic, source partition) -> (header encoder, topic bytes, source offset ->
        # outputs so far); cleared with each commit period (apply, rollback)
        self.counters: dict[tuple[str, int], tuple[Any, bytes, dict[int, int]]] = {}
        # records sent per topic since the stream thread last read them (for metrics)
        self.produced: dict[str, int] = {}

    def _source(self, topic: str, partition: int) -> tuple[Any, bytes, dict[int, int]]:
        entry = self.counters[(topic, partition)] = (
            encoder(topic, partition),
            topic.encode("utf-8"),
            {},
        )
        return entry

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """One record caused by the task's current record (its provenance, and the record a
        failure is reported on); see `send_many`."""
        cur = self.rt.task.current
        if cur is None:
            origin = Record(None, None, timestamp, headers)
        else:
            origin = derive(cur, cur.key, cur.value)
            origin.timestamp = timestamp
            origin.headers = headers
        self.send_many(topic, [origin], [key], [value], None if partition is None else [partition])

    def send_many(
        self,
        topic: str,
        records: Sequence[Record],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        partitions: Sequence[int | None] | None,
    ) -> None:
        """A sink's records, serialized (`keys`, `values`, and `partitions` or None for the
        partitioner's choice, one per record): each keeps the record's timestamp and headers
        and, with the compensations on, is stamped with the provenance of its record (topic,
        partition, offset).

        This is the engine's innermost loop, one pass per output record: the producer is
        looked up once per call, the header encoder once per run of records from one source
        partition.
        """
        rt = self.rt
        producer = rt.producer
        if producer is not self._producer:
            self._producer = producer
            self._client_produce = getattr(producer, "client_produce", None)
        fast = self._client_produce
        stamp = self.stamp
        if fast is not None and not stamp and partitions is None:
            self._count(topic, self._send_plain(topic, records, keys, values, fast))
            return
        counters = self.counters
        last_topic: str | None = None
        last_part: int | None = None
        enc: Any = None
        tb = b""
        seen: dict[int, int] = {}
        sent = 0
        i = -1
        for r in records:
            i += 1
            headers = r.headers
            # a record keeps its own headers, less a `kstream.src` stamp: without the
            # compensations, an upstream's stamp names that app's input, and a reader that
            # drops repeated stamps would drop this app's second output of one input record
            hdrs: list[tuple[str, bytes | None]] = (
                [h for h in headers if h[0] != HEADER] if headers else []
            )
            offset = r.offset
            if stamp and offset is not None:
                src_topic = r.topic
                src_part = r.partition
                if src_part != last_part or src_topic != last_topic:
                    if src_topic is None or src_part is None:
                        offset = None
                    else:
                        last_topic, last_part = src_topic, src_part
                        entry = counters.get((src_topic, src_part))
                        if entry is None:
                            entry = self._source(src_topic, src_part)
                        enc, tb, seen = entry
                if offset is not None:
                    idx = seen.get(offset, 0)
                    seen[offset] = idx + 1
                    hdrs.append((HEADER, enc(offset, idx, tb)))
            partition = None if partitions is None else partitions[i]
            if fast is not None:
                # Producer.produce's common case, inlined; anything it raises (a full queue, a
                # client error) goes to the full call, which retries or names the error
                try:
                    # positionally (see kstream.kafka.producer.UNASSIGNED)
                    fast(
                        topic,
                        values[i],
                        keys[i],
                        UNASSIGNED if partition is None else partition,
                        None,
                        None,
                        r.timestamp or 0,
                        hdrs or None,
                    )
                    sent += 1
                    continue
                except Exception:
                    pass
            sent += self._produce(topic, r, keys[i], values[i], partition, hdrs, sent)
        self._count(topic, sent)

    def _send_plain(
        self,
        topic: str,
        records: Sequence[Record],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        fast: Any,
    ) -> int:
        """`send_many`'s loop when nothing is stamped and the partitioner chooses (every
        pipeline on Apache Kafka without a partitioner): the client's produce per record,
        nothing else; the records sent. A record it refuses goes to the full call
        (`_produce`), as in `send_many`."""
        sent = 0
        for r, key, value in zip(records, keys, values, strict=True):
            headers = r.headers
            hdrs = [h for h in headers if h[0] != HEADER] if headers else None
            try:
                # positionally (see kstream.kafka.producer.UNASSIGNED)
                fast(topic, value, key, UNASSIGNED, None, None, r.timestamp or 0, hdrs or None)
                sent += 1
                continue
            except Exception:
                pass
            sent += self._produce(topic, r, key, value, None, hdrs or [], sent)
        return sent

    def _produce(
        self,
        topic: str,
        r: Record,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        hdrs: list[tuple[str, bytes | None]],
        sent: int,
    ) -> int:
        """The full produce call (retries a full queue, names errors): 1 if the record was
        sent, 0 if the processing-error policy dropped it. `sent`: the slice's records sent
        so far, counted before an error is raised."""
        rt = self.rt
        producer = rt.producer
        try:
            producer.produce(topic, value, key, partition, r.timestamp, hdrs)
            return 1
        except ProduceError as e:
            # A record the broker will never take (too large, ...) is the input record's
            # problem: the processing-error policy decides (fail, skip or dead-letter).
            if e.retriable or producer.is_fatal():
                self._count(topic, sent)
                raise
            # the failed record is the current one: a dead-letter copy takes its provenance
            rt.task.current = r
            rt.task.report(e, r, f"producing to topic {topic!r}")
            return 0

    def _count(self, topic: str, sent: int) -> None:
        if sent:
            produced = self.produced
            produced[topic] = produced.get(topic, 0) + sent

    def send_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        self.send(topic, key, value, timestamp, headers, None)

    def partitions_for(self, topic: str) -> int:
        """The partition count of `topic`: counted at start-up for the topology's topics; a
        topic only a topic chooser names (`KStream.to(chooser)`) is looked up once through
        the producer's metadata and remembered, for every task of the app.

        Raises TopicError naming the topic if the cluster does not have it (the app creates
        no such topic: on a broker with auto-creation on, the producer's lookup creates it,
        as a Kafka Streams producer's metadata request does)."""
        counts = self.rt.ctx.partition_counts
        n = counts.get(topic)
        if n is None:
            n = counts[topic] = self._look_up(topic)
        return n

    def _look_up(self, topic: str) -> int:
        return partitions_from_metadata(
            self.rt.producer, topic, self.rt.ctx.config.connect_timeout / 1000
        )
