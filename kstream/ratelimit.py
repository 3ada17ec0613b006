"""At most one log line per interval and key, with a count of the ones held back.

A condition that repeats with every record or every loop turn (a far-future timestamp on a
busy partition, librdkafka's failed connection attempts) would otherwise flood the log with the
same line and bury the rest; one line an interval, saying how many were held back since the
last, keeps the news and the volume. The one limiter of the package: the stream time watch and
the librdkafka log filter both use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable


class RateLimiter:
    """Lets one event per `interval` seconds through for each key.

    `clock` is `time.monotonic` (a wall clock that steps back would silence a key for good);
    tests pass their own.
    """

    __slots__ = ("_clock", "_held", "_last", "interval", "max_keys")

    def __init__(
        self,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int | None = None,
    ) -> None:
        """`max_keys` bounds the keys remembered (the least recently let through go first),
        for keys that come from outside, such as log messages."""
        if interval < 0:
            raise ValueError(f"interval must not be negative, got {interval!r}")
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        self._last: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def last_allowed(self, key: Hashable) -> float | None:
        """When an event of `key` last went through (the clock's time), or None."""
        return self._last.get(key)

    def allow(self, key: Hashable, n: int = 1) -> int | None:
        """None if an event of `key` went through less than `interval` ago (this one, which
        stands for `n` occurrences, is held back and counted); otherwise the number of
        occurrences held back since the last event that went through (0 for the first), and
        this one goes through."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + n
            return None
        self._last.pop(key, None)
        self._last[key] = now  # last in insertion order: the most recently let through
        if self.max_keys is not None:
            while len(self._last) > self.max_keys:
                oldest = next(iter(self._last))
                del self._last[oldest]
                self._held.pop(oldest, None)
        return self._held.pop(key, 0)
