"""Say so when one record moves a task's stream time far past the wall clock.

Stream time is the largest record timestamp a task has seen. One record stamped far in the
future (a producer that writes microseconds where milliseconds belong, a clock set a year
ahead) moves it there, and from then on records with sane timestamps are late: windowed
aggregations drop them, joins close their windows, suppressions emit. Kafka Streams does
exactly that and kstream keeps the semantics; what this module adds is that it does not happen
silently. A record that moves stream time more than `future_timestamp_warning` past the wall
clock is counted in `kstream_records_future_timestamp_total{topic,partition}` and logged as a
WARNING naming its topic, partition, offset and timestamp against the wall clock, at most once
a minute per task (with the number held back since the last line).

The hot path pays almost nothing: the stream thread computes the limit (wall clock + bound)
once per batch, a task compares its new stream time with it only when stream time advances
(once per run of records), and the records are looked at only once the limit is passed.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Callable, Sequence

from kstream.duration import format_ms
from kstream.metrics import Metrics
from kstream.ratelimit import RateLimiter
from kstream.records import Record
from kstream.topology.task import NO_LIMIT, Task

log = logging.getLogger("kstream.runtime")

WARN_INTERVAL_S = 60.0
"""At most one warning per task in this many seconds."""


class FutureTimestamps:
    """The far-future watch of one stream thread's tasks (`Task.on_future`).

    `bound_ms`: `future_timestamp_warning` (0: off). The metric is counted for every record
    that moves stream time past the limit; the warning is rate-limited per task.
    """

    def __init__(
        self,
        bound_ms: int,
        metrics: Metrics,
        *,
        interval: float = WARN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bound_ms = bound_ms
        self.metrics = metrics
        self._limiter = RateLimiter(interval, clock)

    def limit(self, now_ms: int) -> int:
        """The stream time past which a record is reported, for a batch processed at wall clock
        `now_ms` (NO_LIMIT when the watch is off)."""
        return now_ms + self.bound_ms if self.bound_ms > 0 else NO_LIMIT

    def __call__(self, task: Task, run: list[Record]) -> None:
        """`task`'s stream time is about to move past `task.future_limit` with `run`: count
        each record of `run` that moves it past (record by record, as a task one record at a
        time would) and warn about the first, unless this task warned within the interval."""
        limit = task.future_limit
        found = movers(run, task.stream_time, limit)
        if not found:
            return
        for r in found:
            if r.topic is not None and r.partition is not None:
                self.metrics.future_timestamp(r.topic, r.partition)
        held = self._limiter.allow(task.id, len(found))
        if held is not None:
            wall_ms = limit - self.bound_ms
            others = held + len(found) - 1
            log.warning(
                warning(task.id, found[0], wall_ms, self.bound_ms, others, self._limiter.interval)
            )


def movers(run: Sequence[Record], stream_time: int, limit: int) -> list[Record]:
    """The records of `run` that, in order, move stream time (starting at `stream_time`) to a
    new high past `limit`."""
    hi = stream_time
    out: list[Record] = []
    for r in run:
        ts = r.timestamp
        if ts > hi:
            hi = ts
            if ts > limit:
                out.append(r)
    return out


def warning(
    task_id: str, record: Record, wall_ms: int, bound_ms: int, others: int, every_s: float
) -> str:
    """The log line for `record`, which moved task `task_id`'s stream time past the wall clock
    `wall_ms` plus `bound_ms`; `others`: the task's other such records, since the last line
    (at least `every_s` seconds ago) and in this run, that are not logged."""
    ts = record.timestamp
    more = f"; {others} other record(s) of the task did the same, not logged" if others else ""
    return (
        f"task {task_id}: record topic {record.topic!r} partition {record.partition} offset "
        f"{record.offset} has timestamp {ts} ({iso(ts)}), {format_ms(ts - wall_ms)} ahead of "
        f"the wall clock ({iso(wall_ms)}; future_timestamp_warning is {format_ms(bound_ms)}): "
        "stream time moves there, so windows and joins treat records with earlier timestamps "
        f"(beyond their grace) as late and drop them, as Kafka Streams does{more} (warned at "
        f"most every {format_ms(every_s * 1000)} per task)"
    )


def iso(ms: int) -> str:
    """`ms` since the epoch as UTC ISO 8601 (timestamps beyond year 9999 said as such)."""
    try:
        moment = _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC)
    except (OverflowError, OSError, ValueError):
        return "after year 9999" if ms > 0 else "before year 1"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
