"""A custom timestamp extractor per source (Kafka's `TimestampExtractor`, given with
`Consumed.withTimestampExtractor`): `StreamBuilder.stream/table/global_table(...,
timestamp_extractor=fn)`.

`fn(record, partition_time) -> timestamp (ms)` sees the deserialized record (key, value, the
Kafka timestamp and its `timestamp_type`, topic, partition, offset, headers) and the
partition's time so far: the largest timestamp it extracted on that partition, -1 before the
first. Without an extractor a record keeps its Kafka timestamp: the producer's (CreateTime)
or the broker's (a LogAppendTime topic), as Kafka's default.

Where Kafka applies it, so does kstream: the task stamps each input record as it takes it in
(`kstream.topology.nodes.SourceNode.stamp`, Kafka's `RecordQueue`), before the record counts
for stream time (stream-time punctuations, window close, the future-timestamp warning) and
before the task picks which partition's head to process next. Windows, joins and output
records then use the extracted time. As in Kafka, a negative result drops the record (counted
as `negative_timestamp`); an extractor that raises is a processing error for the app's error
policy. The extractor is no node: `describe()` is Kafka's.

Partition time starts at -1 when a task starts: Kafka also keeps it in the committed offsets'
metadata, kstream does not.
"""

from __future__ import annotations

from kstream.topology.topology import TimestampExtractor

__all__ = ["TimestampExtractor"]
