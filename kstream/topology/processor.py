"""What user code implements (`Processor`) and what it is given (`ProcessorContext`).

A processor sees one record at a time through `process`. Built-in processors of the DSL also
override `process_batch`, which the execution core calls with a whole list: a loop inside one
method is much cheaper in Python than a call chain per record. The default `process_batch`
exists so a user processor can opt into batching by overriding it, never by accident.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kstream.records import Headers, Record

if TYPE_CHECKING:
    from kstream.duration import DurationLike


class PunctuationType(enum.StrEnum):
    """Which clock drives a punctuation.

    STREAM_TIME advances only with the timestamps of input records (deterministic, replays the
    same way); WALL_CLOCK follows the system clock (or the test driver's clock), so windows can
    close while no records arrive.
    """

    STREAM_TIME = "stream_time"
    WALL_CLOCK = "wall_clock"


PunctuationTypeLike = PunctuationType | Literal["stream_time", "wall_clock"]


class Cancellable(Protocol):
    """The handle returned by `ProcessorContext.schedule`."""

    def cancel(self) -> None: ...


class ProcessorContext(Protocol):
    """The view a processor has of its task: forwarding, stores, schedules, record metadata."""

    @property
    def app_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def topic(self) -> str | None: ...

    @property
    def partition(self) -> int | None: ...

    @property
    def offset(self) -> int | None: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def headers(self) -> Headers: ...

    @property
    def stream_time(self) -> int: ...

    def forward(self, record: Record, to: str | None = None) -> None: ...

    def forward_batch(self, records: list[Record], to: str | None = None) -> None: ...

    def get_store(self, name: str) -> Any: ...

    def schedule(
        self,
        interval: DurationLike,
        type: PunctuationTypeLike,
        callback: Callable[[int], None],
    ) -> Cancellable: ...

    def commit(self) -> None: ...

    def on_error(self, exc: BaseException, record: Record) -> None: ...

    def record_dropped(self, reason: str, record: Record | None = None) -> None:
        """Count (and log at debug) a record this processor drops on purpose.

        Nothing may vanish silently: a late record, an expired window or a null key that Kafka
        Streams also drops is counted in `kstream_records_dropped_total{reason=...}`.
        """
        ...


class Processor:
    """Base class of processors: override `process`, and `init`/`close` when needed.

    `init` receives the context; keep it if you forward or use stores. The base `init` stores
    it as `self.ctx`, so subclasses that call `super().init(ctx)` get that for free.
    """

    ctx: ProcessorContext

    def init(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx

    def process(self, record: Record) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement process(record)")

    def process_batch(self, records: Sequence[Record]) -> None:
        """Process a list of records; override for speed (built-ins do).

        An override owns error reporting: call `self.ctx.on_error(exc, record)` for a record that
        failed (it raises, or returns when the record is to be skipped) and go on.
        """
        ctx = self.ctx
        process = self.process
        for r in records:
            try:
                process(r)
            except Exception as e:
                ctx.on_error(e, r)

    def close(self) -> None:
        pass


ProcessorFactory = Callable[[], Processor]


def overrides_batch(processor: Processor) -> bool:
    """True when the processor implements its own `process_batch`."""
    return type(processor).process_batch is not Processor.process_batch
