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
"""Called once per task; returns a `Processor`, or any object with `process(record)` (and
optionally `init(ctx)`, `close()` and `process_batch(records)`)."""


class _UserProcessor(Processor):
    """Runs an object that has the processor methods without subclassing `Processor`.

    The public contract is the methods, not the base class, so duck-typed processors are
    adapted here once, when the task is built, rather than checked on every record.
    """

    def __init__(self, user: Any) -> None:
        self.user = user
        # An instance attribute: the node calls the user's method with no extra frame.
        self.process = user.process  # type: ignore[method-assign]

    def init(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        init = getattr(self.user, "init", None)
        if callable(init):
            init(ctx)

    def close(self) -> None:
        close = getattr(self.user, "close", None)
        if callable(close):
            close()


class _UserBatchProcessor(_UserProcessor):
    """A duck-typed processor that also brings its own `process_batch`."""

    def process_batch(self, records: Sequence[Record]) -> None:
        self.user.process_batch(records)


def as_processor(obj: Any, name: str) -> Processor:
    """`obj` as a `Processor`; raises `TopologyError` naming the node when it cannot be one."""
    if isinstance(obj, Processor):
        return obj
    if not callable(getattr(obj, "process", None)):
        from kstream.errors import TopologyError

        raise TopologyError(
            f"processor {name!r}: its factory returned {obj!r}, which has no process(record) "
            "method (a processor needs process; init(ctx) and close() are optional)"
        )
    if callable(getattr(obj, "process_batch", None)):
        return _UserBatchProcessor(obj)
    return _UserProcessor(obj)


def overrides_batch(processor: Processor) -> bool:
    """True when the processor implements its own `process_batch`."""
    return type(processor).process_batch is not Processor.process_batch
