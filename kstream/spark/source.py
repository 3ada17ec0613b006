"""A Kafka streaming source for Spark written with the Python Data Source API.

Spark's JVM Kafka connector is not needed: the source plans offset ranges per partition on the
driver and the executors read them with confluent-kafka (assign + seek, no consumer group), so
the only progress record is Spark's own checkpoint: `{"<topic>": {"<partition>": next_offset}}`.

The end of a partition comes from fetching, never from ListOffsets LATEST, which some brokers
answer with the start of the last record batch: the planner seeks just before the reported end
and reads up to the partition-EOF event, which carries the true end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
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

from kstream.errors import TopologyError

NAME = "kstream_kafka"
SCHEMA = "topic string, partition int, offset long, timestamp long, key binary, value binary"
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)
_ARROW_BATCH = 10_000
_EOF_WAIT_S = 15.0

Offsets = dict[str, dict[str, int]]


def options(
    bootstrap_servers: str,
    topics: Sequence[str],
    *,
    kafka: Mapping[str, Any] | None = None,
    max_records_per_batch: int | None = None,
) -> dict[str, str]:
    """The `.options(...)` of a `readStream.format("kstream_kafka")` reading `topics`."""
    out = {
        "bootstrap_servers": bootstrap_servers,
        "topics": json.dumps(list(topics)),
        "kafka": json.dumps(dict(kafka or {})),
    }
    if max_records_per_batch is not None:
        out["max_records_per_batch"] = str(int(max_records_per_batch))
    return out


class KafkaSource(DataSource):
    """`spark.readStream.format("kstream_kafka").options(**options(...)).load()`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

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
        self._target: Offsets | None = None
        self._planner: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    # --- planning (driver) -------------------------------------------------------------------

    def _consumer(self) -> Any:
        if self._planner is None:
            from kstream.kafka.consumer import Consumer

            kafka = {**self.kafka, "enable.partition.eof": True}
            self._planner = Consumer(self.bootstrap_servers, kafka=kafka)
        return self._planner

    def _ends(self) -> tuple[Offsets, Offsets]:
        """(earliest, end) offsets of every partition, the end as seen by fetching."""
        from confluent_kafka import TopicPartition

        c = self._consumer()
        lows: Offsets = {}
        ends: Offsets = {}
        tps = []
        for topic in self.topics:
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
            c.consume_batch(10_000, 0.2)
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
        if self._target is not None:
            ends = _cap(ends, self._target)
        begin = _merge_start(start, lows)
        ends = _cap(ends, {}, floor=begin)
        if isinstance(limit, ReadMaxRows):
            ends = _limit(begin, ends, int(limit.max_rows))
        return ends

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
        yield from read_range(self.bootstrap_servers, self.kafka, partition)


def read_range(
    bootstrap_servers: str, kafka: Mapping[str, Any], r: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """The records of `r` as Arrow batches (offsets skipped by transactions simply absent)."""
    from confluent_kafka import TopicPartition

    from kstream.kafka.consumer import Consumer

    c = Consumer(bootstrap_servers, kafka={**kafka, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(r.topic, r.partition, r.start)])
        cols: dict[str, list[Any]] = {n: [] for n in ARROW_SCHEMA.names}
        last = r.start - 1
        while last < r.end - 1:
            msgs = c.consume_batch(10_000, 1.0)
            for m in msgs:
                off = m.offset()
                if off is None or off < r.start:
                    continue
                if off >= r.end:
                    last = r.end
                    break
                last = off
                cols["topic"].append(r.topic)
                cols["partition"].append(r.partition)
                cols["offset"].append(off)
                cols["timestamp"].append(m.timestamp()[1])
                cols["key"].append(m.key())
                cols["value"].append(m.value())
            eof = c.eof_offset(r.topic, r.partition)
            if eof is not None and eof >= r.end:
                break
            if len(cols["offset"]) >= _ARROW_BATCH:
                yield pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)
                cols = {n: [] for n in ARROW_SCHEMA.names}
        if cols["offset"]:
            yield pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)
    finally:
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
