"""`KStream.process_values`: a user's processor run on values only, its key fixed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstream.dsl.processors.base import BuiltinProcessor
from kstream.records import Record
from kstream.topology.processor import ProcessorContext, as_processor

_NO_KEY: Any = object()


class _FixedKeyContext:
    """The context a `process_values` processor sees: the real one, but forwarding checks that
    a record forwarded while an input record is processed keeps that record's key."""

    def __init__(self, ctx: ProcessorContext, owner: FixedKeyProcessor) -> None:
        self._ctx = ctx
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def forward(self, record: Record, to: str | None = None) -> None:
        self._owner.check_key(record)
        self._ctx.forward(record, to)

    def forward_batch(self, records: list[Record], to: str | None = None) -> None:
        for r in records:
            self._owner.check_key(r)
        self._ctx.forward_batch(records, to)


class FixedKeyProcessor(BuiltinProcessor):
    """Runs a user processor that may change values but not keys (`KStream.process_values`,
    Kafka's `FixedKeyProcessor`): a record forwarded with another key than the input's fails
    (through the error handler), so no repartition is needed downstream."""

    def __init__(self, factory: Callable[[], Any], node: str) -> None:

        self.user = as_processor(factory(), node)
        self.node = node
        self.key: Any = _NO_KEY

    def init(self, ctx: ProcessorContext) -> None:
        super().init(ctx)
        self.user.init(_FixedKeyContext(ctx, self))

    def check_key(self, record: Record) -> None:
        if self.key is not _NO_KEY and record.key != self.key:
            raise ValueError(
                f"process_values {self.node!r}: a record was forwarded with key {record.key!r} "
                f"for input key {self.key!r}; process_values keeps keys (use process to "
                "change them)"
            )

    def process_batch(self, records: Sequence[Record]) -> None:
        process, on_error = self.user.process, self.ctx.on_error
        try:
            for r in records:
                self.key = r.key
                try:
                    process(r)
                except Exception as e:
                    on_error(e, r)
        finally:
            self.key = _NO_KEY  # punctuations forward records kept from earlier inputs

    def close(self) -> None:
        self.user.close()
