"""Reading a test's output topics without kstream: a plain confluent-kafka consumer.

The exactly-once tests check what any Kafka reader sees, not what kstream's own reader makes of
it: this module imports only confluent_kafka and the standard library. It assigns every
partition of the topics from the beginning (no consumer group: nothing is committed), reads
with `isolation.level=read_committed` by default, decodes keys as UTF-8 strings and values as
Kafka's LongSerializer writes them (8 bytes, big-endian; `values="string"`: as UTF-8 strings),
and keeps every record it is given:
no deduplication of any kind, so a repeated record shows up as a duplicate.

`check_updates` compares what was read with the updates a pipeline must emit: per key, a
strictly increasing sequence of values (a running count 1..n; a running sum). Exactly once
means each expected update appears once, in order, and nothing else appears.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["IndependentReader", "Verdict", "check_updates", "committed_offsets"]

_LONG = struct.Struct(">q")
_BATCH = 5000


@dataclass(frozen=True)
class Update:
    """One record as read: where it was and what it said."""

    partition: int
    offset: int
    key: str | None
    value: int | str | None
    timestamp: int


class IndependentReader:
    """Reads every partition of `topics` from the beginning, in `isolation` mode."""

    def __init__(
        self,
        bootstrap: str,
        topics: list[str],
        isolation: str = "read_committed",
        timeout: float = 30.0,
        values: str = "long",
    ) -> None:
        if values not in ("long", "string"):
            raise ValueError(f"values must be 'long' or 'string', got {values!r}")
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.isolation = isolation
        self.strings = values == "string"
        self.consumer = self._new_consumer()
        self.partitions: list[TopicPartition] = []
        end = time.monotonic() + timeout
        for topic in self.topics:
            while True:
                md = self.consumer.list_topics(topic, timeout=10)
                found = md.topics.get(topic)
                if found is not None and found.error is None and found.partitions:
                    break
                if time.monotonic() > end:
                    raise AssertionError(f"topic {topic!r} not found at {bootstrap}")
                time.sleep(0.2)
            self.partitions += [
                TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(found.partitions)
            ]
        # every partition's leader knows the topic (a new one may not yet): the reader can look
        # up where each starts
        for tp in self.partitions:
            while True:
                try:
                    self.consumer.get_watermark_offsets(
                        TopicPartition(tp.topic, tp.partition), timeout=5, cached=False
                    )
                    break
                except KafkaException:
                    if time.monotonic() > end:
                        raise
                    # librdkafka can keep answering "unknown partition" from a metadata cache
                    # filled while a new topic was still reaching every broker of a cluster
                    # (seen for 30 s on three nodes): a new client starts with no cache
                    self.consumer.close()
                    self.consumer = self._new_consumer()
                    time.sleep(0.2)
        self.consumer.assign(self.partitions)
        self.records: dict[str, list[Update]] = {t: [] for t in self.topics}
        # where each partition's last end-of-partition event was (its end at that moment)
        self.eof: dict[tuple[str, int], int] = {}
        # partitions a record was read from
        self.started: set[tuple[str, int]] = set()
        self.errors: list[str] = []

    def _new_consumer(self) -> Consumer:
        """A plain confluent-kafka consumer in this reader's isolation mode; it never joins."""
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                # a group id is required by the client; the reader never joins or commits
                "group.id": f"independent-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": self.isolation,
                "enable.partition.eof": True,
                # a position the log no longer has (records deleted under the reader) is an
                # error, not a silent re-read from wherever the log starts now
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 50,
                "log_level": 3,
            }
        )

    def poll(self, timeout: float = 0.1) -> int:
        """Read what is there (waiting up to `timeout`); the number of records read."""
        got = 0
        for msg in self.consumer.consume(_BATCH, timeout):
            err = msg.error()
            if err is not None:
                tp = (str(msg.topic()), msg.partition() or 0)
                if err.code() == KafkaError._PARTITION_EOF:
                    self.eof[tp] = msg.offset() or 0
                elif err.code() == KafkaError._AUTO_OFFSET_RESET and tp not in self.started:
                    # The start of a partition could not be looked up (a leader that does not
                    # know a new topic yet, or is moving): look again.
                    self._from_beginning(tp)
                else:
                    self.errors.append(str(err))
                continue
            raw_key, raw_value = msg.key(), msg.value()
            key = None if raw_key is None else raw_key.decode("utf-8", "replace")
            value: int | str | None = None
            if raw_value is not None and self.strings:
                value = raw_value.decode("utf-8", "replace")
            elif raw_value is not None and len(raw_value) == _LONG.size:
                value = _LONG.unpack(raw_value)[0]
            topic = msg.topic()
            assert topic is not None
            update = Update(msg.partition() or 0, msg.offset() or 0, key, value, msg.timestamp()[1])
            self.records[topic].append(update)
            self.started.add((topic, msg.partition() or 0))
            got += 1
        return got

    def _from_beginning(self, tp: tuple[str, int]) -> None:
        start = TopicPartition(tp[0], tp[1], OFFSET_BEGINNING)
        try:
            self.consumer.seek(start)
        except KafkaException:
            self.consumer.incremental_unassign([TopicPartition(tp[0], tp[1])])
            self.consumer.incremental_assign([start])

    def count(self, topic: str) -> int:
        return len(self.records[topic])

    def ends(self, consumer: Consumer | None = None) -> dict[tuple[str, int], int]:
        """Each partition's end, asked of its leader now: for a read_committed consumer the
        last stable offset (no further than the first open transaction), else the high
        watermark."""
        return {tp: high for tp, (_, high) in self.watermarks(consumer).items()}

    def watermarks(
        self, consumer: Consumer | None = None
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's (log start, end) as `ends` tells the end."""
        c = consumer or self.consumer
        out = {}
        for tp in self.partitions:
            low, high = c.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=10, cached=False
            )
            out[(tp.topic, tp.partition)] = (low, high)
        return out

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        """Each partition's high watermark (open transactions included)."""
        probe = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"independent-reader-{uuid.uuid4().hex}",
                "isolation.level": "read_uncommitted",
                "log_level": 3,
            }
        )
        try:
            return self.ends(probe)
        finally:
            probe.close()

    def positions(self) -> dict[tuple[str, int], int]:
        """How far the reader got in each partition: its position (the offset after the last
        record or transaction marker passed), or the offset of an end-of-partition event if
        further (an empty partition has no position)."""
        got = self.consumer.position(
            [TopicPartition(tp.topic, tp.partition) for tp in self.partitions]
        )
        return {
            (tp.topic, tp.partition): max(tp.offset, self.eof.get((tp.topic, tp.partition), 0))
            for tp in got
        }

    def read_to_end(self, deadline_s: float = 60.0) -> None:
        """Read every partition to its end; fails after `deadline_s`.

        Under read_committed the end is where every transaction is over: the reader waits
        until the last stable offset of each partition equals its high watermark (a
        transaction left open at the end is a failure too: it blocks every read_committed
        reader), then reads until its position passes the transaction markers up to there.
        """
        stop = time.monotonic() + deadline_s
        starts = {tp: low for tp, (low, _) in self.watermarks().items() if low > 0}
        if starts:
            raise AssertionError(f"records were deleted from the logs: log start offsets {starts}")
        ends = self.ends()
        if self.isolation == "read_committed":
            while True:
                high = self.high_watermarks()
                ends = self.ends()
                open_txns = {tp: (ends[tp], hw) for tp, hw in high.items() if ends[tp] < hw}
                if not open_txns:
                    break
                if time.monotonic() > stop:
                    raise AssertionError(
                        f"transactions still open after {deadline_s:g}s: (last stable offset, "
                        f"high watermark) {open_txns}"
                    )
                self.poll(0.2)
        while True:
            self.poll(0.2)
            pos = self.positions()
            behind = {tp: (pos.get(tp), hw) for tp, hw in ends.items() if pos.get(tp, 0) < hw}
            if not behind:
                return
            if time.monotonic() > stop:
                raise AssertionError(
                    f"{self.isolation} reader did not reach the end in {deadline_s:g}s: "
                    f"(position, end) {behind}; errors {self.errors[:5]}"
                )

    def updates(self, topic: str) -> dict[str, list[int | str | None]]:
        """Per key, the values read from `topic` in log order."""
        out: dict[str, list[int | str | None]] = {}
        for r in self.records[topic]:
            out.setdefault(str(r.key), []).append(r.value)
        return out

    def partitions_of_keys(self, topic: str) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for r in self.records[topic]:
            out.setdefault(str(r.key), set()).add(r.partition)
        return out

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> IndependentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Verdict:
    """What was read against what was expected, counted in records."""

    topic: str
    expected: int = 0
    read: int = 0
    missing: int = 0
    duplicated: int = 0
    wrong: int = 0
    out_of_order_keys: int = 0
    split_keys: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (
            self.missing
            or self.duplicated
            or self.wrong
            or self.out_of_order_keys
            or self.split_keys
            or self.read != self.expected
        )

    def __str__(self) -> str:
        return (
            f"{self.topic}: expected {self.expected} updates, read {self.read}: "
            f"{self.missing} missing, {self.duplicated} duplicated, {self.wrong} wrong, "
            f"{self.out_of_order_keys} keys out of order, {self.split_keys} keys on more than "
            f"one partition; e.g. {self.examples[:3]}"
        )


def check_updates(reader: IndependentReader, topic: str, expected: dict[str, list[int]]) -> Verdict:
    """Compare the updates read from `topic` with `expected` (per key, a strictly increasing
    sequence of values, each to appear once and in that order).

    Per key: `missing` counts expected values never read; `duplicated` counts the reads of
    an expected value beyond its first; `wrong` counts records whose value is not an expected
    value of their key (an unknown key's records are all wrong). When none of these occur, a
    key whose sequence still differs from the expected one is out of order. A key's records
    must all be on one partition (the order of a key is a partition's order).
    """
    got = reader.updates(topic)
    v = Verdict(topic, expected=sum(len(s) for s in expected.values()))
    v.read = sum(len(s) for s in got.values())
    for key, seq in got.items():
        want = expected.get(key)
        if want is None:
            v.wrong += len(seq)
            v.examples.append(f"unexpected key {key!r}: {seq[:5]}")
            continue
        wanted = set(want)
        seen = Counter(seq)
        wrong = sum(n for value, n in seen.items() if value not in wanted)
        dup = sum(n - 1 for value, n in seen.items() if value in wanted and n > 1)
        miss = sum(1 for value in want if value not in seen)
        v.wrong += wrong
        v.duplicated += dup
        v.missing += miss
        if wrong or dup or miss:
            v.examples.append(f"{key!r}: read {_short(seq)}, expected {_short(want)}")
        elif seq != want:
            v.out_of_order_keys += 1
            v.examples.append(f"{key!r} out of order: {_short(seq)}")
    for key, want in expected.items():
        if key not in got:
            v.missing += len(want)
            v.examples.append(f"{key!r}: nothing read, expected {_short(want)}")
    v.split_keys = sum(1 for parts in reader.partitions_of_keys(topic).values() if len(parts) > 1)
    return v


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """The sum of `group`'s committed offsets on `topic` (the input records it has finished),
    as the group coordinator has them now: transactional offsets count once their transaction
    committed (read_uncommitted asks for the stable ones without waiting for open
    transactions). A consumer that only asks, never joins the group.

    Not AdminClient.list_consumer_group_offsets: librdkafka 2.16's admin client crashes the
    process (SIGSEGV in rd_kafka_cgrp_op from rd_kafka_handle_OffsetFetch) when the offset
    fetch fails in a way it retries through the consumer group, which an admin client lacks.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            "log_level": 3,
        }
    )
    asked = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                tps = consumer.committed(asked, 30)
                break
            except KafkaException as e:
                # a new group's coordinator may be moving or still loading: ask again
                retriable = e.args[0].code() in (
                    KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE,
                )
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
    return sum(max(0, tp.offset) for tp in tps)


def _short(seq: list[int] | list[int | None]) -> str:
    return str(seq) if len(seq) <= 12 else f"{seq[:6]}...{seq[-6:]} ({len(seq)})"
