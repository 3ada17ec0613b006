"""The processors of versioned tables (KIP-889/914; kstream.dsl.versioned says what changes
against a plain table): the source putting each update at its timestamp, and the getter
reading a table as of a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, Change, NotLatest
from kstream.dsl.processors.getter import ValueGetter
from kstream.records import Record
from kstream.state.versioned import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED
from kstream.topology.processor import ProcessorContext


class VersionedValueGetter(ValueGetter):
    """Reads a versioned table: the latest value (`bind`, for table-table joins and lookups
    that want the current value) or the value as of a time (`bind_as_of`, for stream-table
    joins). Transforms of filters and `map_values` above the table apply to either."""

    def __init__(
        self,
        store: str,
        history_retention: int,
        transforms: tuple[Callable[[Any, Any], Any], ...] = (),
    ) -> None:
        super().__init__(store, transforms)
        self.history_retention = history_retention

    def then(self, fn: Callable[[Any, Any], Any]) -> ValueGetter:
        return VersionedValueGetter(self.store, self.history_retention, (*self.transforms, fn))

    def bind(self, ctx: ProcessorContext) -> Callable[[Any], Any]:
        get = self.bind_as_of(ctx)
        return lambda key: get(key, None)

    def bind_as_of(self, ctx: ProcessorContext) -> Callable[[Any, int | None], Any]:
        """`get(key, as_of) -> value | None` (`as_of` None: the latest value)."""
        read = ctx.get_store(self.store).get
        fns = self.transforms

        def value(key: Any, as_of: int | None) -> Any:
            found = read(key) if as_of is None else read(key, as_of)
            v = None if found is None else found.value
            for fn in fns:
                if v is None:
                    return None
                v = fn(key, v)
            return v

        return value


class VersionedTableSourceProcessor(BuiltinProcessor):
    """Kafka's `KTableSource` over a versioned store: puts each update at its timestamp and
    forwards `Change(new, old latest)`, a `NotLatest` when the update went into history only
    (older than the key's latest version). An update older than history retention is not put,
    and not forwarded."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        store, task, on_error, dropped = (
            self.store,
            self.task,
            self.ctx.on_error,
            self.ctx.record_dropped,
        )
        out = []
        for r in records:
            k = r.key
            if k is None:
                dropped("null_key", r)
                continue
            if task is not None:
                task.current = r
            try:
                old = store.get(k)
                code = store.put(k, r.value, r.timestamp)
            except Exception as e:
                on_error(e, r)
                continue
            if code == PUT_RETURN_CODE_NOT_PUT:
                dropped("late_record", r)
                continue
            change = Change if code == PUT_RETURN_CODE_VALID_TO_UNDEFINED else NotLatest
            out.append(r.with_value(change(r.value, None if old is None else old.value)))
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)


def as_of_getter(getter: ValueGetter, ctx: ProcessorContext) -> Callable[[Any, int], Any] | None:
    """`get(key, as_of)` when `getter` reads a versioned table (None otherwise)."""
    if isinstance(getter, VersionedValueGetter):
        return getter.bind_as_of(ctx)
    return None
