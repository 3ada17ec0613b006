"""`KTable.suppress`' processor (Kafka's `KTableSuppressProcessor` over an
`InMemoryTimeOrderedKeyValueChangeBuffer`; kstream.dsl.suppress tells its semantics) and the
getter of a suppressed table."""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, Change
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.suppressed import BufferFullError, BufferFullStrategy, Suppressed
from kstream.errors import TopologyError
from kstream.records import Record, Windowed
from kstream.serde import Serde
from kstream.state.keys import blob, unblob
from kstream.topology.processor import ProcessorContext

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_TIME_KEY = b"t"  # the node's stream time; buffered keys are b"k" + key bytes
_KEY = b"k"


@dataclass(slots=True)
class _Entry:
    """A buffered key: Kafka's `BufferKey` time and `BufferValue` (prior, old, new, context)."""

    time: int
    prior: bytes | None
    old: bytes | None
    new: bytes | None
    prior_is_old: bool  # Kafka counts prior and old once when they are the same array
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    topic: str | None
    partition: int | None
    offset: int | None
    seq: int = 0

    def size(self, key: bytes) -> int:
        """Kafka's `computeRecordSize`: buffer time, key, values and record context."""
        n = 8 + len(key)
        n += 0 if self.prior is None else len(self.prior)
        n += 0 if self.old is None or self.prior_is_old else len(self.old)
        n += 0 if self.new is None else len(self.new)
        n += 8 + 8 + 4 + (0 if self.topic is None else len(self.topic))
        for hk, hv in self.headers:
            n += len(hk) + (0 if hv is None else len(hv))
        return n

    def encode(self) -> bytes:
        parts = [_Q.pack(self.time), _Q.pack(self.timestamp), bytes([self.prior_is_old])]
        for b in (self.prior, self.old, self.new):
            parts.append(blob(b))
        parts.append(blob(None if self.topic is None else self.topic.encode()))
        parts.append(_Q.pack(-1 if self.partition is None else self.partition))
        parts.append(_Q.pack(-1 if self.offset is None else self.offset))
        parts.append(_I.pack(len(self.headers)))
        for hk, hv in self.headers:
            parts.append(blob(hk.encode()))
            parts.append(blob(hv))
        return b"".join(parts)

    @staticmethod
    def decode(data: bytes) -> _Entry:
        time, ts = _Q.unpack_from(data, 0)[0], _Q.unpack_from(data, 8)[0]
        prior_is_old = bool(data[16])
        pos = 17
        prior, pos = unblob(data, pos)
        old, pos = unblob(data, pos)
        new, pos = unblob(data, pos)
        topic_b, pos = unblob(data, pos)
        partition, offset = _Q.unpack_from(data, pos)[0], _Q.unpack_from(data, pos + 8)[0]
        pos += 16
        count = _I.unpack_from(data, pos)[0]
        pos += 4
        headers = []
        for _ in range(count):
            hk, pos = unblob(data, pos)
            hv, pos = unblob(data, pos)
            headers.append(((hk or b"").decode(), hv))
        return _Entry(
            time,
            prior,
            old,
            new,
            prior_is_old,
            ts,
            tuple(headers),
            None if topic_b is None else topic_b.decode(),
            None if partition < 0 else partition,
            None if offset < 0 else offset,
        )


class SuppressProcessor(BuiltinProcessor):
    """Kafka's `KTableSuppressProcessor` over a time-ordered buffer kept in a key-value store.

    The store holds raw bytes (`b"k" + key bytes -> entry`, `b"t" -> stream time`); an in-memory
    index and heap ordered by (buffer time, key bytes) are rebuilt from it on init and after a
    discarded batch.
    """

    def __init__(
        self,
        store: str,
        node: str,
        key_serde: Serde,
        value_serde: Serde,
        suppressed: Suppressed,
        wait_ms: int,
    ) -> None:
        self.store_name = store
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.wait_ms = wait_ms
        self.window_end_time = suppressed.final
        self.drop_tombstones = suppressed.final
        self.max_records = suppressed.buffer.record_limit
        self.max_bytes = suppressed.buffer.byte_limit
        self.strategy = suppressed.buffer.full_strategy

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        self._load()

    def after_discard(self) -> None:
        """The batch is retried: back to what the store holds (see `Task.discard`)."""
        self._load()

    def _load(self) -> None:
        self.index: dict[bytes, _Entry] = {}
        self.heap: list[tuple[int, bytes, int]] = []
        self.bytes = 0
        self.seq = 0
        self.observed = -1
        with self.store.all() as cur:
            for k, v in cur:
                if k == _TIME_KEY:
                    self.observed = _Q.unpack(v)[0]
                elif k[:1] == _KEY:
                    self._insert(bytes(k[1:]), _Entry.decode(v))
        self.saved_time = self.observed

    def _insert(self, kb: bytes, e: _Entry) -> None:
        self.seq += 1
        e.seq = self.seq
        self.index[kb] = e
        heapq.heappush(self.heap, (e.time, kb, e.seq))
        self.bytes += e.size(kb)

    def _min(self) -> tuple[int, bytes] | None:
        heap, index = self.heap, self.index
        while heap:
            t, kb, seq = heap[0]
            e = index.get(kb)
            if e is not None and e.seq == seq:
                return t, kb
            heapq.heappop(heap)
        return None

    def process_batch(self, records: Sequence[Record]) -> None:
        task = self.task
        for r in records:
            if task is not None:
                task.current = r
            if r.timestamp > self.observed:
                self.observed = r.timestamp
            self._buffer(r)
            self._enforce()
        if self.observed != self.saved_time:
            self.store.put(_TIME_KEY, _Q.pack(self.observed))
            self.saved_time = self.observed
        if task is not None:
            task.current = None

    def _buffer(self, r: Record) -> None:
        key = r.key
        kb = self.key_serde.to_bytes(key)
        if kb is None:
            raise TypeError(f"suppress {self.node!r}: the key serialized to None")
        new, old = r.value
        vser = self.value_serde.to_bytes
        nb = None if new is None else vser(new)
        ob = None if old is None else vser(old)
        if self.window_end_time:
            if not isinstance(key, Windowed):
                raise TopologyError(
                    f"suppress {self.node!r}: until_window_closes needs a windowed table, "
                    f"got key {key!r:.80}"
                )
            time = key.end
        else:
            time = r.timestamp
        prev = self.index.get(kb)
        entry = _Entry(
            time if prev is None else prev.time,
            ob if prev is None else prev.prior,
            ob,
            nb,
            prev is None,
            r.timestamp,
            tuple(r.headers),
            r.topic,
            r.partition,
            r.offset,
        )
        if prev is None:
            self._insert(kb, entry)
        else:
            entry.seq = prev.seq
            self.index[kb] = entry
            self.bytes += entry.size(kb) - prev.size(kb)
        self.store.put(_KEY + kb, entry.encode())

    def _over(self) -> bool:
        return len(self.index) > self.max_records or self.bytes > self.max_bytes

    def _enforce(self) -> None:
        expiry = self.observed - self.wait_ms
        while (m := self._min()) is not None and m[0] <= expiry:
            self._evict(m[1])
        if not self._over():
            return
        if self.strategy is BufferFullStrategy.SHUT_DOWN:
            raise BufferFullError(
                f"{self.node} buffer exceeded its max capacity. Currently "
                f"[{len(self.index)}/{self.max_records}] records and "
                f"[{self.bytes}/{self.max_bytes}] bytes."
            )
        while self._over() and (m := self._min()) is not None:
            self._evict(m[1])

    def _evict(self, kb: bytes) -> None:
        """Forward a key's buffered update at once, and only then drop it from the store: as
        Kafka's buffer evicts (`evictWhile` removes an entry after its callback), a table read
        through the suppressed table while the update travels down sees the key's prior
        value, and every earlier eviction already gone."""
        e = self.index.pop(kb)
        heapq.heappop(self.heap)
        self.bytes -= e.size(kb)
        if e.new is None and self.drop_tombstones:
            self.store.put(_KEY + kb, None)
            return
        vde = self.value_serde.from_bytes
        value = Change(None if e.new is None else vde(e.new), None if e.old is None else vde(e.old))
        self.ctx.forward(
            Record(
                self.key_serde.from_bytes(kb),
                value,
                e.timestamp,
                e.headers,
                e.topic,
                e.partition,
                e.offset,
            )
        )
        self.store.put(_KEY + kb, None)

    def prior_value(self, key: Any) -> tuple[bool, Any]:
        """`(True, value before the buffered updates)` for a buffered key, else `(False, None)`
        (Kafka's `priorValueForBuffered`, what the suppressed table's getter shows)."""
        kb = self.key_serde.to_bytes(key)
        e = None if kb is None else self.index.get(kb)
        if e is None:
            return False, None
        return True, None if e.prior is None else self.value_serde.from_bytes(e.prior)


class SuppressedValueGetter(ValueGetter):
    """The suppressed table's view: a buffered key reads as its value before the buffered
    updates (what was last emitted), any other key as the table above reads it."""

    def __init__(
        self,
        buffer: str,
        key_serde: Serde,
        value_serde: Serde,
        parent: ValueGetter,
        transforms: tuple[Callable[[Any, Any], Any], ...] = (),
    ) -> None:
        super().__init__(parent.store, transforms)
        self.buffer = buffer
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.parent = parent

    @property
    def stores(self) -> tuple[str, ...]:
        return (self.buffer, *self.parent.stores)

    def then(self, fn: Callable[[Any, Any], Any]) -> ValueGetter:
        return SuppressedValueGetter(
            self.buffer, self.key_serde, self.value_serde, self.parent, (*self.transforms, fn)
        )

    def bind(self, ctx: ProcessorContext) -> Callable[[Any], Any]:
        store = ctx.get_store(self.buffer)
        parent = self.parent.bind(ctx)
        kser, vde, fns = self.key_serde.to_bytes, self.value_serde.from_bytes, self.transforms

        def value(key: Any) -> Any:
            kb = kser(key)
            raw = None if kb is None else store.get(_KEY + kb)
            if raw is None:
                v = parent(key)
            else:
                prior = _Entry.decode(raw).prior
                v = None if prior is None else vde(prior)
            for fn in fns:
                if v is None:
                    return None
                v = fn(key, v)
            return v

        return value
