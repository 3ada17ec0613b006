"""What a store is, independent of where it runs: the topology holds specs, tasks open stores."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from kstream.errors import ConfigError
from kstream.internal_topics import (
    WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION,
    changelog_config,
    versioned_changelog_config,
)

KINDS = ("key_value", "window", "session", "dedup", "versioned_key_value")
_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class StoreSpec:
    """A store's name, kind, backend and serdes.

    `backend` is a URL, a short name (`"memory"`, `"lru"`, `"lmdb"`, `"redis"`), a
    `store_backends.Backend` instance, or None for the application's default backend. Serdes
    left as None are filled by `with_default_serdes` or, at open time, by the internal order
    preserving `"auto"` serde. Durations (`retention`, `window_size`, `segment_interval`) are
    int milliseconds.
    """

    name: str
    kind: str = "key_value"
    backend: Any = None
    key_serde: Any = None
    value_serde: Any = None
    changelog: bool = True
    retention: int | None = None
    window_size: int | None = None
    retain_duplicates: bool = False
    segment_interval: int | None = None
    caching: bool = True
    """Whether the record cache (app setting `cache_max_bytes`, kstream.state.caching) may
    hold back this store's updates: Kafka's `Materialized.withCachingEnabled/Disabled`. It
    only matters for the stores Kafka caches (aggregations, materialized table sources) and
    while the cache is on."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"store name {self.name!r}: use letters, digits, '.', '_' or '-' "
                "(it becomes part of a Kafka topic name)"
            )
        if self.kind not in KINDS:
            raise ConfigError(
                f"store {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}"
            )
        if self.kind == "versioned_key_value":
            if self.retention is None or self.retention < 0:
                raise ConfigError(f"store {self.name!r}: a versioned store needs a retention >= 0")
        elif self.kind != "key_value" and (self.retention is None or self.retention <= 0):
            raise ConfigError(f"store {self.name!r}: a {self.kind} store needs a retention > 0")
        if self.kind == "window" and self.window_size is None:
            raise ConfigError(f"store {self.name!r}: a window store needs window_size")
        if self.segment_interval is not None and self.segment_interval <= 0:
            raise ConfigError(f"store {self.name!r}: segment_interval must be > 0")

    def with_caching_disabled(self) -> StoreSpec:
        """This spec with the record cache off for it (Kafka's
        `Materialized.withCachingDisabled()`): every update is forwarded."""
        return dataclasses.replace(self, caching=False)

    def with_caching_enabled(self) -> StoreSpec:
        """This spec with the record cache on for it (the default; Kafka's
        `Materialized.withCachingEnabled()`), effective while `cache_max_bytes` > 0."""
        return dataclasses.replace(self, caching=True)

    def changelog_topic(self, app_id: str) -> str:
        return f"{app_id}-{self.name}-changelog"

    def changelog_retention(self) -> int | None:
        """The retention the changelog's `retention.ms` is built from: None for a key-value
        store, whose changelog is only compacted; time-bounded stores drop expired entries
        locally without writing tombstones, so their changelogs must also delete by time."""
        return None if self.kind in ("key_value", "versioned_key_value") else self.retention

    def changelog_config(
        self, additional_retention: int = WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION
    ) -> dict[str, str]:
        """Topic configs for the changelog, as Kafka Streams sets them (kstream.internal_topics);
        `additional_retention` is the app's `windowstore_changelog_additional_retention`."""
        if self.kind == "versioned_key_value":
            return versioned_changelog_config(self.retention or 0)
        return changelog_config(self.changelog_retention(), additional_retention)

    def effective_segment_interval(self) -> int:
        """Width of one time segment: expired data is dropped a whole segment at a time."""
        if self.segment_interval is not None:
            return self.segment_interval
        return max((self.retention or 0) // 2, 60_000)

    def with_default_serdes(self, key_serde: Any, value_serde: Any) -> StoreSpec:
        return dataclasses.replace(
            self,
            key_serde=self.key_serde if self.key_serde is not None else key_serde,
            value_serde=self.value_serde if self.value_serde is not None else value_serde,
        )
