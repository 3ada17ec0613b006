"""A Kafka streaming source for Spark written with the Python Data Source API.

Spark's JVM Kafka connector is not needed: the source plans offset ranges per partition on the
driver and the executors read them with confluent-kafka (assign + seek, no consumer group), so
the only progress record is Spark's own checkpoint: `{"<topic>": {"<partition>": next_offset}}`.

The end of a partition comes from fetching, never from ListOffsets LATEST, which some brokers
answer with the start of the last record batch: the planner seeks just before the reported end
and reads up to the partition-EOF event, which carries the true end.
"""

from __future__ import annotations

import base64
import json
import time
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
from kstream.spark.wire import SOURCE_ARROW_SCHEMA as ARROW_SCHEMA
from kstream.spark.wire import SOURCE_SCHEMA as SCHEMA
from kstream.spark.wire import decode_headers, dumps, encode_headers, loads

__all__ = ["ARROW_SCHEMA", "NAME", "SCHEMA", "decode_headers", "encode_headers", "options"]

NAME = "kstream_kafka"
_ARROW_BATCH = 20_000  # rows per Arrow batch handed to Spark
_FETCH = 10_000  # messages per consume call
_POLL_S = 0.05  # a consume call returns when it has _FETCH messages or after this
_EOF_WAIT_S = 15.0
_STALL_S = 60.0  # a range read that gets nothing for this long fails the task

Offsets = dict[str, dict[str, int]]


Transform = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def options(
    bootstrap_servers: str,
    topics: Sequence[str],
    *,
    kafka: Mapping[str, Any] | None = None,
    max_records_per_batch: int | None = None,
    transform: tuple[Transform, str] | None = None,
) -> dict[str, str]:
    """The `.options(...)` of a `readStream.format("kstream_kafka")` reading `topics`.

    `transform` = `(function, schema)`: the read task passes its Arrow batches (of `SCHEMA`)
    through `function`, whose output (of `schema`, a DDL string) is what the source returns:
    a `mapInArrow` step run inside the read, which spares Spark a hop through the JVM and a
    second Python worker for every record.
    """
    out = {
        "bootstrap_servers": bootstrap_servers,
        "topics": json.dumps(list(topics)),
        "kafka": json.dumps(dict(kafka or {})),
    }
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
            from kstream.kafka.consumer import Consumer, to_end_settings

            self._planner = Consumer(self.bootstrap_servers, kafka=to_end_settings(self.kafka))
        return self._planner

    def _ends(self) -> tuple[Offsets, Offsets]:
        return partition_bounds(self._consumer(), self.topics)

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
        batches = read_range(self.bootstrap_servers, self.kafka, partition)
        if self.transform is None:
            yield from batches
        else:
            yield from _transform(self.transform)(batches)


def partition_bounds(consumer: Any, topics: Sequence[str]) -> tuple[Offsets, Offsets]:
    """(earliest, end) offsets of every partition of `topics`, the end as seen by fetching.

    `consumer` is a kstream `Consumer` made with `to_end_settings` (left unassigned).
    """
    from confluent_kafka import TopicPartition

    c = consumer
    lows: Offsets = {}
    ends: Offsets = {}
    tps = []
    for topic in topics:
        parts = c.partitions_for(topic)
        if not parts:
            raise TopologyError(f"source topic {topic!r} does not exist")
        lows[topic], ends[topic] = {}, {}
        for p in parts:
            low, reported = c.get_watermark_offsets(TopicPartition(topic, p), cached=False)
            lows[topic][str(p)] = max(int(low), 0)
            ends[topic][str(p)] = max(int(reported), int(low), 0)
            tps.append(TopicPartition(topic, p, max(int(reported) - 1, int(low), 0)))
    c.assign(tps)
    for tp in tps:
        c.seek(tp.topic, tp.partition, tp.offset)
    pending = {(tp.topic, tp.partition) for tp in tps}
    deadline = time.monotonic() + _EOF_WAIT_S
    while pending and time.monotonic() < deadline:
        c.consume_batch(_FETCH, _POLL_S)
        for t, p in list(pending):
            eof = c.eof_offset(t, p)
            if eof is not None:
                ends[t][str(p)] = max(ends[t][str(p)], eof)
                pending.discard((t, p))
    for t, p in pending:
        high = c.high_watermark(t, p)
        if high is not None:
            ends[t][str(p)] = max(ends[t][str(p)], high)
    c.unassign()
    return lows, ends


def read_range(
    bootstrap_servers: str, kafka: Mapping[str, Any], r: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """The records of `r` as Arrow batches (offsets skipped by transactions simply absent).

    The consumer is kept for the next range this Python worker reads (Spark reuses workers),
    so a batch pays for no connection set-up.
    """
    c = _reader(bootstrap_servers, kafka)
    ok = False
    try:
        c.assign([(r.topic, r.partition, r.start)])
        chunks: list[list[Any]] = []
        rows = 0
        last = r.start - 1
        stall = time.monotonic() + _STALL_S
        while last < r.end - 1:
            msgs = c.consume_batch(min(_FETCH, r.end - 1 - last), _POLL_S)
            if not msgs and time.monotonic() > stall:
                raise KafkaClientError(
                    f"reading {r.topic!r} partition {r.partition} offsets [{r.start}, {r.end}): "
                    f"nothing after offset {last} for {_STALL_S:.0f}s"
                )
            if msgs:
                stall = time.monotonic() + _STALL_S
                if msgs[-1].offset() >= r.end:
                    msgs = [m for m in msgs if m.offset() < r.end]
                    last = r.end - 1
                if msgs:
                    last = max(last, msgs[-1].offset())
                    chunks.append(msgs)
                    rows += len(msgs)
            if (c.eof_offset(r.topic, r.partition) or -1) >= r.end:
                break  # the rest of the range holds no records (e.g. transaction markers)
            if rows >= _ARROW_BATCH:
                yield _to_arrow(r.topic, r.partition, chunks)
                chunks, rows = [], 0
        if rows:
            yield _to_arrow(r.topic, r.partition, chunks)
        ok = True
    finally:
        if ok:
            c.unassign()
        else:
            _drop_reader(bootstrap_servers, kafka)


def _to_arrow(topic: str, partition: int, chunks: list[list[Any]]) -> pa.RecordBatch:
    msgs = chunks[0] if len(chunks) == 1 else [m for ch in chunks for m in ch]
    n = len(msgs)
    headers = [m.headers() for m in msgs]
    if any(headers):
        headers = [None if h is None else encode_headers(h) for h in headers]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array([m.offset() for m in msgs], pa.int64()),
            pa.array([m.timestamp()[1] for m in msgs], pa.int64()),
            pa.array([m.key() for m in msgs], pa.binary()),
            pa.array([m.value() for m in msgs], pa.binary()),
            pa.array(headers, pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


_READERS: dict[tuple[str, str], Any] = {}
_TRANSFORMS: dict[str, Transform] = {}


def _transform(blob: str) -> Transform:
    """The transform of an option value, unpickled once per Python worker."""
    fn = _TRANSFORMS.get(blob)
    if fn is None:
        if len(_TRANSFORMS) > 16:
            _TRANSFORMS.clear()
        fn = _TRANSFORMS[blob] = loads(base64.b64decode(blob))
    return fn


def _reader(bootstrap_servers: str, kafka: Mapping[str, Any]) -> Any:
    """This worker's consumer for ranges of `bootstrap_servers` (no group, assign only)."""
    from kstream.kafka.consumer import Consumer, to_end_settings

    key = (bootstrap_servers, json.dumps(dict(kafka), sort_keys=True, default=str))
    c = _READERS.get(key)
    if c is None:
        c = _READERS[key] = Consumer(bootstrap_servers, kafka=to_end_settings(kafka))
    return c


def _drop_reader(bootstrap_servers: str, kafka: Mapping[str, Any]) -> None:
    key = (bootstrap_servers, json.dumps(dict(kafka), sort_keys=True, default=str))
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
