"""The record that flows through a topology.

A plain slotted class rather than a dataclass: records are created per input message and per
forward, so construction cost matters more than conveniences.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

Header = tuple[str, bytes | None]
Headers = Sequence[Header]


class TimestampType(enum.IntEnum):
    """Where a record's timestamp came from (Kafka's TimestampType)."""

    NOT_AVAILABLE = 0
    CREATE_TIME = 1
    LOG_APPEND_TIME = 2


KAFKA_TIMESTAMP_TYPES: tuple[TimestampType, ...] = tuple(TimestampType)
"""The type of a consumed message's timestamp, indexed by the code confluent-kafka's
`Message.timestamp()` returns with it (0 none, 1 CreateTime, 2 LogAppendTime). A
LogAppendTime topic's messages carry the broker's append time as their timestamp, which is
what a record keeps (as Kafka's default timestamp extractor takes it)."""


class Record:
    """One key/value pair with its timestamp, headers and, for input records, its origin.

    Headers are a list of `(str, bytes | None)` pairs; keys may repeat, as in Kafka.
    """

    __slots__ = (
        "headers",
        "key",
        "offset",
        "partition",
        "timestamp",
        "timestamp_type",
        "topic",
        "value",
    )

    def __init__(
        self,
        key: Any,
        value: Any,
        timestamp: int = 0,
        headers: Headers = (),
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    ) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_type = timestamp_type

    # The copies run once per record in map, map_values and select_key (see `derive`).

    def with_key(self, key: Any) -> Record:
        return derive(self, key, self.value)

    def with_value(self, value: Any) -> Record:
        return derive(self, self.key, value)

    def with_key_value(self, key: Any, value: Any) -> Record:
        return derive(self, key, value)

    def with_timestamp(self, timestamp: int) -> Record:
        return Record(
            self.key,
            self.value,
            timestamp,
            self.headers,
            self.topic,
            self.partition,
            self.offset,
            self.timestamp_type,
        )

    def with_headers(self, headers: Headers) -> Record:
        return Record(
            self.key,
            self.value,
            self.timestamp,
            headers,
            self.topic,
            self.partition,
            self.offset,
            self.timestamp_type,
        )

    def header(self, name: str) -> bytes | None:
        """The last value of header `name` (Kafka's lastHeader), or None."""
        found = None
        for k, v in self.headers:
            if k == name:
                found = v
        return found

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.key == other.key
            and self.value == other.value
            and self.timestamp == other.timestamp
            and list(self.headers) == list(other.headers)
            and self.topic == other.topic
            and self.partition == other.partition
            and self.offset == other.offset
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = ""
        if self.topic is not None:
            where = f", topic={self.topic!r}, partition={self.partition}, offset={self.offset}"
        hdrs = f", headers={list(self.headers)!r}" if self.headers else ""
        return (
            f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp}"
            f"{hdrs}{where})"
        )


class Windowed(NamedTuple):
    """A key of a windowed aggregate: the user's key and its window [start, end)."""

    key: Any
    start: int
    end: int


_blank = object.__new__


def derive(r: Record, key: Any, value: Any) -> Record:
    """A copy of `r` with `key` and `value`, its timestamp, headers and origin kept.

    Built slot by slot (object.__new__ and eight stores), which takes a quarter off a call to
    Record(...) with eight arguments on CPython 3.11; the runtime builds its input records the
    same way. tests/unit/test_records.py checks that every slot is set.
    """
    n: Record = _blank(Record)
    n.key = key
    n.value = value
    n.timestamp = r.timestamp
    n.headers = r.headers
    n.topic = r.topic
    n.partition = r.partition
    n.offset = r.offset
    n.timestamp_type = r.timestamp_type
    return n


T = TypeVar("T")


def merge_by_head(queues: Sequence[Sequence[T]], head_ts: Callable[[T], int]) -> list[T]:
    """Kafka Streams' choice among a task's input partitions: one list, each next item taken
    from the queue whose head has the smallest `head_ts` (ties: the earlier queue in `queues`).

    Each queue keeps its own order, sorted by time or not: only heads are compared, so a
    record older than its queue's head waits behind it (Kafka's PartitionGroup). The native
    runtime and the Spark engine both merge with this, so their output is the same.
    `heapq.merge` compares heads only (it never looks past one), which is this rule.
    """
    if len(queues) == 1:
        return list(queues[0])
    return list(heapq.merge(*queues, key=head_ts))
