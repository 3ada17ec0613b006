"""What `KTable.suppress` is given: `Suppressed` (when a key's update is emitted) and its
`BufferConfig` (how much the buffer may hold, and what happens when it is full). Options only:
the operator is kstream.dsl.suppress, its processor kstream.dsl.processors.suppress."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError, KStreamError

UNBOUNDED = 2**63 - 1  # Kafka's Long.MAX_VALUE: no limit


class BufferFullStrategy(enum.Enum):
    """What a full buffer does (Kafka's `BufferFullStrategy`)."""

    EMIT = "emit"
    SHUT_DOWN = "shut_down"


class BufferFullError(KStreamError):
    """A `shut_down_when_full` suppression buffer went over its limits: the app stops."""


@dataclass(frozen=True)
class BufferConfig:
    """The limits of a suppression buffer and what happens when they are exceeded.

    Build one as Kafka's `Suppressed.BufferConfig`: `BufferConfig.unbounded()`,
    `BufferConfig.max_records(n)`, `BufferConfig.max_bytes(n)` (these two emit early when full),
    then `.with_max_records(n)`, `.with_max_bytes(n)`, `.with_no_bound()`,
    `.emit_early_when_full()`, `.shut_down_when_full()`, `.with_logging_disabled()`.

    Example:
        >>> from kstream.dsl.suppress import BufferConfig
        >>> BufferConfig.max_records(1000).with_max_bytes(1 << 20).shut_down_when_full()
        BufferConfig(record_limit=1000, byte_limit=1048576, full_strategy=<BufferFullStrategy.SHUT_DOWN: 'shut_down'>, logging=True)
    """  # noqa: E501

    record_limit: int = UNBOUNDED
    byte_limit: int = UNBOUNDED
    full_strategy: BufferFullStrategy = BufferFullStrategy.SHUT_DOWN
    logging: bool = True

    def __post_init__(self) -> None:
        if self.record_limit < 0 or self.byte_limit < 0:
            raise ConfigError(
                f"buffer limits must be >= 0, got records={self.record_limit}, "
                f"bytes={self.byte_limit}"
            )

    @staticmethod
    def unbounded() -> BufferConfig:
        """No limit (a strict buffer: it never emits early)."""
        return BufferConfig()

    @staticmethod
    def max_records(limit: int) -> BufferConfig:
        """At most `limit` keys; the oldest are emitted early beyond it."""
        return BufferConfig(limit, UNBOUNDED, BufferFullStrategy.EMIT)

    @staticmethod
    def max_bytes(limit: int) -> BufferConfig:
        """At most `limit` bytes (Kafka's estimate); the oldest are emitted early beyond it."""
        return BufferConfig(UNBOUNDED, limit, BufferFullStrategy.EMIT)

    def with_max_records(self, limit: int) -> BufferConfig:
        return dataclasses.replace(self, record_limit=limit)

    def with_max_bytes(self, limit: int) -> BufferConfig:
        return dataclasses.replace(self, byte_limit=limit)

    def with_no_bound(self) -> BufferConfig:
        """No limits, strict (as Kafka's `withNoBound`)."""
        return dataclasses.replace(
            self,
            record_limit=UNBOUNDED,
            byte_limit=UNBOUNDED,
            full_strategy=BufferFullStrategy.SHUT_DOWN,
        )

    def emit_early_when_full(self) -> BufferConfig:
        """Over a limit, emit the oldest keys early (results may then not be final)."""
        return dataclasses.replace(self, full_strategy=BufferFullStrategy.EMIT)

    def shut_down_when_full(self) -> BufferConfig:
        """Over a limit, stop with `BufferFullError` rather than emit a result early."""
        return dataclasses.replace(self, full_strategy=BufferFullStrategy.SHUT_DOWN)

    def with_logging_disabled(self) -> BufferConfig:
        """No changelog: a restart loses what was buffered (as Kafka's `withLoggingDisabled`)."""
        return dataclasses.replace(self, logging=False)

    def with_logging_enabled(self) -> BufferConfig:
        return dataclasses.replace(self, logging=True)


@dataclass(frozen=True)
class Suppressed:
    """How `KTable.suppress` holds updates back: `until_window_closes` or `until_time_limit`.

    Example:
        >>> from kstream.dsl.suppress import BufferConfig, Suppressed
        >>> Suppressed.until_time_limit("5s", BufferConfig.max_records(10)).time_limit_ms
        5000
    """

    buffer: BufferConfig
    time_limit_ms: int | None = None  # None: until the window closes (the window's grace)
    name: str | None = None

    @property
    def final(self) -> bool:
        return self.time_limit_ms is None

    @staticmethod
    def until_window_closes(buffer: BufferConfig) -> Suppressed:
        """Only a windowed table's final results: each window once, when stream time passes its
        end + grace. The buffer must be strict (`unbounded()` or `shut_down_when_full()`):
        emitting early would not be final."""
        if buffer.full_strategy is not BufferFullStrategy.SHUT_DOWN:
            raise ConfigError(
                "until_window_closes needs a strict buffer (BufferConfig.unbounded() or "
                ".shut_down_when_full()): emitting early would not give final results"
            )
        return Suppressed(buffer)

    @staticmethod
    def until_time_limit(time_limit: DurationLike, buffer: BufferConfig) -> Suppressed:
        """Each key's latest update once stream time is `time_limit` past the key's first
        buffered update (a rate limit per key), or earlier if the buffer says so."""
        ms = duration(time_limit, name="suppress time limit")
        if ms < 0:
            raise ConfigError(f"suppress time limit must be >= 0, got {time_limit!r}")
        return Suppressed(buffer, ms)

    def with_name(self, name: str) -> Suppressed:
        """Name the processor `name` and its buffer store `<name>-store`."""
        return dataclasses.replace(self, name=name)
