"""Window definitions: immutable value objects validated when they are made.

They only describe windows (sizes, grace); the operators in `kstream.dsl.windowed` and the
joins apply them. Validation happens here so that a bad argument fails while the topology is
being written, not on the first record.
"""

from __future__ import annotations

from dataclasses import dataclass

from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TimeWindows:
    """Fixed-size windows aligned to the epoch: tumbling (advance == size) or hopping.

    A record at `ts` belongs to every window `[start, start + size)` with
    `start % advance == 0` and `start <= ts < start + size`.
    """

    size_ms: int
    advance_ms: int
    grace_ms: int = 0

    @classmethod
    def of(
        cls, size: DurationLike, advance: DurationLike | None = None, grace: DurationLike = 0
    ) -> TimeWindows:
        """Windows of `size`, tumbling, or hopping by `advance`; durations are ms or strings ("1m").

        `grace` is how long after a window's end (in stream time) late records are still added;
        later ones are dropped and counted as late. Windows are aligned to the epoch.

        Example:
            >>> from kstream.dsl.windows import TimeWindows
            >>> TimeWindows.of("1m")  # tumbling minutes
            TimeWindows(size_ms=60000, advance_ms=60000, grace_ms=0)
            >>> hopping = TimeWindows.of("5m", advance="1m", grace="10s")
            >>> hopping.window_starts(150_000)  # the windows of a record at 2m30s
            [0, 60000, 120000]
        """
        size_ms = duration(size, name="TimeWindows size")
        if size_ms <= 0:
            raise ConfigError(f"TimeWindows size must be > 0 ms, got {size!r}")
        advance_ms = size_ms if advance is None else duration(advance, name="TimeWindows advance")
        if not 0 < advance_ms <= size_ms:
            raise ConfigError(
                f"TimeWindows advance must be > 0 and <= size ({size_ms} ms), got {advance!r}"
            )
        return cls(size_ms, advance_ms, duration(grace, name="TimeWindows grace"))

    def advance_by(self, advance: DurationLike) -> TimeWindows:
        """The same windows hopping by `advance` (Kafka's `advanceBy`)."""
        return TimeWindows.of(self.size_ms, advance, self.grace_ms)

    def window_starts(self, ts: int) -> list[int]:
        """Starts of the windows containing `ts`, ascending (none start before the epoch)."""
        start = ts - ts % self.advance_ms
        starts = []
        while start > ts - self.size_ms and start >= 0:
            starts.append(start)
            start -= self.advance_ms
        starts.reverse()
        return starts


@dataclass(frozen=True, slots=True)
class SlidingWindows:
    """Kafka's sliding windows: `[s, s + max_difference]`, both ends inclusive.

    Each record at `t` has a left window `[t - max_difference, t]` (`[0, max_difference]` when
    `t < max_difference`) and, once a later record lies within `max_difference + 1` of it, a
    right window starting at `t + 1`: one window per distinct combination of records. As in
    Kafka Streams, a windowed result is keyed `Windowed(key, start, end)` where `end` is the
    inclusive last timestamp of the window (`end - start == max_difference`).
    """

    max_difference_ms: int
    grace_ms: int = 0

    @classmethod
    def of(cls, max_difference: DurationLike, grace: DurationLike = 0) -> SlidingWindows:
        """Sliding windows: records at most `max_difference` apart share a window; `grace` as for
        `TimeWindows` (Kafka's `SlidingWindows.ofTimeDifferenceAndGrace`).

        Example:
            >>> from kstream.dsl.windows import SlidingWindows
            >>> SlidingWindows.of("5m", grace="30s")
            SlidingWindows(max_difference_ms=300000, grace_ms=30000)
        """
        diff = duration(max_difference, name="SlidingWindows max_difference")
        if diff <= 0:
            raise ConfigError(
                f"SlidingWindows max_difference must be > 0 ms, got {max_difference!r}"
            )
        return cls(diff, duration(grace, name="SlidingWindows grace"))


@dataclass(frozen=True, slots=True)
class SessionWindows:
    """Sessions of activity: records of a key at most `gap` apart share one session.

    A session `[start, end]` spans its first and last record times (both inclusive). A record
    is late once the session it would merge into ends before `stream time - grace - gap`.
    """

    gap_ms: int
    grace_ms: int = 0

    @classmethod
    def with_gap(cls, gap: DurationLike, grace: DurationLike = 0) -> SessionWindows:
        """Sessions that close after `gap` without records of the key; `grace` as for `TimeWindows`.

        Example:
            >>> from kstream.dsl.windows import SessionWindows
            >>> SessionWindows.with_gap("30m")
            SessionWindows(gap_ms=1800000, grace_ms=0)
        """
        gap_ms = duration(gap, name="SessionWindows gap")
        if gap_ms <= 0:
            raise ConfigError(f"SessionWindows gap must be > 0 ms, got {gap!r}")
        return cls(gap_ms, duration(grace, name="SessionWindows grace"))


@dataclass(frozen=True, slots=True)
class JoinWindows:
    """How far apart two records' timestamps may be to join in a stream-stream join.

    A left record at `t` joins right records with timestamps in `[t - before, t + after]`.
    `after` defaults to `before` (a symmetric window, Kafka's `JoinWindows.of`).
    """

    before_ms: int
    after_ms: int
    grace_ms: int = 0

    @classmethod
    def of(
        cls, before: DurationLike, after: DurationLike | None = None, grace: DurationLike = 0
    ) -> JoinWindows:
        """Records join when the other's timestamp lies in `[t - before, t + after]` (`after`
        defaults to `before`); `grace` keeps accepting out-of-order records that long after the
        window has passed in stream time, and delays unmatched left/outer results as long.

        Example:
            >>> from kstream.dsl.windows import JoinWindows
            >>> JoinWindows.of("10m", grace="1m")
            JoinWindows(before_ms=600000, after_ms=600000, grace_ms=60000)
            >>> JoinWindows.of(0, after="5s").size_ms  # only later records of the other side
            5000
        """
        before_ms = duration(before, name="JoinWindows before")
        after_ms = before_ms if after is None else duration(after, name="JoinWindows after")
        return cls(before_ms, after_ms, duration(grace, name="JoinWindows grace"))

    @property
    def size_ms(self) -> int:
        """The span of timestamps one record can join with (before + after)."""
        return self.before_ms + self.after_ms
