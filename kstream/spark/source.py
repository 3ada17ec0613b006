"""A Kafka streaming source for Spark written with the Python Data Source API.

Spark's JVM Kafka connector is not needed: the source plans offset ranges per partition on the
driver and the executors read them with confluent-kafka (assign + seek, no consumer group), so
the only progress record is Spark's own checkpoint: `{"<topic>": {"<partition>": next_offset}}`.

The end of a partition: on Apache Kafka, ListOffsets LATEST of a read_committed consumer (the
last stable offset, one request per partition). Under `broker_compat` (`fetch_ends`) it comes
from fetching instead, as some brokers (Tansu) answer ListOffsets with the start of the last
record batch: the planner seeks just before the reported end and reads up to the partition-EOF
event, which carries the true end.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kstream.errors import KafkaClientError, TopologyError
from kstream.kafka.supplier import ClientConfig, ClientSupplier
from kstream.records import KAFKA_TIMESTAMP_TYPES, Record
from kstream.spark.clients import pack_supplier, unpack_supplier
from kstream.spark.wire import SOURCE_ARROW_SCHEMA as ARROW_SCHEMA
from kstream.spark.wire import SOURCE_SCHEMA as SCHEMA
from kstream.spark.wire import SourceChunk, decode_headers, dumps, encode_headers, loads

__all__ = [
    "ARROW_SCHEMA",
    "NAME",
    "SCHEMA",
    "MessageChunk",
    "decode_headers",
    "encode_headers",
    "options",
]

NAME = "kstream_kafka"
_CHUNK = 20_000  # records per chunk (per Arrow batch handed to Spark)
_FETCH = 10_000  # messages per consume call
_POLL_S = 0.05  # a consume call returns when it has _FETCH messages or after this
_EOF_WAIT_S = 15.0
_STALL_S = 60.0  # a range read that gets nothing for this long fails the task

Offsets = dict[str, dict[str, int]]


Transform = Callable[[Iterator[SourceChunk]], Iterator[pa.RecordBatch]]


def options(
    bootstrap_servers: str,
    topics: Sequence[str],
    *,
    kafka: Mapping[str, Any] | None = None,
    max_records_per_batch: int | None = None,
    transform: tuple[Transform, str] | None = None,
    client_supplier: ClientSupplier | None = None,
    fetch_ends: bool = True,
) -> dict[str, str]:
    """The `.options(...)` of a `readStream.format("kstream_kafka")` reading `topics`.

    `fetch_ends`: find each partition's end by fetching up to it (`partition_bounds`), as a
    broker whose ListOffsets is not exact needs (`broker_compat`); off, ListOffsets alone.

    `client_supplier`: where the planner and the readers get their consumers (None: Kafka's;
    it must pickle, see `kstream.spark.clients`).

    `transform` = `(function, schema)`: the read task passes what it read (`SourceChunk`s,
    each as Arrow of `SCHEMA` or as records) through `function`, whose output (of `schema`, a
    DDL string) is what the source returns: a `mapInArrow` step run inside the read, which
    spares Spark a hop through the JVM and a second Python worker for every record.
    """
    out = {
        "bootstrap_servers": bootstrap_servers,
        "topics": json.dumps(list(topics)),
        "kafka": json.dumps(dict(kafka or {})),
        "fetch_ends": "true" if fetch_ends else "false",
    }
    if client_supplier is not None:
        out["client_supplier"] = pack_supplier(client_supplier)
    if max_records_per_batch is not None:
        out["max_records_per_batch"] = str(int(max_records_per_batch))
    if transform is not None:
        fn, schema = transform
        out["transform"] = base64.b64encode(dumps(fn)).decode("ascii")
        out["schema"] = schema
    return out


class KafkaSource(DataSource):
    """`spark.readStream.format("kstream_kafka").options(**options(...)).load()`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return str(self.options.get("schema") or SCHEMA)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


def _chunk(r: OffsetRange, fetched: list[list[Any]]) -> MessageChunk:
    msgs = fetched[0] if len(fetched) == 1 else [m for f in fetched for m in f]
    return MessageChunk(r.topic, r.partition, msgs)


class OffsetRange(InputPartition):
    """One partition's records in [start, end): read by one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans batches on the driver; `read` runs on the executors (no shared state)."""

    def __init__(self, opts: Mapping[str, str]) -> None:
        self.bootstrap_servers = opts["bootstrap_servers"]
        self.topics: list[str] = json.loads(opts["topics"])
        self.kafka: dict[str, Any] = json.loads(opts.get("kafka", "{}"))
        limit = opts.get("max_records_per_batch")
        self.max_records = int(limit) if limit else None
        if self.max_records is not None and self.max_records <= 0:
            raise TopologyError(f"max_records_per_batch must be positive, got {limit}")
        self.transform = opts.get("transform") or None
        self.supplier = opts.get("client_supplier", "")
        self.fetch_ends = opts.get("fetch_ends", "true") == "true"
        self._target: Offsets | None = None
        self._planner: Any = None
        self._available: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    # --- planning (driver) -------------------------------------------------------------------

    def _consumer(self) -> Any:
        if self._planner is None:
            from kstream.kafka.consumer import to_end_settings

            self._planner = unpack_supplier(self.supplier).consumer(
                ClientConfig(self.bootstrap_servers, to_end_settings(self.kafka))
            )
        return self._planner

    def _ends(self) -> tuple[Offsets, Offsets]:
        return partition_bounds(self._consumer(), self.topics, fetch=self.fetch_ends)

    def initialOffset(self) -> dict:
        return self._ends()[0]

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()[1]

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        lows, ends = self._ends()
        self._available = ends
        if self._target is not None:
            ends = _cap(ends, self._target)
        begin = _merge_start(start, lows)
        ends = _cap(ends, {}, floor=begin)
        if isinstance(limit, ReadMaxRows):
            ends = _limit(begin, ends, int(limit.max_rows))
        return ends

    def reportLatestOffset(self) -> dict | None:
        """What Kafka holds (not capped by the batch limit): the query's progress shows lag."""
        return self._available

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        for topic, parts in sorted(end.items()):
            for p, e in sorted(parts.items(), key=lambda kv: int(kv[0])):
                s = int(start.get(topic, {}).get(p, 0))
                if int(e) > s:
                    out.append(OffsetRange(topic, int(p), s, int(e)))
        return out

    def commit(self, end: dict) -> None:
        return None

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    # --- reading (executors) -----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        chunks = read_range(self.bootstrap_servers, self.kafka, partition, self.supplier)
        if self.transform is None:
            yield from (c.arrow() for c in chunks)
        else:
            yield from _transform(self.transform)(chunks)


def partition_bounds(
    consumer: Any, topics: Sequence[str], fetch: bool = True
) -> tuple[Offsets, Offsets]:
    """(earliest, end) offsets of every partition of `topics`, the end as seen by fetching.

    `consumer` is a kstream `Consumer` made with `to_end_settings` (left unassigned). Each
    partition is read to its end from just before the reported one; a partition whose end
    event does not come within `_EOF_WAIT_S` keeps the larger of the reported end and the high
    watermark of the last fetch. Without `fetch`, the reported end is taken as it is: on Apache
    Kafka a read_committed consumer's ListOffsets (librdkafka sends its isolation level) is the
    last stable offset, the end a fetch would reach.
    """
    from confluent_kafka import TopicPartition

    from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end

    c = consumer
    lows: Offsets = {}
    ends: Offsets = {}
    starts: dict[tuple[str, int], int] = {}
    for topic in topics:
        parts = c.partitions_for(topic)
        if not parts:
            raise TopologyError(f"source topic {topic!r} does not exist")
        lows[topic], ends[topic] = {}, {}
        for p in parts:
            low, reported = c.get_watermark_offsets(TopicPartition(topic, p), cached=False)
            lows[topic][str(p)] = max(int(low), 0)
            ends[topic][str(p)] = max(int(reported), int(low), 0)
            starts[(topic, p)] = max(int(reported) - 1, int(low), 0)
    if not fetch:
        return lows, ends
    pending: set[tuple[str, int]] = set()
    try:
        for batch in read_to_end(
            c, starts, max_records=_FETCH, poll_s=_POLL_S, idle_timeout=None, timeout=_EOF_WAIT_S
        ):
            for (t, p), end in batch.ended.items():
                ends[t][str(p)] = max(ends[t][str(p)], end)
    except ReadToEndTimeout as e:
        pending = set(e.positions)
    for t, p in pending:
        high = c.high_watermark(t, p)
        if high is not None:
            ends[t][str(p)] = max(ends[t][str(p)], high)
    c.unassign()
    return lows, ends


def read_range(
    bootstrap_servers: str, kafka: Mapping[str, Any], r: OffsetRange, supplier: str = ""
) -> Iterator[MessageChunk]:
    """The records of `r` in chunks (offsets skipped by transactions simply absent).

    The consumer (from the `supplier` of `kstream.spark.clients.pack_supplier`) is kept for
    the next range this Python worker reads (Spark reuses workers), so a batch pays for no
    connection set-up.
    """
    from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end

    key = _reader_key(bootstrap_servers, kafka, supplier)
    c = _reader(key)
    tp = (r.topic, r.partition)
    ok = False
    try:
        chunks: list[list[Any]] = []
        rows = 0
        batches = read_to_end(
            c,
            {tp: r.start},
            stops={tp: r.end},
            max_records=_FETCH,
            poll_s=_POLL_S,
            idle_timeout=_STALL_S,
        )
        try:
            for batch in batches:
                if batch.messages:
                    chunks.append(batch.messages)
                    rows += len(batch.messages)
                if rows >= _CHUNK:
                    yield _chunk(r, chunks)
                    chunks, rows = [], 0
        except ReadToEndTimeout as e:
            raise KafkaClientError(
                f"reading {r.topic!r} partition {r.partition} offsets [{r.start}, {r.end}): "
                f"nothing after offset {e.positions.get(tp, r.start) - 1} for {_STALL_S:.0f}s"
            ) from e
        if rows:
            yield _chunk(r, chunks)
        ok = True
    finally:
        if ok:
            c.unassign()
        else:
            _drop_reader(key)


class MessageChunk:
    """Consecutive messages of one partition as a read task consumed them (a `SourceChunk`):
    Arrow for Spark, or records straight from the messages for a sub-topology run inside the
    read (`Transform`), which so pays for no Arrow batch it would only take apart again."""

    def __init__(self, topic: str, partition: int, messages: list[Any]) -> None:
        self.topic = topic
        self.partition = partition
        self.messages = messages

    def arrow(self) -> pa.RecordBatch:
        msgs = self.messages
        n = len(msgs)
        headers = [m.headers() for m in msgs]
        stamps = [m.timestamp() for m in msgs]  # (type, timestamp) each
        if any(headers):
            headers = [None if h is None else encode_headers(h) for h in headers]
        return pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * n, pa.string()),
                pa.array([self.partition] * n, pa.int32()),
                pa.array([m.offset() for m in msgs], pa.int64()),
                pa.array([ts for _, ts in stamps], pa.int64()),
                pa.array([m.key() for m in msgs], pa.binary()),
                pa.array([m.value() for m in msgs], pa.binary()),
                pa.array(headers, pa.binary()),
                pa.array([tt for tt, _ in stamps], pa.int8()),
            ],
            schema=ARROW_SCHEMA,
        )

    def records(self) -> list[Record]:
        """The records `wire.input_records` makes of `arrow()`'s batch."""
        topic, part, types = self.topic, self.partition, KAFKA_TIMESTAMP_TYPES
        return [
            Record(m.key(), m.value(), ts, m.headers() or (), topic, part, m.offset(), types[tt])
            for m in self.messages
            for tt, ts in (m.timestamp(),)
        ]


_READERS: dict[tuple[str, str, str], Any] = {}
_TRANSFORMS: dict[str, Transform] = {}


def _transform(blob: str) -> Transform:
    """The transform of an option value, unpickled once per Python worker."""
    fn = _TRANSFORMS.get(blob)
    if fn is None:
        if len(_TRANSFORMS) > 16:
            _TRANSFORMS.clear()
        fn = _TRANSFORMS[blob] = loads(base64.b64decode(blob))
    return fn


def _reader_key(
    bootstrap_servers: str, kafka: Mapping[str, Any], supplier: str
) -> tuple[str, str, str]:
    return (bootstrap_servers, json.dumps(dict(kafka), sort_keys=True, default=str), supplier)


def _reader(key: tuple[str, str, str]) -> Any:
    """This worker's consumer for ranges of one cluster (no group, assign only)."""
    from kstream.kafka.consumer import to_end_settings

    c = _READERS.get(key)
    if c is None:
        bootstrap_servers, kafka, supplier = key
        c = _READERS[key] = unpack_supplier(supplier).consumer(
            ClientConfig(bootstrap_servers, to_end_settings(json.loads(kafka)))
        )
    return c


def _drop_reader(key: tuple[str, str, str]) -> None:
    c = _READERS.pop(key, None)
    if c is not None:
        c.close()


def _merge_start(start: Mapping[str, Any], lows: Offsets) -> Offsets:
    """The batch's start per partition; a partition new since the last batch starts at its low."""
    out: Offsets = {}
    for t, parts in lows.items():
        out[t] = {p: int(start.get(t, {}).get(p, low)) for p, low in parts.items()}
    return out


def _cap(ends: Offsets, cap: Offsets, floor: Offsets | None = None) -> Offsets:
    out: Offsets = {}
    for t, parts in ends.items():
        out[t] = {}
        for p, e in parts.items():
            v = min(e, cap[t][p]) if t in cap and p in cap[t] else e
            if floor is not None:
                v = max(v, floor.get(t, {}).get(p, 0))
            out[t][p] = v
    return out


def _limit(start: Offsets, ends: Offsets, max_rows: int) -> Offsets:
    """At most `max_rows` offsets in total, shared fairly among partitions with data."""
    avail = {(t, p): e - start[t][p] for t, parts in ends.items() for p, e in parts.items()}
    budget = max_rows
    take = dict.fromkeys(avail, 0)
    open_ = [tp for tp, n in sorted(avail.items()) if n > 0]
    while budget > 0 and open_:
        share = max(budget // len(open_), 1)
        still = []
        for tp in open_:
            if budget <= 0:
                break
            n = min(share, avail[tp] - take[tp], budget)
            take[tp] += n
            budget -= n
            if take[tp] < avail[tp]:
                still.append(tp)
        open_ = still
    return {t: {p: start[t][p] + take[(t, p)] for p in parts} for t, parts in ends.items()}
