"""Store specs for `Topology.add_state_store` and the DSL: `kstream.stores.key_value(...)`.

A spec only describes a store; each task opens its own partition of it at run time.
"""

from __future__ import annotations

from typing import Any

from kstream.duration import DurationLike, duration
from kstream.errors import ConfigError
from kstream.state.spec import StoreSpec

__all__ = ["StoreSpec", "dedup", "key_value", "session", "window"]


def key_value(
    name: str,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    cache: bool = True,
) -> StoreSpec:
    """A key-value store. `backend`: URL, short name, Backend instance or None (app default)."""
    return StoreSpec(
        name,
        "key_value",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        cache=cache,
    )


def window(
    name: str,
    retention: DurationLike,
    window_size: DurationLike,
    retain_duplicates: bool = False,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    cache: bool = True,
    segment_interval: DurationLike | None = None,
) -> StoreSpec:
    """A window store: values per (key, window start), dropped once older than `retention`."""
    ret, seg = _retention(name, retention, segment_interval)
    size = duration(window_size, name=f"store {name!r} window_size")
    return StoreSpec(
        name,
        "window",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        cache=cache,
        retention=ret,
        window_size=size,
        retain_duplicates=bool(retain_duplicates),
        segment_interval=seg,
    )


def session(
    name: str,
    retention: DurationLike,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    cache: bool = True,
    segment_interval: DurationLike | None = None,
) -> StoreSpec:
    """A session store: aggregates per (key, session start, end), expired by session end."""
    ret, seg = _retention(name, retention, segment_interval)
    return StoreSpec(
        name,
        "session",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
        cache=cache,
        retention=ret,
        segment_interval=seg,
    )


def dedup(
    name: str,
    retention: DurationLike,
    backend: Any = None,
    key_serde: Any = None,
    changelog: bool = True,
    segment_interval: DurationLike | None = None,
) -> StoreSpec:
    """A dedup store: id -> first-seen time, forgetting ids older than `retention`."""
    ret, seg = _retention(name, retention, segment_interval)
    return StoreSpec(
        name,
        "dedup",
        backend=backend,
        key_serde=key_serde,
        value_serde="long",
        changelog=changelog,
        cache=False,
        retention=ret,
        segment_interval=seg,
    )


def _retention(
    name: str, retention: DurationLike, segment_interval: DurationLike | None
) -> tuple[int, int | None]:
    """The retention (> 0) and optional segment interval of a time-bounded store, in ms."""
    ret = duration(retention, name=f"store {name!r} retention")
    if ret <= 0:
        raise ConfigError(f"store {name!r}: retention must be greater than zero")
    seg = None if segment_interval is None else duration(segment_interval, name="segment_interval")
    return ret, seg
