"""A custom timestamp extractor per source (Kafka's `TimestampExtractor`, given with
`Consumed.withTimestampExtractor`): `StreamBuilder.stream/table/global_table(...,
timestamp_extractor=fn)`.

`fn(record, partition_time) -> timestamp (ms)` sees the deserialized record (key, value, the
Kafka timestamp and its `timestamp_type`, topic, partition, offset, headers) and the
partition's time so far: the largest timestamp it extracted on that partition, -1 before the
first. The record continues with the extracted timestamp, which windows, joins and output
records then use. As in Kafka, a negative result drops the record (counted as
`negative_timestamp`). Without an extractor a record keeps its Kafka timestamp: the
producer's (CreateTime) or the broker's (a LogAppendTime topic), as Kafka's default.

The extractor runs as the first node below the source (named `<source>-timestamp-extractor`,
taking no generated index, so the other nodes keep Kafka's names).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors import BuiltinProcessor
from kstream.records import Record

TimestampExtractor = Callable[[Record, int], int]
"""`(record, partition_time) -> timestamp in ms`; negative: drop the record."""


def extractor_node(source: str) -> str:
    """The name of the extractor node below source node `source`."""
    return f"{source}-timestamp-extractor"


class PartitionTimes:
    """Per (topic, partition): the largest timestamp extracted so far (Kafka's partition
    time, -1 before the first record)."""

    def __init__(self, extractor: TimestampExtractor) -> None:
        self.extractor = extractor
        self.times: dict[tuple[str | None, int | None], int] = {}

    def extract(self, r: Record) -> int:
        where = (r.topic, r.partition)
        before = self.times.get(where, -1)
        ts = self.extractor(r, before)
        if not isinstance(ts, int):
            raise TypeError(f"the timestamp extractor returned {ts!r}, not an int (ms)")
        if ts > before:
            self.times[where] = ts
        return ts


class TimestampExtractorProcessor(BuiltinProcessor):
    """Stamps each record with its extracted timestamp; drops those extracted negative."""

    def __init__(self, extractor: TimestampExtractor) -> None:
        self.times = PartitionTimes(extractor)

    def process_batch(self, records: Sequence[Record]) -> None:
        self.ctx.forward_batch(stamped(records, self.times, self.ctx))


def stamped(records: Sequence[Record], times: PartitionTimes | None, ctx: Any) -> list[Record]:
    """`records` with extracted timestamps, for processors that extract themselves (the
    global table's); negative ones dropped, failures to the error handler."""
    if times is None:
        return list(records)
    out = []
    for r in records:
        try:
            ts = times.extract(r)
        except Exception as e:
            ctx.on_error(e, r)
            continue
        if ts < 0:
            ctx.record_dropped("negative_timestamp", r)
            continue
        out.append(r if ts == r.timestamp else r.with_timestamp(ts))
    return out
