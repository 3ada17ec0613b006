"""Application configuration, validated when it is built.

An unknown key is an error that lists the valid ones; a bad value names the key and the form
expected. Nothing here is checked lazily on the first record.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kstream.duration import duration
from kstream.errors import ConfigError
from kstream.kafka.security import validate_security

ERROR_POLICIES = ("fail", "skip", "dlq")
GUARANTEES = ("exactly_once", "exactly_once_v2", "at_least_once")
_HOSTPORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]*):(\d{1,5})$")


def _default_state_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "kstream-state")


@dataclass(frozen=True)
class Config:
    """Engine settings. Durations are stored as int milliseconds."""

    batch_max_records: int = 10_000
    batch_max_wait: int = 100
    commit_interval: int = 100
    state_dir: str = field(default_factory=_default_state_dir)
    default_backend: str = "memory"
    dedup_retention: int = 7 * 24 * 3_600_000
    on_deserialization_error: str = "fail"
    on_processing_error: str = "fail"
    dlq_topic: str | None = None
    http: str | None = None
    http_token: str | None = None
    connect_timeout: int = 10_000
    shutdown_timeout: int = 30_000
    replication_factor: int = 1
    kafka: Mapping[str, Any] = field(default_factory=dict)
    # Pause Python's cyclic garbage collector while a batch is processed (see thread.py)
    gc_pause: bool = True

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None = None, **overrides: Any) -> Config:
        """Build and validate a Config from a dict (plus keyword overrides)."""
        merged: dict[str, Any] = dict(mapping or {})
        merged.update(overrides)
        valid = cls.keys()
        unknown = sorted(k for k in merged if k not in valid)
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}; "
                f"valid keys are: {', '.join(valid)}"
            )
        return cls(**merged)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if isinstance(self.batch_max_records, bool) or not isinstance(self.batch_max_records, int):
            raise ConfigError(
                f"batch_max_records: expected a positive int, got {self.batch_max_records!r}"
            )
        if self.batch_max_records <= 0:
            raise ConfigError(
                f"batch_max_records: expected a positive int, got {self.batch_max_records}"
            )
        for key in (
            "batch_max_wait",
            "commit_interval",
            "dedup_retention",
            "connect_timeout",
            "shutdown_timeout",
        ):
            set_(self, key, duration(getattr(self, key), name=key))
        if not isinstance(self.gc_pause, bool):
            raise ConfigError(f"gc_pause: expected true or false, got {self.gc_pause!r}")
        if self.dedup_retention <= 0:
            raise ConfigError("dedup_retention: must be greater than zero")
        if self.connect_timeout <= 0:
            raise ConfigError("connect_timeout: must be greater than zero")
        if not isinstance(self.state_dir, str | os.PathLike) or not str(self.state_dir):
            raise ConfigError(f"state_dir: expected a directory path, got {self.state_dir!r}")
        set_(self, "state_dir", os.fspath(self.state_dir))
        if not isinstance(self.default_backend, str) or not self.default_backend:
            raise ConfigError(
                "default_backend: expected a backend name or URL such as 'memory', 'lmdb' or "
                f"'redis://127.0.0.1:6379/0', got {self.default_backend!r}"
            )
        for key in ("on_deserialization_error", "on_processing_error"):
            val = getattr(self, key)
            if val not in ERROR_POLICIES:
                raise ConfigError(
                    f"{key}: expected one of {', '.join(ERROR_POLICIES)}, got {val!r}"
                )
        uses_dlq = "dlq" in (self.on_deserialization_error, self.on_processing_error)
        if uses_dlq and not self.dlq_topic:
            raise ConfigError("dlq_topic: required when an error policy is 'dlq'")
        if self.dlq_topic is not None and not _valid_topic(self.dlq_topic):
            raise ConfigError(f"dlq_topic: {self.dlq_topic!r} is not a valid topic name")
        if self.http is not None and not (
            isinstance(self.http, str) and _valid_hostport(self.http)
        ):
            raise ConfigError(
                f"http: expected 'HOST:PORT' such as '127.0.0.1:8080', got {self.http!r}"
            )
        if self.http_token is not None and (
            not isinstance(self.http_token, str) or not self.http_token
        ):
            raise ConfigError("http_token: expected a non-empty string")
        rf = self.replication_factor
        if isinstance(rf, bool) or not isinstance(rf, int) or (rf < 1 and rf != -1):
            raise ConfigError(
                f"replication_factor: expected a positive int or -1 (broker default), "
                f"got {self.replication_factor!r}"
            )
        if not isinstance(self.kafka, Mapping):
            raise ConfigError(f"kafka: expected a dict of librdkafka settings, got {self.kafka!r}")
        bad = [k for k in self.kafka if not isinstance(k, str)]
        if bad:
            raise ConfigError(f"kafka: setting names must be strings, got {bad!r}")
        validate_security(self.kafka)
        set_(self, "kafka", dict(self.kafka))


def _valid_topic(name: object) -> bool:
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9._\-]{1,249}", name))


def _valid_hostport(text: str) -> bool:
    m = _HOSTPORT.match(text)
    return bool(m) and 0 <= int(m.group(2)) <= 65535  # type: ignore[union-attr]


def validate_guarantee(value: str) -> str:
    if value not in GUARANTEES:
        raise ConfigError(
            f"processing_guarantee: expected one of {', '.join(GUARANTEES)}, got {value!r}"
        )
    return value
