"""What every built-in processor shares: the `BuiltinProcessor` base class and the `Change`
values table operators exchange.

Each processor works a list at a time (`process_batch`), calls user functions inside a
per-record `try` (free in Python 3.11 until something raises) and reports failures through
`ctx.on_error`, which raises or lets the record be skipped. None of them modifies a record it
received.

Table operators exchange `Change(new, old)` values: `old` is the previous value of the key
(None if absent), `new` the value now (None = deleted). Carrying the old value lets filters
emit a delete only when the key was visible before, and lets grouped tables subtract it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

from kstream.records import Record
from kstream.topology.processor import Processor, ProcessorContext


class Change(NamedTuple):
    """A table update: the key's new value and its old one (None = absent)."""

    new: Any
    old: Any


class NotLatest(Change):
    """An update of a versioned table older than its key's latest version (Kafka's
    `Change.isLatest == false`, KIP-914): it went into the store's history only. Filters,
    `map_values` and `transform_values` keep the mark (an unmaterialized result is still that
    update), `to_stream` lets it through; table-table and foreign-key joins and regroupings
    drop it, as the latest value did not change (kstream.dsl.versioned).

    Example:
        >>> from kstream.testing import TopologyTestDriver
        >>> b = StreamBuilder()
        >>> prices = b.table("prices", "string", "long", versioned="1h")
        >>> prices.to_stream().to("changes", "string", "long")
        >>> with TopologyTestDriver(b) as d:
        ...     src = d.input_topic("prices", "string", "long")
        ...     src.pipe("apple", 3, timestamp=30)
        ...     src.pipe("apple", 2, timestamp=20)  # older than the latest: history only
        ...     out = d.output_topic("changes", "string", "long")
        ...     [(r.value, r.timestamp) for r in out.read_records()]
        [(3, 30), (2, 20)]
        >>> NotLatest(2, 3)
        NotLatest(new=2, old=3)
    """

    __slots__ = ()


def same_kind(change: Change, new: Any, old: Any) -> Change:
    """`Change(new, old)`, a `NotLatest` when `change` is one: the result of an operator that
    keeps the mark of the update it transformed.

    Example:
        >>> same_kind(NotLatest("b", "a"), "B", "A")
        NotLatest(new='B', old='A')
        >>> same_kind(Change("b", "a"), "B", "A")
        Change(new='B', old='A')
    """
    return NotLatest(new, old) if type(change) is NotLatest else Change(new, old)


def _tuple_new(cls: type) -> Callable[[tuple[Any, ...]], Any]:
    return functools.partial(tuple.__new__, cls)


# `new_change((new, old))` == `Change(new, old)` without the Python-level __new__ (hot paths)
new_change: Callable[[tuple[Any, Any]], Change] = _tuple_new(Change)


def without(records: Sequence[Record], bad: set[int] | None) -> list[Record]:
    """`records` but those whose `id` is in `bad` (the ones that failed)."""
    return list(records) if bad is None else [r for r in records if id(r) not in bad]


class BuiltinProcessor(Processor):
    """Keeps `ctx` and the task (whose `current` record stores use for provenance).

    `forwards` tells the task what a processor hands on (see `Task`, which works out from it
    whose records are whose): "new" records it made, the "given" ones it received, or None
    (anything, e.g. records it also keeps). A processor that can change its input records in
    place has `owns_input`, which the task sets when the records reach it through nobody else.
    """

    task: Any
    forwards: ClassVar[str | None] = None
    #: True only for a built-in operator that keeps nothing between records (no store, no
    #: state of its own), so an engine may run it in any batch anywhere: the Spark engine runs
    #: a sub-topology of only such processors without Spark state
    stateless: ClassVar[bool] = False

    def init(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self.task = getattr(ctx, "task", None)

    def process(self, record: Record) -> None:
        self.process_batch([record])
