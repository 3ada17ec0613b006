"""The processing guarantee: its names and the one function that reads one from a setting.

Why a module of its own, at the bottom of the package: the guarantee is read by the settings
(`kstream.config`, the service's settings file, the Spark runner) and acted on by the runtime,
whose three commit protocols (kstream.runtime.commit, one class per guarantee) are the objects
the stream thread and the task manager ask what the guarantee means for them. Every reader
parses the string here, so the names, the default and the error are one.
"""

from __future__ import annotations

from kstream.errors import ConfigError

__all__ = [
    "AT_LEAST_ONCE",
    "DEFAULT_GUARANTEE",
    "EXACTLY_ONCE",
    "EXACTLY_ONCE_V2",
    "GUARANTEES",
    "parse_guarantee",
]

EXACTLY_ONCE = "exactly_once"
"""Every task has its own transactional producer (kstream's choice; Kafka Streams 4.0 removed
it)."""
EXACTLY_ONCE_V2 = "exactly_once_v2"
"""The tasks of a stream thread share one transactional producer and commit together."""
AT_LEAST_ONCE = "at_least_once"
"""One idempotent producer; outputs are flushed before the input offsets are committed."""

GUARANTEES = (EXACTLY_ONCE, EXACTLY_ONCE_V2, AT_LEAST_ONCE)
DEFAULT_GUARANTEE = EXACTLY_ONCE_V2
"""Kafka Streams' default exactly-once mode since 4.0 (which removed per-task exactly_once;
kstream keeps it as a choice)."""


def parse_guarantee(value: object, key: str = "processing_guarantee") -> str:
    """`value` as a processing guarantee's name; a `ConfigError` naming `key` (the setting it
    was read from: `processing_guarantee`, `service.processing_guarantee`, `guarantee`)
    otherwise."""
    if isinstance(value, str) and value in GUARANTEES:
        return value
    raise ConfigError(f"{key}: expected one of {', '.join(GUARANTEES)}, got {value!r}")
