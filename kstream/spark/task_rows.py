"""Where a task's sinks write on Spark: rows for the sink's write slots (`TaskRows`).

A task's outputs leave it as columns of `wire.ROW_SCHEMA`, each row with the input record that
caused it (its provenance) and the partition it goes to, so the sink's slots take them as they
are (`kstream.spark.sink`). A topic only a topic chooser names is looked up once per Python
worker (`chosen_topic_partitions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kstream.kafka.chosen_topic import partitions_from_metadata
from kstream.kafka.partitioner import default_partition
from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier
from kstream.records import Headers, Record
from kstream.spark.plan import TaskPlan
from kstream.spark.policy import Origin
from kstream.spark.wire import ROW_ARROW_SCHEMA, encode_headers
from kstream.state.provenance import HEADER

__all__ = ["TaskRows", "chosen_topic_partitions"]


class TaskRows:
    """Where the task's sinks write: rows of `wire.ROW_SCHEMA`, provenance kept.

    The rows are ready for the sink's slots as they are (packed per slot, `TransactionalSink`
    needs no window to rank them): `ptopic`, `ppart`, `poff` and `seq` make the row's
    provenance id, and `part` is the partition the row goes to wherever it is known (its own,
    else its key's).

    A row's id is its input record's (topic, partition, offset) and its rank among the rows of
    that record, but ids must grow, per source partition, in the order the task writes them:
    a reader of what this task wrote (the next sub-topology's task, `HighMarks`) drops an id at
    or below the highest it has seen from that partition as a repeat. Some rows carry the
    context of an older record than others written before them: an update a record cache or
    a suppress buffer held back, a window closing, a join result found late, or a batch taken
    through one child of a node before the next. Such a row takes the next id after the highest
    this task has written for its source partition (`high`, kept in the task's metadata across
    batches), so ids grow in write order and a replay gives the same ones.
    """

    def __init__(
        self,
        partitions: Mapping[str, int],
        partition: int = 0,
        look_up: Callable[[str], int] | None = None,
        high: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    ) -> None:
        # the topics counted at start-up, and those a topic chooser named since (`look_up`)
        self.partitions = dict(partitions)
        self.look_up = look_up
        self.cols: dict[str, list[Any]] = {n: [] for n in ROW_ARROW_SCHEMA.names}
        self.task: Any = None
        # outputs of no input record (a punctuation before any record): the task's own id
        self.fallback: tuple[str, int, int] = ("", partition, 0)
        # the highest (offset, rank) of the ids written per source (topic, partition)
        self.high: dict[tuple[str, int], tuple[int, int]] = dict(high or {})

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """One record, its provenance the task's current record's."""
        src = self.task.source() if self.task is not None else None
        t, part, off = src if src is not None else (None, None, None)
        origin = Record(key, value, timestamp, headers, t, part, off)
        self.send_many(topic, [origin], [key], [value], [partition])

    def dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        origin: Origin,
    ) -> None:
        """A dead-letter copy of the failed record `origin`: its provenance is that record's."""
        t, part, off = origin
        self.send_many(
            topic, [Record(key, value, timestamp, headers, t, part, off)], [key], [value], None
        )

    def send_many(
        self,
        topic: str,
        records: Sequence[Record],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        partitions: Sequence[int | None] | None,
    ) -> None:
        """A sink's serialized records as rows, in one pass (the Spark engine's innermost
        loop: one row per output record). Each row's provenance is its record's origin (topic,
        partition, offset; the task's own id when it has none), `partitions` each row's
        partition or None for its key's."""
        high, fallback = self.high, self.fallback
        n = self.partitions.get(topic)
        c = self.cols
        add_topic, add_k, add_v = c["topic"].append, c["k"].append, c["v"].append
        add_ts, add_part, add_ptopic = c["ts"].append, c["part"].append, c["ptopic"].append
        add_ppart, add_poff, add_seq = c["ppart"].append, c["poff"].append, c["seq"].append
        add_h = c["h"].append
        for i, r in enumerate(records):
            src_topic, src_part, offset = r.topic, r.partition, r.offset
            if src_topic is None or src_part is None or offset is None:
                src_topic, src_part, offset = fallback
            last = high.get((src_topic, src_part))
            if last is None or offset > last[0]:
                rank = 0
            else:  # at or below an id already written for this partition: the next one after it
                offset, rank = last[0], last[1] + 1
            high[(src_topic, src_part)] = (offset, rank)
            key = keys[i]
            partition = None if partitions is None else partitions[i]
            if partition is None and n:
                # no key (a left foreign-key join's row without a foreign key, a stream's
                # keyless record): Kafka's producer picks any partition, so the task picks its
                # own (modulo the count). Left to the producer, the row could land in a
                # partition another write slot writes in the same batch, in another
                # transaction: the ids in that partition would no longer grow in write order
                # and a reader (`HighMarks`) would drop the later ones as repeats. A topic
                # counted nowhere (a missing sink topic) is left to the producer's
                # partitioner, as on the native runtime.
                partition = fallback[1] % n if key is None else default_partition(key, n)
            add_topic(topic)
            add_k(key)
            add_v(values[i])
            add_ts(r.timestamp)
            add_part(partition)
            add_ptopic(src_topic)
            add_ppart(src_part)
            add_poff(offset)
            add_seq(rank)
            add_h(_outgoing_headers(r.headers))

    def partitions_for(self, topic: str) -> int:
        """The partition count of `topic`: counted at start-up for the topology's topics; a
        topic only a topic chooser names is looked up (`chosen_topic_partitions`) and counted
        from then on, as the native runtime's collector does (so its records are placed by
        their keys here, and each partition is written by one slot)."""
        n = self.partitions.get(topic)
        if n is None:
            n = self.partitions[topic] = self.look_up(topic) if self.look_up is not None else 1
        return n

    def take(self) -> dict[str, list[Any]]:
        out, self.cols = self.cols, {n: [] for n in ROW_ARROW_SCHEMA.names}
        return out


_CHOSEN: dict[tuple[str, str], int] = {}


def chosen_topic_partitions(plan: TaskPlan, topic: str) -> int:
    """The partition count of a topic a topic chooser named (`KStream.to(chooser)`) that the
    plan did not count at start-up: looked up once per Python worker through a producer's
    metadata, as the native runtime's collector looks it up (on a broker that creates topics
    on demand, that request creates it, as a Kafka Streams producer's does). Raises
    TopicError naming the topic if the cluster does not have it."""
    key = (plan.bootstrap_servers, topic)
    n = _CHOSEN.get(key)
    if n is None:
        n = _CHOSEN[key] = _look_up_topic(plan, topic)
    return n


def _look_up_topic(plan: TaskPlan, topic: str) -> int:
    supplier = plan.client_supplier or KafkaClientSupplier()
    producer = supplier.producer(ClientConfig(plan.bootstrap_servers, plan.kafka))
    try:
        return partitions_from_metadata(producer, topic, 30.0)
    finally:
        producer.close()


def _outgoing_headers(headers: Headers) -> bytes | None:
    """The headers a sink record keeps (encoded): the sink adds its own provenance id."""
    if not headers:
        return None
    return encode_headers([h for h in headers if h[0] != HEADER])
