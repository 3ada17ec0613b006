"""Store specs for `Topology.add_state_store` and the DSL: `kstream.stores.key_value(...)`.

Where a store piece lives, by one rule: by what it knows. A piece that knows bytes only goes in
`store_backends` (the ordered bytes -> bytes maps; they import nothing of kstream but its
errors). One that knows serdes, time, changelogs or restore goes in `kstream.state` (the typed
stores and the layers the engine wraps them in). What a user calls to describe a store, and
nothing else, is in `kstream.stores` (the factories, which check their arguments and return a
`StoreSpec`; the spec is plain data every layer reads, so it is defined in `kstream.state.spec`
and re-exported here).

- `kstream.stores` (here): the user-facing factories and the `StoreSpec` they return. A spec
  only describes a store (name, kind, backend, serdes, retention); nothing here opens one.
- `kstream.state`: each task opens its own partition of a spec there, as a typed store (serdes,
  key layout, time segments, the write cache) inside its layers (change-logging, metering).
- `store_backends`: the ordered bytes -> bytes maps under the typed stores (memory, lru, lmdb,
  redis, or a third party's); they know no serdes, no time and no Kafka.
"""

from __future__ import annotations

from typing import Any

from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError
from kstream.state.spec import StoreSpec

__all__ = ["StoreSpec", "dedup", "key_value", "session", "versioned_key_value", "window"]


def key_value(
    name: str,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    caching: bool = True,
    **removed: Any,
) -> StoreSpec:
    """A key-value store. `backend`: URL, short name, Backend instance or None (app default).
    `caching=False`: the record cache (`cache_max_bytes`) never holds back its updates."""
    _refuse_removed(name, removed)
    return StoreSpec(
        name,
        "key_value",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        caching=bool(caching),
    )


def versioned_key_value(
    name: str,
    history_retention: DurationLike,
    segment_interval: DurationLike | None = None,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    **removed: Any,
) -> StoreSpec:
    """A versioned key-value store (KIP-889; Kafka's `Stores.persistentVersionedKeyValueStore`):
    every value a key had, readable as of any time within `history_retention` of stream time.

    `put(key, value, timestamp)`, `get(key)` (the latest) and `get(key, as_of_timestamp)`,
    `delete(key, timestamp)` (kstream.state.versioned). A put older than `history_retention`
    is dropped; `history_retention` may be 0 (only the latest version is kept, and a put older
    than it is dropped). `segment_interval` defaults as in Kafka (a fraction of the retention).

    Example:
        >>> from kstream import stores
        >>> stores.versioned_key_value("prices", history_retention="1h").retention
        3600000
    """
    _refuse_removed(name, removed)
    ret = duration(history_retention, name=f"store {name!r} history_retention")
    if ret < 0:
        raise ConfigError(f"store {name!r}: history_retention must not be negative")
    if segment_interval is None:
        seg = _versioned_segment_interval(ret)
    else:
        seg = duration(segment_interval, name=f"store {name!r} segment_interval")
        if seg <= 0:
            raise ConfigError(f"store {name!r}: segment_interval must be greater than zero")
    return StoreSpec(
        name,
        "versioned_key_value",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        retention=ret,
        segment_interval=seg,
    )


def _versioned_segment_interval(history_retention: int) -> int:
    """Kafka's default segment interval for a versioned store (`RocksDbVersionedKeyValueBytes
    StoreSupplier`): about 3 to 24 segments over the retention, within fixed bounds."""
    if history_retention <= 60_000:
        return max(history_retention // 3, 2_000)
    if history_retention <= 300_000:
        return max(history_retention // 5, 20_000)
    if history_retention <= 3_600_000:
        return max(history_retention // 12, 60_000)
    return max(history_retention // 24, 300_000)


def window(
    name: str,
    retention: DurationLike,
    window_size: DurationLike,
    retain_duplicates: bool = False,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    segment_interval: DurationLike | None = None,
    caching: bool = True,
    **removed: Any,
) -> StoreSpec:
    """A window store: values per (key, window start), dropped once older than `retention`.
    `caching=False`: the record cache (`cache_max_bytes`) never holds back its updates."""
    _refuse_removed(name, removed)
    ret, seg = _retention(name, retention, segment_interval)
    size = duration(window_size, name=f"store {name!r} window_size")
    return StoreSpec(
        name,
        "window",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        retention=ret,
        window_size=size,
        retain_duplicates=bool(retain_duplicates),
        segment_interval=seg,
        caching=bool(caching),
    )


def session(
    name: str,
    retention: DurationLike,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    segment_interval: DurationLike | None = None,
    caching: bool = True,
    **removed: Any,
) -> StoreSpec:
    """A session store: aggregates per (key, session start, end), expired by session end.
    `caching=False`: the record cache (`cache_max_bytes`) never holds back its updates."""
    _refuse_removed(name, removed)
    ret, seg = _retention(name, retention, segment_interval)
    return StoreSpec(
        name,
        "session",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        retention=ret,
        segment_interval=seg,
        caching=bool(caching),
    )


def dedup(
    name: str,
    retention: DurationLike,
    backend: Any = None,
    key_serde: Any = None,
    changelog: bool = True,
    segment_interval: DurationLike | None = None,
    **removed: Any,
) -> StoreSpec:
    """A dedup store: id -> first-seen time, forgetting ids older than `retention`."""
    _refuse_removed(name, removed)
    ret, seg = _retention(name, retention, segment_interval)
    return StoreSpec(
        name,
        "dedup",
        backend=backend,
        key_serde=key_serde,
        value_serde="long",
        changelog=changelog,
        retention=ret,
        segment_interval=seg,
    )


def _refuse_removed(name: str, removed: dict[str, Any]) -> None:
    """Arguments a factory no longer takes, refused with what to do instead.

    `cache=` was stored on the spec and read by nothing: no store ever cached. Kafka's record
    cache is now the application setting `cache_max_bytes` (kstream.state.caching), and a
    store opts out with `caching=False` (Kafka's `Materialized.withCachingDisabled`).
    """
    if "cache" in removed:
        raise ConfigError(
            f"store {name!r}: the argument cache= was removed (it never did anything); the "
            "record cache is the app setting cache_max_bytes, and caching=False (or "
            "spec.with_caching_disabled()) turns it off for one store"
        )
    if removed:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(removed))}")


def _retention(
    name: str, retention: DurationLike, segment_interval: DurationLike | None
) -> tuple[int, int | None]:
    """The retention (> 0) and optional segment interval of a time-bounded store, in ms."""
    ret = duration(retention, name=f"store {name!r} retention")
    if ret <= 0:
        raise ConfigError(f"store {name!r}: retention must be greater than zero")
    seg = None if segment_interval is None else duration(segment_interval, name="segment_interval")
    return ret, seg
