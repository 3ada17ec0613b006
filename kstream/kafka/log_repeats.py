"""librdkafka's warnings and errors, at most one line per interval for each repeating message.

librdkafka logs every failed attempt to reach a broker, from every client: against a closed
port an app's clients printed ~19 identical `Connect to ... failed: Connection refused` ERROR
lines a second, ~194 before the one line that says what is wrong (the broker did not answer
within connect_timeout), and as many for as long as a broker is down later on. A repeat of a
line logged less than `REPEAT_INTERVAL_S` ago is held back and counted; the next one logged
says how many were held back. Messages are compared without what changes from one attempt to
the next (the client's name, `after 3ms`, librdkafka's own `N identical error(s) suppressed`),
so the same failure from the admin client, the producer and the consumer counts as one.

Only WARNING and above are limited: DEBUG lines (`kafka={"debug": ...}`) are asked for one by
one and pass untouched.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from kstream.ratelimit import RateLimiter

__all__ = ["REPEAT_INTERVAL_S", "RepeatFilter"]

REPEAT_INTERVAL_S = 10.0
"""At most one line per message this often: the default connect_timeout, so a broker that
does not answer at start-up is logged once before kstream's own line says so."""
_MAX_KEYS = 512
_VARYING = (
    (re.compile(r", \d+ identical error\(s\) suppressed"), ""),
    (re.compile(r"\b\d+(\.\d+)?ms\b"), "#ms"),
)


class RepeatFilter(logging.Filter):
    """A logger filter letting one record per message and `interval` through (see above)."""

    def __init__(
        self, interval: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka logs from its own threads
        self._limiter = RateLimiter(interval, clock, max_keys=_MAX_KEYS)

    @property
    def interval(self) -> float:
        return self._limiter.interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        self._limiter.interval = seconds

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.levelno, _comparable(record))
        with self._lock:
            previous = self._limiter.last_allowed(key)
            held = self._limiter.allow(key)
        if held is None:
            return False
        if held and previous is not None:
            record.msg = (
                f"{record.getMessage()} ({held} more like it not logged in the last "
                f"{self._clock() - previous:.0f}s)"
            )
            record.args = ()
        return True


def _comparable(record: logging.LogRecord) -> str:
    """The record's message without the parts that differ between repeats of one failure.

    confluent-kafka logs `"%s [%s] %s" % (facility, client name, message)`.
    """
    args = record.args
    if isinstance(args, tuple) and len(args) == 3 and record.msg == "%s [%s] %s":
        text = f"{args[0]} {args[2]}"
    else:
        text = record.getMessage()
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return text
