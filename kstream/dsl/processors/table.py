"""The table operators' processors: a table's source (and a global table's), filter,
map_values and to_stream, and the flag that tells a table operator to send old values.

Split from `kstream.dsl.processors` (the stream operators' processors, which these build on).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, Change, same_kind
from kstream.dsl.processors.cache import cached_forwarding
from kstream.records import Record, derive
from kstream.topology.processor import ProcessorContext, ProcessorFactory, as_processor


class MaterializedOnDemand:
    """Whether a table whose store kstream keeps for itself (a source table or `to_table`
    without a store name, a foreign-key join's result without `materialized=`) is one Kafka
    materializes on demand, and so forwards through its caching store (`KTableSource` with a
    queryable name). Kafka materializes such a table when an operator below forces old values
    (a table-table join, a `group_by`, a suppress: `enableSendingOldValues(true)`, which the
    builder signals by switching `enabled` on, as for a filter's `SendOldValues`) or when
    another node reads it (a join's value getter: `valueGetterSupplier()` materializes it;
    `InternalBuilder.connect` switches `enabled` on). An unmaterialized Kafka table has no
    store, hence no cache: every update is forwarded. Asked when the processor starts, after
    the topology is complete, and, during the build, by a filter made below the table
    (`KTable._old_values_now`).

    `enabled` is whether the store is described: added undescribed (`described=False`), it
    shows in `describe()` once materialized, as Kafka adds the store to its topology only
    then."""

    def __init__(self, node: str, store: str, topology: Any) -> None:
        self.node = node
        self.store = store
        self._users: Mapping[str, list[str]] = topology.store_users  # store -> processors
        self._undescribed: set[str] = topology.undescribed_stores

    @property
    def enabled(self) -> bool:
        return self.store not in self._undescribed

    @enabled.setter
    def enabled(self, on: bool) -> None:
        if on:
            self._undescribed.discard(self.store)

    def materialized(self) -> bool:
        return self.enabled or any(u != self.node for u in self._users.get(self.store, ()))


class TableSourceProcessor(BuiltinProcessor):
    """Materializes a stream of upserts (None = delete) into a store; emits `Change`s.

    Its updates go through the record cache when it is on, unless `on_demand` says Kafka
    would not materialize the table (see `MaterializedOnDemand`; None: named, always)."""

    def __init__(self, store: str, on_demand: MaterializedOnDemand | None = None) -> None:
        self.store_name = store
        self.on_demand = on_demand

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        kafkas = self.on_demand is None or self.on_demand.materialized()
        self.cached = cached_forwarding(self.store, ctx) if kafkas else None

    def process_batch(self, records: Sequence[Record]) -> None:
        store, task, on_error = self.store, self.task, self.ctx.on_error
        out: list[Record] = []
        emit = out.append if self.cached is None else self.cached
        for r in records:
            k = r.key
            if k is None:
                self.ctx.record_dropped("null_key", r)
                continue
            if task is not None:
                task.current = r
            try:
                old = store.get(k)
                store.put(k, r.value)
            except Exception as e:
                on_error(e, r)
                continue
            emit(r.with_value(Change(r.value, old)))
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)


class GlobalTableProcessor(BuiltinProcessor):
    """Keeps a global store equal to its topic (upserts, None deletes)."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        put, task = self.store.put, self.task
        for r in records:
            if r.key is None:
                self.ctx.record_dropped("null_key", r)
            else:
                if task is not None:
                    task.current = r
                put(r.key, r.value)
        if task is not None:
            task.current = None


class SendOldValues:
    """Whether a table filter's consumers need old values (Kafka's `sendOldValues`).

    Kafka's KTableFilter forwards `Change(null, null)` for an update that does not match,
    which `to_stream` turns into a tombstone, unless the table above it is materialized or a
    consumer needs old values (a re-grouping, a table-table join): then an update invisible
    before and after is not forwarded at all. The DSL switches this on when the filter is made
    below a table materialized by then (`KTable._old_values_now`: named, or materialized on
    demand by a join or an operator needing old values made earlier) or such a consumer is
    added below it.
    """

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = False


class TableFilterProcessor(BuiltinProcessor):
    """Filters a table: a key that stops matching is deleted downstream.

    An update that is not visible before or after is forwarded as a delete only while no
    consumer needs old values (see `SendOldValues`; None: never forwarded), and always below a
    versioned table (`versioned`: Kafka's `KTableFilter` with versioned semantics). With
    `store` (a `materialized=` filter, Kafka's `KTableFilter` with a queryable name) the result
    is also kept there, and the old value forwarded is the one stored, not the parent's;
    its updates then go through the record cache when it is on (`cached_forwarding`, as Kafka's
    `KTableFilter` forwards through a `TimestampedTupleForwarder`), which also drops a delete
    of a key the store never held. Without a store, an update marked `NotLatest` stays marked.
    """

    def __init__(
        self,
        predicate: Callable[[Any, Any], Any],
        negate: bool = False,
        old_values: SendOldValues | None = None,
        store: str | None = None,
        versioned: bool = False,
    ) -> None:
        self.predicate = predicate
        self.negate = negate
        self.old_values = old_values
        self.store_name = store
        self.versioned = versioned

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.send_old = self.old_values is None or self.old_values.enabled
        self.quiet = self.send_old and not self.versioned
        self.store = None if self.store_name is None else ctx.get_store(self.store_name)
        self.cached = (
            None if self.store is None else cached_forwarding(self.store, ctx, self.send_old)
        )

    def process_batch(self, records: Sequence[Record]) -> None:
        pred, neg, on_error = self.predicate, self.negate, self.ctx.on_error
        quiet, send_old, store, cached = self.quiet, self.send_old, self.store, self.cached
        # cached: the cache gets the stored old value even when none is sent (it masks it)
        read_old = send_old or cached is not None
        out: list[Record] = []
        emit = out.append if cached is None else cached
        for r in records:
            change = r.value
            new, old = change
            k = r.key
            try:
                if new is not None and (bool(pred(k, new)) is neg):
                    new = None
                if store is not None:
                    old = store.get(k) if read_old else None
                elif old is not None and (bool(pred(k, old)) is neg):
                    old = None
            except Exception as e:
                on_error(e, r)
                continue
            if new is None and old is None and quiet:
                continue
            if store is not None:
                if _put(self, store, r, new):
                    emit(r.with_value(Change(new, old)))
                continue
            out.append(r.with_value(same_kind(change, new, old)))
        self.ctx.forward_batch(out)


def _put(proc: BuiltinProcessor, store: Any, r: Record, value: Any) -> bool:
    """Write a materialized table operator's result for `r`'s key (None deletes), with `r`
    as the write's provenance; False when the store refused (reported to the error handler)."""
    task = proc.task
    if task is not None:
        task.current = r
    try:
        store.put(r.key, value)
    except Exception as e:
        proc.ctx.on_error(e, r)
        return False
    finally:
        if task is not None:
            task.current = None
    return True


class TableMapValuesProcessor(BuiltinProcessor):
    """`KTable.map_values`: `fn` on the new and old values (never on None).

    With `store` (a `materialized=` map_values) the result is also kept there and, as Kafka's
    `KTableMapValues` with a queryable name, the old value forwarded is the stored one, sent
    only while a consumer needs old values (`old_values`), else None; the updates go through
    the record cache when it is on (`cached_forwarding`).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        with_key: bool = False,
        store: str | None = None,
        old_values: SendOldValues | None = None,
    ) -> None:
        self.fn = fn
        self.with_key = with_key  # fn(key, value), Kafka's ValueMapperWithKey
        self.store_name = store
        self.old_values = old_values

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = None if self.store_name is None else ctx.get_store(self.store_name)
        self.send_old = self.old_values is not None and self.old_values.enabled
        self.cached = (
            None if self.store is None else cached_forwarding(self.store, ctx, self.send_old)
        )

    def process_batch(self, records: Sequence[Record]) -> None:
        fn, on_error, store, cached = self.fn, self.ctx.on_error, self.store, self.cached
        # with a key: `fn(key, value)` through a partial per record (a cold path)
        keyed = functools.partial if self.with_key else None
        # cached: the cache gets the stored old value even when none is sent (it masks it)
        read_old = self.send_old or cached is not None
        out: list[Record] = []
        emit = out.append if cached is None else cached
        for r in records:
            new, old = r.value
            try:
                f = fn if keyed is None else keyed(fn, r.key)
                if store is None:
                    ch = same_kind(
                        r.value,
                        None if new is None else f(new),
                        None if old is None else f(old),
                    )
                else:
                    ch = Change(
                        None if new is None else f(new),
                        store.get(r.key) if read_old else None,
                    )
            except Exception as e:
                on_error(e, r)
                continue
            if store is None:
                out.append(r.with_value(ch))
            elif _put(self, store, r, ch.new):
                emit(r.with_value(ch))
        self.ctx.forward_batch(out)


class TableToStreamProcessor(BuiltinProcessor):
    """A table's updates as a stream: the new value, None for a delete (a tombstone).

    The updates of an aggregation reach it as records made for it alone (`owns_input`, when
    the aggregation forwards to it only): each is changed in place, not copied."""

    forwards = "new"

    def __init__(self) -> None:
        self.owns_input = False

    def process_batch(self, records: Sequence[Record]) -> None:
        if self.owns_input:
            for r in records:
                r.value = r.value[0]
            self.ctx.forward_batch(list(records))
            return
        self.ctx.forward_batch([derive(r, r.key, r.value[0]) for r in records])


class _StoringContext:
    """The context the wrapped node sees: forwarding a `Change` first writes its new value."""

    def __init__(self, ctx: ProcessorContext, owner: MaterializingProcessor) -> None:
        self._ctx = ctx
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def forward(self, record: Record, to: str | None = None) -> None:
        self.forward_batch([record], to)

    def forward_batch(self, records: list[Record], to: str | None = None) -> None:
        out = self._owner.store_all(records)
        if out:  # none when the record cache holds them back
            self._ctx.forward_batch(out, to)


class MaterializingProcessor(BuiltinProcessor):
    """Runs a table node's processor and keeps the table it emits in `store` (Kafka's
    `KTableKTableJoinMerger` with a queryable name): each `Change`'s new value is written
    (None deletes) before the change is forwarded. With the record cache on, the changes go
    to the cache instead, each with the value the store held before its write as old value
    (the merger's `TimestampedTupleForwarder`: a flush forwards the store's values, not the
    join's old ones); the merge sends old values, as it does uncached."""

    def __init__(self, factory: ProcessorFactory, store: str, node: str) -> None:
        self.inner = as_processor(factory(), node)
        self.store_name = store

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)
        self.cached = cached_forwarding(self.store, ctx)
        self.inner.init(_StoringContext(ctx, self))

    def process_batch(self, records: Sequence[Record]) -> None:
        self.inner.process_batch(list(records))

    def store_all(self, records: list[Record]) -> list[Record]:
        """Write `records`' new values; returns those to forward now (none when cached)."""
        store, task, on_error, cached = self.store, self.task, self.ctx.on_error, self.cached
        out = []
        for r in records:
            ch = r.value
            new = ch.new if isinstance(ch, Change) else ch
            if task is not None:
                task.current = r
            try:
                stored = None if cached is None else store.get(r.key)
                store.put(r.key, new)
            except Exception as e:
                on_error(e, r)
                continue
            finally:
                if task is not None:
                    task.current = None
            if cached is None:
                out.append(r)
            else:
                cached(r.with_value(Change(new, stored)))
        return out

    def close(self) -> None:
        self.inner.close()
