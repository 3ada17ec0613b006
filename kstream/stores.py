"""Store specs for `Topology.add_state_store` and the DSL: `kstream.stores.key_value(...)`.

Where a store lives, by one rule: what the user *describes* is in `kstream.stores`, what the
engine *types and wraps* is in `kstream.state`, what *holds the bytes* is in `store_backends`.

- `kstream.stores` (here): the user-facing factories and the `StoreSpec` they return. A spec
  only describes a store (name, kind, backend, serdes, retention); nothing here opens one.
- `kstream.state`: each task opens its own partition of a spec there, as a typed store (serdes,
  key layout, time segments, the write cache, changelog records) inside its layers (metering).
- `store_backends`: the ordered bytes -> bytes maps under the typed stores (memory, lru, lmdb,
  redis, or a third party's); they know no serdes, no time and no Kafka.
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
    **removed: Any,
) -> StoreSpec:
    """A key-value store. `backend`: URL, short name, Backend instance or None (app default)."""
    _refuse_removed(name, removed)
    return StoreSpec(
        name,
        "key_value",
        backend=backend,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog=changelog,
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
    segment_interval: DurationLike | None = None,
    **removed: Any,
) -> StoreSpec:
    """A window store: values per (key, window start), dropped once older than `retention`."""
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
    )


def session(
    name: str,
    retention: DurationLike,
    backend: Any = None,
    key_serde: Any = None,
    value_serde: Any = None,
    changelog: bool = True,
    segment_interval: DurationLike | None = None,
    **removed: Any,
) -> StoreSpec:
    """A session store: aggregates per (key, session start, end), expired by session end."""
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

    `cache=` was stored on the spec and read by nothing: no store ever cached, and updates were
    forwarded and logged one by one whatever it said. Kafka's record cache (coalescing a key's
    updates before they are forwarded and written to the changelog) is an application setting
    still to come (`cache_max_bytes`), not a per-store flag, so the argument went rather than
    keep promising it.
    """
    if "cache" in removed:
        raise ConfigError(
            f"store {name!r}: the argument cache= was removed (it never did anything: kstream "
            "has no record cache yet, every update is forwarded and logged); drop it"
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
