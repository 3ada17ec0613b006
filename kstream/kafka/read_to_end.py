"""Read partitions from given offsets to their end: the one loop behind restore, global-table
reads, `TopicReader`, `caught_up` and Spark's global reads.

Contract. `read_to_end(consumer, starts)` assigns `consumer` to every `(topic, partition)` of
`starts` at its start offset and yields `ToEndBatch`es until each partition has reached its
end. A partition has reached its end when the consumer reports an end-of-partition event
whose offset is at or past the partition's position (the offset after the last record
yielded, or its start). That offset is the partition's end, returned in `ToEndBatch.ended`:
it may lie past the last record, because transaction markers take offsets but are never
delivered, so "the end" is `position >= end`, never "the last record's offset is end - 1".

Why end-of-partition events and not ListOffsets: the event comes with a fetch's answer and
holds the end the fetcher actually reached (the high watermark for `read_uncommitted`, the
last stable offset for `read_committed`), whereas some brokers answer ListOffsets LATEST
wrongly (Tansu, kstream.broker_compat). The consumer must therefore have
`enable.partition.eof` on (`kstream.kafka.consumer.to_end_settings`, which also shortens the
fetch wait so an empty last fetch costs 10 ms, not 500).

A range. With `stops`, a partition given a stop offset is read up to it instead: records at or
past the stop are left out, and the partition has reached its end once its position or its
end-of-partition offset is at or past the stop (`ended` then holds the stop). Spark's read
tasks read their planned offset ranges so.

Waiting: `idle_timeout` bounds the time without a record or an ended partition (a restore that
makes progress may take as long as it needs), `timeout` the whole read; either raises
`ReadToEndTimeout`, which names the partitions still open and their positions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kstream.errors import KafkaClientError
from kstream.kafka.consumer import TO_END_POLL_S

__all__ = ["ReadToEndTimeout", "ToEndBatch", "ToEndConsumer", "read_to_end"]

TP = tuple[str, int]


class ToEndConsumer(Protocol):
    """What the helper needs of a consumer: kstream's `Consumer` and `MockConsumer` fit."""

    def assign(self, partitions: Any) -> None: ...

    def consume_batch(self, max_records: int, timeout_s: float) -> list[Any]: ...

    def eof_offset(self, topic: str, partition: int) -> int | None: ...


class ReadToEndTimeout(KafkaClientError):
    """No end reached in time. `positions`: the open partitions and how far each was read."""

    def __init__(self, positions: Mapping[TP, int], waited_s: float, idle: bool) -> None:
        what = "no record and no end for" if idle else "no end reached in"
        where = ", ".join(f"{t}[{p}] at offset {o}" for (t, p), o in sorted(positions.items()))
        super().__init__(f"reading to the end: {what} {waited_s:g}s: {where}")
        self.positions = dict(positions)
        self.waited_s = waited_s


@dataclass
class ToEndBatch:
    """One consume call's worth of a read to the end.

    `messages`: the records of the read partitions at or past their positions, in the order
    the consumer returned them. `ended`: the partitions that reached their end with this batch,
    each with its end offset (the next offset to read: store it as a checkpoint).
    """

    messages: list[Any] = field(default_factory=list)
    ended: dict[TP, int] = field(default_factory=dict)


def read_to_end(
    consumer: ToEndConsumer,
    starts: Mapping[TP, int],
    *,
    max_records: int = 5000,
    poll_s: float = TO_END_POLL_S,
    idle_timeout: float | None = 60.0,
    timeout: float | None = None,
    stop: Any = None,
    stops: Mapping[TP, int] | None = None,
) -> Iterator[ToEndBatch]:
    """Read each partition of `starts` from its start offset to its end (module docstring),
    or to its offset in `stops` if it has one (a range: module docstring).

    A negative start is a logical offset (OFFSET_BEGINNING...): the position counts from 0
    until the first record. `stop` (an object with `is_set()`, e.g. a `threading.Event`) ends
    the read early, without error. The consumer stays assigned afterwards: a caller that keeps
    following the partitions (global tables) goes on consuming; the others close it.
    """
    consumer.assign([(t, p, o) for (t, p), o in starts.items()])
    position = {tp: max(o, 0) for tp, o in starts.items()}
    limit = {tp: o for tp, o in (stops or {}).items() if tp in position}
    pending = {tp for tp in position if limit.get(tp, position[tp] + 1) > position[tp]}
    began = last = time.monotonic()
    while pending and (stop is None or not stop.is_set()):
        batch = ToEndBatch()
        for m in consumer.consume_batch(max_records, poll_s):
            tp = (m.topic() or "", m.partition() or 0)
            off = m.offset()
            if tp not in position or off is None or off < position[tp]:
                continue
            if tp in limit and off >= limit[tp]:
                position[tp] = max(position[tp], limit[tp])
                continue
            position[tp] = off + 1
            batch.messages.append(m)
        for tp in sorted(pending):
            eof = consumer.eof_offset(*tp)
            end = limit.get(tp)
            if end is None:
                if eof is not None and eof >= position[tp]:
                    batch.ended[tp] = position[tp] = eof
                    pending.discard(tp)
            elif position[tp] >= end or (eof is not None and eof >= end):
                batch.ended[tp] = position[tp] = end
                pending.discard(tp)
        now = time.monotonic()
        if batch.messages or batch.ended:
            yield batch
            last = time.monotonic()  # the caller's work on a batch is not idle time
        elif idle_timeout is not None and now - last > idle_timeout:
            raise ReadToEndTimeout({tp: position[tp] for tp in pending}, idle_timeout, True)
        if pending and timeout is not None and now - began > timeout:
            raise ReadToEndTimeout({tp: position[tp] for tp in pending}, timeout, False)
