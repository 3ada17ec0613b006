"""The nodes a `Task` runs: sources (deserialize), processors (user and built-in code, each with
its `NodeContext`) and sinks (serialize, hand to the task's `RecordCollector`).

Every node takes a list of records and hands lists to its children; `kstream.topology.task`
describes how records move and how errors are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kstream.duration import DurationLike, duration
from kstream.errors import (
    ConfigError,
    DeserializationError,
    TopologyError,
)
from kstream.records import Headers, Record
from kstream.serde import BadRecord, Serde, deserialize_records, serialize_records
from kstream.topology.processor import (
    Processor,
    PunctuationType,
    PunctuationTypeLike,
    overrides_batch,
)
from kstream.topology.schedule import Schedule
from kstream.topology.topology import TimestampExtractor

if TYPE_CHECKING:
    from kstream.topology.task import Task


class Node:
    """A runtime node: takes a list of records, hands lists to its children."""

    __slots__ = ("children", "name", "task")

    def __init__(self, name: str, task: Task) -> None:
        self.name = name
        self.task = task
        self.children: list[Node] = []

    def process_batch(self, records: list[Record]) -> None:
        raise NotImplementedError

    def emit(self, records: list[Record], children: Sequence[Node] | None = None) -> None:
        if not records:
            return
        kids = self.children if children is None else children
        if self.task.depth_first:
            for r in records:
                one = [r]
                for c in kids:
                    c.process_batch(one)
        else:
            for c in kids:
                c.process_batch(records)


class SourceNode(Node):
    """Deserializes its records and hands them on.

    With a timestamp extractor the source also does what Kafka's `RecordQueue` does when a
    record becomes the head of its partition's queue: the task calls `stamp` on every input
    record before it orders the partitions or counts stream time, and `stamp` deserializes the
    records, gives each its extracted timestamp and drops the ones extracted negative. Such a
    source's `process_batch` then gets records already deserialized. Without an extractor,
    deserialization waits for `process_batch` (the records keep their Kafka timestamps).
    """

    __slots__ = ("committed_times", "extractor", "key_serde", "partition_times", "value_serde")

    def __init__(
        self,
        name: str,
        task: Task,
        key_serde: Serde,
        value_serde: Serde,
        extractor: TimestampExtractor | None = None,
    ) -> None:
        super().__init__(name, task)
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.extractor = extractor
        # Kafka's partition time per input partition: the largest timestamp extracted there
        # (-1 before the first); `committed_times` as of the last commit, for a rollback
        self.partition_times: dict[tuple[str | None, int | None], int] = {}
        self.committed_times: dict[tuple[str | None, int | None], int] = {}

    def _deserialized(self, records: list[Record]) -> list[Record]:
        """`records` deserialized in place, less those the serdes refused (given to the error
        policy with their bytes as they came)."""
        bad = deserialize_records(records, self.key_serde, self.value_serde)
        if not bad:
            return records
        for b in bad:
            self.task.fail_record(
                DeserializationError,
                f"source {self.name!r}: cannot deserialize the record's {b.part}: {b.error}",
                records[b.index],
                b.error,
            )
        skip = {b.index for b in bad}
        return [r for i, r in enumerate(records) if i not in skip]

    def stamp(self, records: list[Record]) -> list[Record]:
        """The records to process, each with the timestamp it counts with (Kafka's
        `RecordQueue.updateHead`). Without an extractor: `records` as they are.

        With one: deserialized, and `extractor(record, partition_time)` gives each its
        timestamp (in place: the source owns its input records). A negative result drops the
        record (Kafka's `negative_timestamp` drop, as its default `LogAndSkipOnInvalidTimestamp`
        handling does), an extractor that raises or returns no int is a processing error for
        the task's error policy. Partition time moves with the records kept only.
        """
        extract = self.extractor
        if extract is None:
            return records
        task, times = self.task, self.partition_times
        out: list[Record] = []
        for r in self._deserialized(records):
            where = (r.topic, r.partition)
            before = times.get(where, -1)
            try:
                ts = extract(r, before)
                if not isinstance(ts, int):
                    raise TypeError(f"it returned {ts!r}, not an int (ms)")
            except Exception as e:
                task.report(e, r, f"the timestamp extractor of source {self.name!r}")
                continue
            if ts < 0:
                task.record_dropped("negative_timestamp", r, self.name)
                continue
            if ts > before:
                times[where] = ts
            r.timestamp = ts
            out.append(r)
        return out

    def process_batch(self, records: list[Record]) -> None:
        self.emit(records if self.extractor is not None else self._deserialized(records))


class ProcessorNode(Node):
    __slots__ = ("batch", "ctx", "processor")

    def __init__(self, name: str, task: Task, processor: Processor, stores: list[str]) -> None:
        super().__init__(name, task)
        self.processor = processor
        self.ctx = NodeContext(self, stores)
        self.batch = overrides_batch(processor)

    def process_batch(self, records: list[Record]) -> None:
        ctx = self.ctx
        if self.batch:
            self.processor.process_batch(records)
        else:
            task = self.task
            process = self.processor.process
            for r in records:
                task.current = r
                try:
                    process(r)
                except Exception as e:
                    ctx.on_error(e, r)
        if ctx.pending or ctx.pending_to:
            ctx.flush()


class SinkNode(Node):
    __slots__ = ("key_serde", "partitioner", "topic", "value_serde")

    def __init__(
        self,
        name: str,
        task: Task,
        topic: str,
        key_serde: Serde,
        value_serde: Serde,
        partitioner: Callable[[Any, Any, int], int] | None,
    ) -> None:
        super().__init__(name, task)
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.partitioner = partitioner

    def process_batch(self, records: list[Record]) -> None:
        topic = self.topic
        task = self.task
        collector = task.collector
        send_many = getattr(collector, "send_many", None)
        ks, vs = self.key_serde, self.value_serde
        part = self.partitioner
        n = collector.partitions_for(topic) if part is not None else 0
        # Serialized a slice at a time, each slice handed to the collector in one call: one
        # call per record fewer, while the slice's bytes are still in the CPU's caches.
        for lo in range(0, len(records), SINK_SLICE):
            chunk = records[lo : lo + SINK_SLICE]
            keys, values, bad = serialize_records(chunk, topic, ks, vs)
            sent = chunk
            parts: list[int | None] | None = None
            if bad or part is not None:
                sent, keys, values, parts = self._partitioned(chunk, keys, values, bad, n)
            if not sent:
                continue
            if send_many is not None:
                send_many(topic, sent, keys, values, parts)
            else:
                send_each(task, topic, sent, keys, values, parts)

    def _partitioned(
        self,
        chunk: list[Record],
        keys: list[bytes | None],
        values: list[bytes | None],
        bad: list[BadRecord],
        n: int,
    ) -> tuple[list[Record], list[bytes | None], list[bytes | None], list[int | None] | None]:
        """The records of `chunk` to send, their keys, values and (with a partitioner) their
        partitions; the ones whose serdes or partitioner failed go to the task's error
        handling, in record order."""
        task, part = self.task, self.partitioner
        refused = {b.index: b.error for b in bad}
        sent: list[Record] = []
        ks: list[bytes | None] = []
        vs: list[bytes | None] = []
        parts: list[int | None] | None = [] if part is not None else None
        for i, r in enumerate(chunk):
            err = refused.get(i)
            if err is None and parts is not None:
                try:
                    parts.append(part(r.key, r.value, n))  # type: ignore[misc]
                except Exception as e:
                    err = e
            if err is not None:
                task.current = r  # a dead-letter copy takes the failed record's provenance
                task.report(err, r, f"sink {self.name!r} (topic {self.topic!r})")
                continue
            sent.append(r)
            ks.append(keys[i])
            vs.append(values[i])
        return sent, ks, vs, parts


SINK_SLICE = 1024
"""Records a sink serializes before handing them to the collector."""


def send_each(
    task: Task,
    topic: str,
    records: Sequence[Record],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    partitions: Sequence[int | None] | None,
) -> None:
    """A sink's serialized records through a collector that takes one record a call (the test
    driver's, Spark's): each record is the task's current one while it is sent, so the
    collector can ask `task.source()` for its provenance."""
    send = task.collector.send
    for i, r in enumerate(records):
        task.current = r
        send(
            topic,
            keys[i],
            values[i],
            r.timestamp,
            r.headers,
            None if partitions is None else partitions[i],
        )


class NodeContext:
    """The `ProcessorContext` of one processor node in one task."""

    __slots__ = ("_stores", "node", "pending", "pending_to", "task")

    def __init__(self, node: ProcessorNode, stores: list[str]) -> None:
        self.node = node
        self.task = node.task
        self._stores = stores
        self.pending: list[Record] = []
        self.pending_to: dict[str, list[Record]] = {}

    # record metadata: the input record being processed (Kafka's record context)
    @property
    def app_id(self) -> str:
        return self.task.app_id

    @property
    def task_id(self) -> str:
        return self.task.id

    @property
    def topic(self) -> str | None:
        cur = self.task.current
        return cur.topic if cur is not None else None

    @property
    def partition(self) -> int | None:
        cur = self.task.current
        return cur.partition if cur is not None else None

    @property
    def offset(self) -> int | None:
        cur = self.task.current
        return cur.offset if cur is not None else None

    @property
    def timestamp(self) -> int:
        cur = self.task.current
        return cur.timestamp if cur is not None else self.task.punctuation_time

    @property
    def headers(self) -> Headers:
        cur = self.task.current
        return cur.headers if cur is not None else ()

    @property
    def stream_time(self) -> int:
        return self.task.stream_time

    @property
    def record(self) -> Record | None:
        return self.task.current

    def _children(self, to: str | None) -> list[Node]:
        if to is None:
            return self.node.children
        for c in self.node.children:
            if c.name == to:
                return [c]
        names = [c.name for c in self.node.children]
        raise TopologyError(
            f"processor {self.node.name!r}: cannot forward to {to!r}, its children are {names}"
        )

    def forward(self, record: Record, to: str | None = None) -> None:
        cur = self.task.current
        if record.topic is None and cur is not None:
            # Keep the provenance of the input record on what it caused.
            record = Record(
                record.key,
                record.value,
                record.timestamp,
                record.headers,
                cur.topic,
                cur.partition,
                cur.offset,
                record.timestamp_type,
            )
        if self.task.depth_first:
            one = [record]
            for c in self._children(to):
                c.process_batch(one)
            self.task.current = cur
        elif to is None:
            self.pending.append(record)
        else:
            self._children(to)
            self.pending_to.setdefault(to, []).append(record)

    def forward_batch(self, records: list[Record], to: str | None = None) -> None:
        """Hand a list to the children now (built-in processors call this once per run).

        Records `forward` buffered before go first: the children see records in the order
        they were forwarded, as Kafka's `forward` calls deliver them."""
        if self.pending or self.pending_to:
            self.flush()
        self.node.emit(records, None if to is None else self._children(to))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        self.node.emit(pending)
        if self.pending_to:
            named, self.pending_to = self.pending_to, {}
            for to, recs in named.items():
                self.node.emit(recs, self._children(to))

    def get_store(self, name: str) -> Any:
        if name in self._stores:
            return self.task.stores[name]
        glob = self.task.global_stores.get(name)
        if glob is not None:
            return glob
        raise TopologyError(
            f"processor {self.node.name!r} is not connected to store {name!r} "
            f"(connected: {self._stores}); connect it with add_state_store/stores=..."
        )

    def schedule(
        self,
        interval: DurationLike,
        type: PunctuationTypeLike,
        callback: Callable[[int], None],
    ) -> Schedule:
        ms = duration(interval, name="punctuation interval")
        if ms < 1:
            raise ConfigError(f"processor {self.node.name!r}: punctuation interval must be >= 1ms")
        try:
            kind = PunctuationType(type)
        except ValueError:
            raise ConfigError(
                f"processor {self.node.name!r}: punctuation type must be 'stream_time' or "
                f"'wall_clock', got {type!r}"
            ) from None
        return self.task.add_schedule(self, ms, kind, callback)

    def commit(self) -> None:
        self.task.commit_requested = True

    def on_error(self, exc: BaseException, record: Record) -> None:
        self.task.report(exc, record, f"processor {self.node.name!r}")

    def record_dropped(self, reason: str, record: Record | None = None) -> None:
        self.task.record_dropped(
            reason, record if record is not None else self.task.current, self.node.name
        )
