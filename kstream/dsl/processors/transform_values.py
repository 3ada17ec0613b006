"""`KTable.transform_values`' processor and value getter (kstream.dsl.transform_values says
what a transformer sees)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor, Change, same_kind
from kstream.dsl.processors.cache import cached_forwarding
from kstream.dsl.processors.getter import ValueGetter
from kstream.dsl.processors.table import SendOldValues
from kstream.dsl.transform_values import TransformerFactory
from kstream.errors import TopologyError
from kstream.records import Record
from kstream.topology.processor import ProcessorContext


class _ForwardingDisabled:
    """The context a transformer sees: the node's, but forwarding is refused (Kafka's
    `ForwardingDisabledProcessorContext`): its result is what `transform` returns."""

    def __init__(self, ctx: ProcessorContext) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def forward(self, *args: Any, **kwargs: Any) -> None:
        raise TopologyError(
            "transform_values: a value transformer cannot forward records; return the new "
            "value from transform(key, value)"
        )

    forward_batch = forward


def _init(transformer: Any, ctx: ProcessorContext) -> None:
    init = getattr(transformer, "init", None)
    if init is not None:
        init(_ForwardingDisabled(ctx))


class TableTransformValuesProcessor(BuiltinProcessor):
    """Applies a transformer to each `Change`: `Change(transform(k, new), transform(k, old))`,
    the old one only while old values are wanted; with `store`, the result is kept there, the
    old value forwarded is the stored one (Kafka's materialized `transformValues`) and the
    updates go through the record cache when it is on (`cached_forwarding`)."""

    def __init__(
        self,
        factory: TransformerFactory,
        old_values: SendOldValues,
        store: str | None = None,
    ) -> None:
        self.transformer: Any = factory()
        if not callable(getattr(self.transformer, "transform", None)):
            raise TypeError(
                f"transform_values: the factory returned {self.transformer!r}, which has no "
                "transform(key, value) method"
            )
        self.old_values = old_values
        self.store_name = store

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = None if self.store_name is None else ctx.get_store(self.store_name)
        self.send_old = self.old_values.enabled
        self.cached = (
            None if self.store is None else cached_forwarding(self.store, ctx, self.send_old)
        )
        _init(self.transformer, ctx)

    def process_batch(self, records: Sequence[Record]) -> None:
        transform, on_error, store = self.transformer.transform, self.ctx.on_error, self.store
        send_old, task, cached = self.send_old, self.task, self.cached
        # cached: the cache gets the stored old value even when none is sent (it masks it)
        read_old = send_old or cached is not None
        out: list[Record] = []
        emit = out.append if cached is None else cached
        for r in records:
            new, old = r.value
            k = r.key
            if task is not None:
                task.current = r  # the transformer's store writes take this provenance
            try:
                nv = transform(k, new)
                if store is not None:
                    ov = store.get(k) if read_old else None
                elif send_old:
                    ov = transform(k, old)
                else:
                    ov = None
                if store is not None:
                    store.put(k, nv)
            except Exception as e:
                on_error(e, r)
                continue
            finally:
                if task is not None:
                    task.current = None
            if store is None:
                out.append(r.with_value(same_kind(r.value, nv, ov)))
            else:
                emit(r.with_value(Change(nv, ov)))
        self.ctx.forward_batch(out)

    def close(self) -> None:
        close = getattr(self.transformer, "close", None)
        if close is not None:
            close()


class TransformedValueGetter(ValueGetter):
    """Reads a non-materialized `transform_values` table: the parent's value through a
    transformer of the getter's own (Kafka's `KTableTransformValuesGetter`), which also sees
    None; filters and map_values above it are applied first, later ones after."""

    def __init__(
        self,
        parent: ValueGetter,
        factory: TransformerFactory,
        stores: tuple[str, ...],
        transforms: tuple[Callable[[Any, Any], Any], ...] = (),
    ) -> None:
        super().__init__(parent.store, transforms)
        self.parent = parent
        self.factory = factory
        self.own_stores = stores

    @property
    def stores(self) -> tuple[str, ...]:
        return (*self.parent.stores, *self.own_stores)

    def then(self, fn: Callable[[Any, Any], Any]) -> ValueGetter:
        return TransformedValueGetter(
            self.parent, self.factory, self.own_stores, (*self.transforms, fn)
        )

    def bind(self, ctx: ProcessorContext) -> Callable[[Any], Any]:
        get = self.parent.bind(ctx)
        transformer: Any = self.factory()
        _init(transformer, ctx)
        transform = transformer.transform
        fns = self.transforms

        def value(key: Any) -> Any:
            v = transform(key, get(key))
            for fn in fns:
                if v is None:
                    return None
                v = fn(key, v)
            return v

        return value
