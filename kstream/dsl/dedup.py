"""`KStream.deduplicate`: drop records whose id was already seen recently.

The ids live in a dedup store (id -> first-seen time, changelogged like any store), so the
filter survives restarts and rebalances. A record is dropped when its id was first seen at most
`within` before the newest timestamp the operator has seen; otherwise it is kept and its time
becomes the id's first-seen time. For a time-ordered stream that is simply "duplicates less
than `within` after the first occurrence are dropped". A record whose id is None is kept and
not remembered.

Only the id decides, so equal ids must reach the same task: when the id is the record key and
the key was changed upstream, the stream is repartitioned first. An id taken from the value is
the caller's to co-partition (key the stream by it, or by something it depends on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.dsl.graph import StoreLike, processor_factory
from kstream.dsl.handles import StreamT
from kstream.dsl.processors.dedup import DeduplicateProcessor
from kstream.duration import DurationLike, duration
from kstream.errors import TopologyError

OP = "DEDUPLICATE"


def deduplicate(
    stream: StreamT,
    id_fn: Callable[[Any, Any], Any] | None,
    within: DurationLike | None,
    store: StoreLike,
    name: str | None = None,
) -> StreamT:
    """What `KStream.deduplicate(id_fn=None, within=..., store=None)` builds (see the module
    docstring); `within` may be left out when `store` is a dedup spec with a retention."""
    if id_fn is not None and not callable(id_fn):
        raise TopologyError(f"deduplicate: id_fn must be callable(key, value), got {id_fn!r}")
    given = getattr(store, "retention", None) if store is not None else None
    if within is None and given is None:
        raise TopologyError(
            "deduplicate needs within=<duration> (how long an id is remembered), "
            'e.g. deduplicate(within="10m")'
        )
    ms = given if within is None else duration(within, name="deduplicate within")
    if ms is None or ms <= 0:
        raise TopologyError(f"deduplicate: within must be > 0, got {within!r}")
    if given is not None and given != ms:
        raise TopologyError(
            f"deduplicate: store {getattr(store, 'name', store)!r} has retention {given} ms "
            f"but within is {ms} ms; give one of them (or make them equal)"
        )
    b = stream._builder
    node = b.name(OP, name)
    spec = b.store_spec(store, OP, kind="dedup", retention=ms)
    parent = stream._node
    repartitioned = False
    if id_fn is None and stream._repartition_required:
        parent = stream._ensure_partitioned(spec.name)
        repartitioned = True
    b.processor(node, processor_factory(DeduplicateProcessor, spec.name, id_fn), parent)
    b.add_store(spec, [node])
    return type(stream)(
        b,
        node,
        stream._key_serde,
        stream._value_serde,
        stream._repartition_required and not repartitioned,
    )
