"""The windowed aggregate processors of a cogroup (KIP-150): one per input, sharing the
cogroup's stores, each with a stream time of its own."""

from __future__ import annotations

from typing import Any

from kstream.dsl.processors.windowed import (
    SessionWindowAggregateProcessor,
    SlidingWindowAggregateProcessor,
    TimeWindowAggregateProcessor,
)


class _PerInputTime:
    """Mixin for a windowed aggregate processor that shares its stores with the other inputs
    of a cogroup: its stream time is its own (Kafka keeps `observedStreamTime` per processor),
    saved under its input's index in the shared stream-time store."""

    time_key: int = 0
    time_store: Any
    observed: int
    record_time: int
    emitted_close: int | None
    _saved: Any
    _anchor: Any

    def _load_time(self) -> Any:
        saved = self.time_store.get(self.time_key)
        if saved is not None:
            self.observed, self.record_time, self.emitted_close = saved[:3]
        else:
            self.observed, self.record_time, self.emitted_close = -1, -1, None
        self._saved = None if saved is None else tuple(saved)
        self._anchor = None
        return saved

    def _save_time(self) -> None:
        state = (self.observed, self.record_time, self.emitted_close, 2)
        if state != self._saved:
            self.time_store.put(self.time_key, state)
            self._saved = state


class CogroupTimeWindowAggregateProcessor(_PerInputTime, TimeWindowAggregateProcessor):
    """One cogroup input of a time-windowed cogroup (`KStreamWindowAggregate` per input)."""

    def __init__(self, time_key: int, *args: Any) -> None:
        TimeWindowAggregateProcessor.__init__(self, *args)
        self.time_key = time_key


class CogroupSlidingWindowAggregateProcessor(_PerInputTime, SlidingWindowAggregateProcessor):
    """One cogroup input of a sliding-window cogroup (`KStreamSlidingWindowAggregate`)."""

    def __init__(self, time_key: int, *args: Any) -> None:
        SlidingWindowAggregateProcessor.__init__(self, *args)
        self.time_key = time_key


class CogroupSessionWindowAggregateProcessor(_PerInputTime, SessionWindowAggregateProcessor):
    """One cogroup input of a session-window cogroup (`KStreamSessionWindowAggregate`)."""

    def __init__(self, time_key: int, *args: Any) -> None:
        SessionWindowAggregateProcessor.__init__(self, *args)
        self.time_key = time_key
