"""The grace period of a stream-table join with a versioned table (KIP-923).

A table update can arrive after a stream record it precedes in time (the two topics are read
at their own pace). With a grace period the join holds stream records back until stream time
passes their timestamp plus the grace, then joins them in timestamp order, each with the table
as of its own timestamp (kstream.dsl.versioned). As Kafka's `KStreamKTableJoinProcessor` over
a `RocksDBTimeOrderedKeyValueBuffer`, record for record:

- stream time is the largest timestamp of the stream records the join has seen (dropped ones
  too: a record with a None value still moves it);
- a record older than stream time - grace is joined at once; any other one is buffered, and
  then every buffered record with timestamp <= stream time - grace is joined, in (timestamp,
  key bytes, arrival) order, with its own timestamp and headers;
- records the join drops (a None value, or a None key in an inner join) are dropped when
  they arrive, never buffered; a left join's None-key record is joined at once.

The buffer is a changelogged key-value store (`<join name>-Buffer`), written in the same commit
(and, exactly-once, the same transaction) as the rest of the task, together with the join's
stream time: a restarted or retried task releases exactly the records an uninterrupted one
would.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.join import Joiner, StreamTableJoinProcessor
from kstream.records import Record
from kstream.serde import Serde
from kstream.state.keys import TS_MIN, blob, esc, seq4, ts8, unblob, unesc, unts8
from kstream.topology.processor import ProcessorContext

__all__ = ["BufferedStreamTableJoinProcessor"]

_TIME_KEY = b"t"  # the join's stream time; buffered records are b"r" + time + key + seq
_REC = b"r"
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


class BufferedStreamTableJoinProcessor(StreamTableJoinProcessor):
    """A stream-table join (`StreamTableJoinProcessor`) behind a time-ordered buffer."""

    def __init__(
        self,
        getter: ValueGetter,
        joiner: Joiner,
        left: bool,
        with_key: bool,
        grace: int,
        buffer_store: str,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        super().__init__(getter, joiner, left, None, with_key)
        self.grace = grace
        self.buffer_store = buffer_store
        self.key_serde = key_serde
        self.value_serde = value_serde

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.buffer = ctx.get_store(self.buffer_store)
        self._load()

    def after_discard(self) -> None:
        """The batch is retried: back to the committed stream time and buffer (`Task.discard`)."""
        self._load()

    def _load(self) -> None:
        saved = self.buffer.get(_TIME_KEY)
        self.observed = TS_MIN if saved is None else _Q.unpack(saved)[0]
        self.saved_time = self.observed
        self.seq = 0
        self.min_time: int | None = None
        with self.buffer.prefix_scan(_REC) as cur:
            for k, _ in cur:
                t = unts8(k, 1)
                self.min_time = t if self.min_time is None else min(self.min_time, t)
                self.seq = max(self.seq, int.from_bytes(k[-4:], "big") + 1)

    def process_batch(self, records: Sequence[Record]) -> None:
        ready: list[Record] = []
        task = self.task
        for r in records:
            if r.timestamp > self.observed:
                self.observed = r.timestamp
            if r.value is None or r.key is None:
                # dropped (counted) by the join, or a left join's None key: joined at once
                ready.append(r)
                continue
            if r.timestamp < self.observed - self.grace:
                ready.append(r)
                continue
            if task is not None:
                task.current = r
            self._put(r)
            self._evict(ready)
        if self.observed != self.saved_time:
            self.buffer.put(_TIME_KEY, _Q.pack(self.observed))
            self.saved_time = self.observed
        if task is not None:
            task.current = None
        super().process_batch(ready)

    def _put(self, r: Record) -> None:
        kb = self.key_serde.to_bytes(r.key)
        vb = self.value_serde.to_bytes(r.value)
        if kb is None or vb is None:
            raise TypeError("a buffered stream record serialized to None")
        key = _REC + ts8(r.timestamp) + esc(kb) + seq4(self.seq)
        self.seq += 1
        self.buffer.put(key, _encode(r, vb))
        if self.min_time is None or r.timestamp < self.min_time:
            self.min_time = r.timestamp

    def _evict(self, out: list[Record]) -> None:
        until = self.observed - self.grace
        if self.min_time is None or self.min_time > until:
            return
        kde, vde = self.key_serde.from_bytes, self.value_serde.from_bytes
        due: list[tuple[bytes, bytes]] = []
        # the keys of times <= until sort below the bare prefix of time until + 1
        with self.buffer.range(_REC, _REC + ts8(until + 1)) as cur:
            due.extend((bytes(k), bytes(v)) for k, v in cur)
        for k, v in due:
            kb, _ = unesc(k, 9)
            out.append(_decode(v, kde(kb), vde, unts8(k, 1)))
            self.buffer.put(k, None)
        self.min_time = None
        with self.buffer.prefix_scan(_REC) as cur:
            for k, _ in cur:
                self.min_time = unts8(k, 1)
                break


def _encode(r: Record, vb: bytes) -> bytes:
    """A buffered record: value bytes, origin (topic, partition, offset) and headers (its key
    and timestamp are in the buffer key)."""
    parts = [blob(vb), blob(None if r.topic is None else r.topic.encode())]
    parts.append(_Q.pack(-1 if r.partition is None else r.partition))
    parts.append(_Q.pack(-1 if r.offset is None else r.offset))
    parts.append(_I.pack(len(r.headers)))
    for hk, hv in r.headers:
        parts.append(blob(hk.encode()))
        parts.append(blob(hv))
    return b"".join(parts)


def _decode(data: bytes, key: Any, vde: Callable[[bytes], Any], timestamp: int) -> Record:
    vb, pos = unblob(data, 0)
    topic_b, pos = unblob(data, pos)
    partition, offset = _Q.unpack_from(data, pos)[0], _Q.unpack_from(data, pos + 8)[0]
    pos += 16
    count = _I.unpack_from(data, pos)[0]
    pos += 4
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        hk, pos = unblob(data, pos)
        hv, pos = unblob(data, pos)
        headers.append(((hk or b"").decode(), hv))
    return Record(
        key,
        vde(vb or b""),
        timestamp,
        headers,
        None if topic_b is None else topic_b.decode(),
        None if partition < 0 else partition,
        None if offset < 0 else offset,
    )
