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

from kstream.dsl.graph import AUTO, InternalBuilder, processor_factory
from kstream.dsl.handles import TableT
from kstream.dsl.processors.suppress import SuppressedValueGetter, SuppressProcessor
from kstream.dsl.processors.windowed import _WindowedAggregate
from kstream.dsl.suppressed import (
    BufferConfig,
    BufferFullError,
    BufferFullStrategy,
    Suppressed,
)
from kstream.dsl.versioned import versioned_upstream
from kstream.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kstream.errors import TopologyError

__all__ = ["BufferConfig", "BufferFullError", "BufferFullStrategy", "Suppressed", "suppress"]

OP = "SUPPRESS"


# --- the buffer's stored form -----------------------------------------------------------------


# --- the processor ----------------------------------------------------------------------------


# --- the operator -----------------------------------------------------------------------------


def _window_grace(b: InternalBuilder, node: str) -> int:
    """How long after a window's end its result can still change, for the windowed aggregation
    `node` derives from (Kafka's `GraphGraceSearchUtil.findAndVerifyWindowGrace`): the grace,
    plus the gap for sessions; the largest over several parents."""
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


def suppress(table: TableT, suppressed: Suppressed) -> TableT:
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
    return type(table)(b, node, table._key_serde, table._value_serde, getter)
