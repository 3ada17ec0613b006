"""An in-memory stand-in for `kstream.kafka.Consumer`, over a `MockCluster`.

Subscriptions rebalance among the consumers of a group in this process (each gets its share of
partitions, with the same revoke/assign callbacks); nothing blocks: `consume_batch` returns
what is there and never waits for its timeout.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, TopicPartition

from kstream.errors import ConfigError, KafkaClientError, TopicError
from kstream.testing.mock_cluster import MockCluster, MockGroupMetadata, MockMessage, _tp

__all__ = ["MockConsumer"]


RebalanceCallback = Callable[[list[TopicPartition]], None]


class MockConsumer:
    """In-memory `kstream.kafka.Consumer`: the only member of its group.

    `subscribe` assigns every partition of the topics (on the next `consume_batch`, where
    the real consumer runs rebalance callbacks too). Reading starts at the group's committed
    offset, or at the beginning.
    """

    _ids = itertools.count()

    def __init__(
        self,
        cluster: MockCluster | None = None,
        *,
        group_id: str | None = None,
        partition_eof: bool = True,
        **_ignored: Any,
    ) -> None:
        self.cluster = cluster if cluster is not None else MockCluster()
        self.group_id = group_id
        self._group = group_id or f"mock-unmanaged-{next(self._ids)}"
        self._track_eof = partition_eof
        self._positions: dict[tuple[str, int], int] = {}
        self._paused: set[tuple[str, int]] = set()
        self._eof: dict[tuple[str, int], int] = {}
        self._eof_reported: dict[tuple[str, int], int] = {}
        self._subscription: list[str] | None = None
        self._callbacks: tuple[RebalanceCallback | None, RebalanceCallback | None] = (None, None)
        self._pending_rebalance = False
        self._closed = False

    # -- assignment ------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        if self.group_id is None:
            raise ConfigError("Consumer.subscribe needs a group_id; use assign() without one")
        self._subscription = list(topics)
        self._callbacks = (on_assign, on_revoke)
        self._pending_rebalance = True

    def unsubscribe(self) -> None:
        """Leave the subscription: the partitions are revoked (on_revoke runs now)."""
        _, on_revoke = self._callbacks
        old = [TopicPartition(t, p) for t, p in self._positions]
        if old and on_revoke is not None:
            on_revoke(old)
        self._subscription = None
        self._pending_rebalance = False
        self.unassign()

    def _rebalance(self) -> None:
        self._pending_rebalance = False
        on_assign, on_revoke = self._callbacks
        old = [TopicPartition(t, p) for t, p in self._positions]
        if old and on_revoke is not None:
            on_revoke(old)
        self._positions.clear()
        self._eof.clear()
        self._eof_reported.clear()
        new = [
            TopicPartition(t, p)
            for t in self._subscription or []
            for p in range(self.cluster.partitions(t))
        ]
        before = dict(self._positions)
        if on_assign is not None:
            on_assign(new)
        if self._positions == before:  # on_assign did not call assign(): apply it
            self.assign(new)

    def assign(self, partitions: Iterable[TopicPartition | tuple[Any, ...]]) -> None:
        self._positions.clear()
        self._eof.clear()
        self._eof_reported.clear()
        for p in partitions:
            tp = _tp(p)
            self._positions[(tp.topic, tp.partition)] = self._start(tp)

    def _start(self, tp: TopicPartition) -> int:
        off = tp.offset
        if off is None or off < 0:
            if off == OFFSET_END:
                return self.cluster.end_offset(tp.topic, tp.partition)
            committed = self.cluster.committed(self._group, tp.topic, tp.partition)
            if committed is not None and off != OFFSET_BEGINNING:
                return committed
            return self.cluster.start_offset(tp.topic, tp.partition)
        return int(off)

    def unassign(self) -> None:
        self._positions.clear()
        self._eof.clear()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._positions]

    # -- consuming -------------------------------------------------------------------------

    def consume_batch(self, max_records: int, timeout_s: float) -> list[MockMessage]:
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self.cluster._take_dropped_poll():
            raise KafkaClientError(
                "consuming: _TRANSPORT: connection to the broker dropped (injected by the test)",
                code="_TRANSPORT",
                retriable=True,
            )
        if self._pending_rebalance:
            self._rebalance()
        out: list[MockMessage] = []
        for key, pos in list(self._positions.items()):
            if key in self._paused:
                continue
            msgs = self.cluster.messages(*key)
            take = msgs[pos : pos + max_records - len(out)]
            out.extend(take)
            pos += len(take)
            self._positions[key] = pos
            if pos >= len(msgs) and self._track_eof and self._eof_reported.get(key) != pos:
                self._eof[key] = pos
                self._eof_reported[key] = pos
            if len(out) >= max_records:
                break
        return out

    def eof_offset(self, topic: str, partition: int) -> int | None:
        return self._eof.get((topic, partition))

    def high_watermark(self, topic: str, partition: int) -> int | None:
        if (topic, partition) not in self._positions:
            return self._eof.get((topic, partition))
        return self.cluster.end_offset(topic, partition)

    def get_watermark_offsets(
        self, tp: TopicPartition, cached: bool = True, timeout: float | None = None
    ) -> tuple[int, int] | None:
        return (0, self.cluster.end_offset(tp.topic, tp.partition))

    # -- positions -------------------------------------------------------------------------

    def seek(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        if key not in self._positions:
            raise TopicError(
                f"seeking topic={topic!r} partition={partition}: partition is not assigned",
                code="_STATE",
            )
        self._eof.pop(key, None)
        self._eof_reported.pop(key, None)
        # a logical offset (OFFSET_BEGINNING, OFFSET_END) resolves as librdkafka's does
        self._positions[key] = self._start(TopicPartition(topic, partition, offset))

    def position(
        self, partitions: Iterable[TopicPartition | tuple[str, int]]
    ) -> list[TopicPartition]:
        out = []
        for p in partitions:
            tp = _tp(p)
            pos = self._positions.get((tp.topic, tp.partition), OFFSET_INVALID)
            out.append(TopicPartition(tp.topic, tp.partition, pos))
        return out

    def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> list[TopicPartition]:
        out = []
        for p in partitions:
            tp = _tp(p)
            off = self.cluster.committed(self._group, tp.topic, tp.partition)
            off = OFFSET_INVALID if off is None else off
            out.append(TopicPartition(tp.topic, tp.partition, off))
        return out

    def commit(
        self, offsets: Iterable[TopicPartition | tuple[str, int, int]] | None = None
    ) -> None:
        if self.group_id is None:
            raise ConfigError("Consumer.commit needs a group_id")
        if offsets is None:
            tps = [TopicPartition(t, p, o) for (t, p), o in self._positions.items()]
        else:
            tps = [_tp(o) for o in offsets]
        if self.cluster._take_commit_failure():
            raise KafkaClientError(
                "committing offsets: COORDINATOR_NOT_AVAILABLE (injected by the test)",
                code="COORDINATOR_NOT_AVAILABLE",
                retriable=True,
            )
        self.cluster._commit(self._group, tps)

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for p in partitions:
            tp = _tp(p)
            self._paused.add((tp.topic, tp.partition))

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for p in partitions:
            tp = _tp(p)
            self._paused.discard((tp.topic, tp.partition))

    def consumer_group_metadata(self) -> MockGroupMetadata:
        return MockGroupMetadata(self._group)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        return list(range(self.cluster.partitions(topic)))

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> MockConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
