"""`KStream.deduplicate`'s processor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor
from kstream.records import Record
from kstream.topology.processor import ProcessorContext


class DeduplicateProcessor(BuiltinProcessor):
    """Forwards a record unless the dedup store already holds its id within retention."""

    def __init__(self, store: str, id_fn: Callable[[Any, Any], Any] | None) -> None:
        self.store_name = store
        self.id_fn = id_fn
        self.dropped_duplicates = 0

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.store = ctx.get_store(self.store_name)

    def process_batch(self, records: Sequence[Record]) -> None:
        id_fn, task, on_error = self.id_fn, self.task, self.ctx.on_error
        check = self.store.check_and_mark
        out = []
        for r in records:
            try:
                id_ = r.key if id_fn is None else id_fn(r.key, r.value)
            except Exception as e:
                on_error(e, r)
                continue
            if id_ is None:
                out.append(r)
                continue
            if task is not None:
                task.current = r
            try:
                new = check(id_, r.timestamp)
            except Exception as e:
                on_error(e, r)
                continue
            if new:
                out.append(r)
            else:
                self.dropped_duplicates += 1
        if task is not None:
            task.current = None
        self.ctx.forward_batch(out)
