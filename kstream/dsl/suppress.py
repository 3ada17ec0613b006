"""`KTable.suppress`: hold a table's updates back and emit only the latest one per key, later.

`Suppressed.until_window_closes(BufferConfig.unbounded())` on a windowed table emits each
window once, when stream time reaches its end + grace; `Suppressed.until_time_limit(duration,
buffer_config)` on any table emits a key's latest update once stream time is `duration` past the
first update buffered for it. Semantics are Kafka Streams' `KTableSuppressProcessor` over an
`InMemoryTimeOrderedKeyValueChangeBuffer`, update for update:

- Stream time is the largest timestamp of the updates the suppress node has received (not the
  input records': a late record dropped upstream does not move it).
- A key's buffer time is set when it enters the buffer (the update's window end, or its
  timestamp) and kept while later updates of the key replace its value ("non-resetting").
- After each update, keys are evicted in (buffer time, key bytes) order while buffer time <=
  stream time - duration; then, while the buffer holds more than `max_records` keys or
  `max_bytes` (Kafka's size estimate), the oldest are emitted early (`emit_early_when_full`) or
  processing stops with an error (`shut_down_when_full`).
- An evicted key is forwarded as `Change(new, old)` of its latest update, with that update's
  timestamp and headers. `until_window_closes` drops evicted deletes (nothing was emitted for the
  window before); `until_time_limit` forwards them.

How this differs from a windowed aggregation's `emit="final"` (both as in Kafka): emit-final
closes windows on the aggregation's own stream time (every input record's, plus kstream's
wall-clock close) and emits in window-start order as `Change(agg, None)` with the window's
largest record timestamp; suppress closes windows on the stream time of the updates it
receives (a window end + grace, a session end + gap + grace), emits in (window end, key
bytes) order the latest update's `Change(new, old)` with that update's timestamp and headers,
never closes on the wall clock, and can be placed after filters or map_values of the
windowed table.

The buffer is a changelogged key-value store (`<name>-store`, or
`KTABLE-SUPPRESS-STATE-STORE-<n>`), written in the same commit (and, exactly-once, the same
transaction) as the other stores: a restart restores it and neither loses nor repeats an update.
It also keeps the node's stream time, so a restarted or retried task evicts exactly when an
uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kstream.dsl.graph import AUTO, InternalBuilder, ValueGetter, processor_factory
from kstream.dsl.processors import BuiltinProcessor, Change
from kstream.dsl.versioned import versioned_upstream
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError, KStreamError, TopologyError
from kstream.records import Record, Windowed
from kstream.serde import Serde
from kstream.state.keys import blob, unblob
from kstream.topology.processor import ProcessorContext

if TYPE_CHECKING:
    from kstream.dsl.table import KTable

__all__ = ["BufferConfig", "BufferFullError", "BufferFullStrategy", "Suppressed", "suppress"]

UNBOUNDED = 2**63 - 1  # Kafka's Long.MAX_VALUE: no limit
OP = "SUPPRESS"


class BufferFullStrategy(enum.Enum):
    """What a full buffer does (Kafka's `BufferFullStrategy`)."""

    EMIT = "emit"
    SHUT_DOWN = "shut_down"


class BufferFullError(KStreamError):
    """A `shut_down_when_full` suppression buffer went over its limits: the app stops."""


@dataclass(frozen=True)
class BufferConfig:
    """The limits of a suppression buffer and what happens when they are exceeded.

    Build one as Kafka's `Suppressed.BufferConfig`: `BufferConfig.unbounded()`,
    `BufferConfig.max_records(n)`, `BufferConfig.max_bytes(n)` (these two emit early when full),
    then `.with_max_records(n)`, `.with_max_bytes(n)`, `.with_no_bound()`,
    `.emit_early_when_full()`, `.shut_down_when_full()`, `.with_logging_disabled()`.

    Example:
        >>> from kstream.dsl.suppress import BufferConfig
        >>> BufferConfig.max_records(1000).with_max_bytes(1 << 20).shut_down_when_full()
        BufferConfig(record_limit=1000, byte_limit=1048576, full_strategy=<BufferFullStrategy.SHUT_DOWN: 'shut_down'>, logging=True)
    """  # noqa: E501

    record_limit: int = UNBOUNDED
    byte_limit: int = UNBOUNDED
    full_strategy: BufferFullStrategy = BufferFullStrategy.SHUT_DOWN
    logging: bool = True

    def __post_init__(self) -> None:
        if self.record_limit < 0 or self.byte_limit < 0:
            raise ConfigError(
                f"buffer limits must be >= 0, got records={self.record_limit}, "
                f"bytes={self.byte_limit}"
            )

    @staticmethod
    def unbounded() -> BufferConfig:
        """No limit (a strict buffer: it never emits early)."""
        return BufferConfig()

    @staticmethod
    def max_records(limit: int) -> BufferConfig:
        """At most `limit` keys; the oldest are emitted early beyond it."""
        return BufferConfig(limit, UNBOUNDED, BufferFullStrategy.EMIT)

    @staticmethod
    def max_bytes(limit: int) -> BufferConfig:
        """At most `limit` bytes (Kafka's estimate); the oldest are emitted early beyond it."""
        return BufferConfig(UNBOUNDED, limit, BufferFullStrategy.EMIT)

    def with_max_records(self, limit: int) -> BufferConfig:
        return dataclasses.replace(self, record_limit=limit)

    def with_max_bytes(self, limit: int) -> BufferConfig:
        return dataclasses.replace(self, byte_limit=limit)

    def with_no_bound(self) -> BufferConfig:
        """No limits, strict (as Kafka's `withNoBound`)."""
        return dataclasses.replace(
            self,
            record_limit=UNBOUNDED,
            byte_limit=UNBOUNDED,
            full_strategy=BufferFullStrategy.SHUT_DOWN,
        )

    def emit_early_when_full(self) -> BufferConfig:
        """Over a limit, emit the oldest keys early (results may then not be final)."""
        return dataclasses.replace(self, full_strategy=BufferFullStrategy.EMIT)

    def shut_down_when_full(self) -> BufferConfig:
        """Over a limit, stop with `BufferFullError` rather than emit a result early."""
        return dataclasses.replace(self, full_strategy=BufferFullStrategy.SHUT_DOWN)

    def with_logging_disabled(self) -> BufferConfig:
        """No changelog: a restart loses what was buffered (as Kafka's `withLoggingDisabled`)."""
        return dataclasses.replace(self, logging=False)

    def with_logging_enabled(self) -> BufferConfig:
        return dataclasses.replace(self, logging=True)


@dataclass(frozen=True)
class Suppressed:
    """How `KTable.suppress` holds updates back: `until_window_closes` or `until_time_limit`.

    Example:
        >>> from kstream.dsl.suppress import BufferConfig, Suppressed
        >>> Suppressed.until_time_limit("5s", BufferConfig.max_records(10)).time_limit_ms
        5000
    """

    buffer: BufferConfig
    time_limit_ms: int | None = None  # None: until the window closes (the window's grace)
    name: str | None = None

    @property
    def final(self) -> bool:
        return self.time_limit_ms is None

    @staticmethod
    def until_window_closes(buffer: BufferConfig) -> Suppressed:
        """Only a windowed table's final results: each window once, when stream time passes its
        end + grace. The buffer must be strict (`unbounded()` or `shut_down_when_full()`):
        emitting early would not be final."""
        if buffer.full_strategy is not BufferFullStrategy.SHUT_DOWN:
            raise ConfigError(
                "until_window_closes needs a strict buffer (BufferConfig.unbounded() or "
                ".shut_down_when_full()): emitting early would not give final results"
            )
        return Suppressed(buffer)

    @staticmethod
    def until_time_limit(time_limit: DurationLike, buffer: BufferConfig) -> Suppressed:
        """Each key's latest update once stream time is `time_limit` past the key's first
        buffered update (a rate limit per key), or earlier if the buffer says so."""
        ms = duration(time_limit, name="suppress time limit")
        if ms < 0:
            raise ConfigError(f"suppress time limit must be >= 0, got {time_limit!r}")
        return Suppressed(buffer, ms)

    def with_name(self, name: str) -> Suppressed:
        """Name the processor `name` and its buffer store `<name>-store`."""
        return dataclasses.replace(self, name=name)


# --- the buffer's stored form -----------------------------------------------------------------

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


# --- the processor ----------------------------------------------------------------------------


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


# --- the operator -----------------------------------------------------------------------------


def _window_grace(b: InternalBuilder, node: str) -> int:
    """How long after a window's end its result can still change, for the windowed aggregation
    `node` derives from (Kafka's `GraphGraceSearchUtil.findAndVerifyWindowGrace`): the grace,
    plus the gap for sessions; the largest over several parents."""
    from kstream.dsl.windowed_processors import _WindowedAggregate

    nodes = b.topology.nodes
    d = nodes.get(node)
    factory = getattr(d, "factory", None)
    cls = getattr(factory, "processor_class", None)
    if isinstance(cls, type) and issubclass(cls, _WindowedAggregate):
        for a in getattr(factory, "processor_args", ()):
            if isinstance(a, SessionWindows):
                return a.grace_ms + a.gap_ms  # a session can grow until end + gap
            if isinstance(a, TimeWindows | SlidingWindows):
                return a.grace_ms
    # every other node is walked through, as Kafka's graph search does (a cogroup's merge
    # node has no processor class of its own)
    parents = [p for p in getattr(d, "parents", ()) if p in nodes]
    if d is None or not parents:
        raise TopologyError(
            "suppress(Suppressed.until_window_closes(...)): window close time is only defined "
            f"for windowed aggregations; {node!r} is not one (use until_time_limit for others)"
        )
    return max(_window_grace(b, p) for p in parents)


def suppress(table: KTable, suppressed: Suppressed) -> KTable:
    """What `KTable.suppress(suppressed)` returns (see the module docstring).

    Example:
        >>> from kstream.dsl import StreamBuilder
        >>> from kstream.dsl.suppress import BufferConfig, Suppressed, suppress
        >>> from kstream.dsl.windows import TimeWindows
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> counts = b.stream("in", "string", "string").group_by_key().windowed_by(
        ...     TimeWindows.of(10, grace=0)).count()
        >>> final = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
        >>> final.to_stream(lambda w, v: f"{w.key}@{w.start}").to("out", "string", "long")
        >>> with TopologyTestDriver(b) as d:
        ...     src = d.input_topic("in", "string", "string")
        ...     for k, ts in [("a", 1), ("a", 2), ("b", 3), ("a", 11), ("a", 25)]:
        ...         src.pipe(k, "x", timestamp=ts)
        ...     d.output_topic("out", "string", "long").read_key_values()
        [('a@0', 2), ('b@0', 1), ('a@10', 1)]
    """
    from kstream.dsl.table import KTable

    if not isinstance(suppressed, Suppressed):
        raise TopologyError(f"suppress needs a Suppressed, got {suppressed!r}")
    if versioned_upstream(table._getter):
        # Kafka refuses it when the topology is built (InternalStreamsBuilder): a suppress
        # buffer keeps one update per key, not a versioned table's history
        raise TopologyError(
            f"suppress() of table {table._node!r}: suppress() is only supported for "
            "non-versioned KTables (note that version semantics might be inherited from "
            "upstream: a filter, map_values or transform_values without a store of its own "
            "keeps a versioned table versioned)"
        )
    b = table._builder
    wait = (
        _window_grace(b, table._node)
        if suppressed.time_limit_ms is None
        else suppressed.time_limit_ms
    )
    # a given name takes no index (KTableImpl.suppress names it without NamedInternal)
    node = suppressed.name or b.name(OP, None, prefix="KTABLE")
    store = (
        f"{suppressed.name}-store"
        if suppressed.name is not None
        else b.store_name(OP, None, prefix="KTABLE")
    )
    ks = table._key_serde or AUTO
    vs = table._value_serde or AUTO
    spec = b.store_spec(
        store,
        OP,
        kind="key_value",
        key_serde="bytes",
        value_serde="bytes",
        changelog=suppressed.buffer.logging,
    )
    factory = processor_factory(SuppressProcessor, spec.name, node, ks, vs, suppressed, wait)
    b.processor(node, factory, table._node)
    b.add_store(spec, [node])
    getter = SuppressedValueGetter(spec.name, ks, vs, table._getter)
    return KTable(b, node, table._key_serde, table._value_serde, getter)
