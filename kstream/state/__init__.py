"""Typed state stores over pluggable backends, and the layers around them.

Where a store piece lives, by one rule: by what it knows. A piece that knows bytes only goes in
`store_backends` (the ordered bytes -> bytes maps; they import nothing of kstream but its
errors). One that knows serdes, time, changelogs or restore goes in `kstream.state` (the typed
stores and the layers the engine wraps them in). What a user calls to describe a store, and
nothing else, is in `kstream.stores` (the factories, which check their arguments and return a
`StoreSpec`; the spec is plain data every layer reads, so it is defined in `kstream.state.spec`
and re-exported by `kstream.stores`).

Here a spec becomes a live store for one task partition, over a backend:
`open_store(spec, app_id=..., partition=..., state_dir=...)` opens its inner chain (layers 3 to
5 below). Every engine assembles a store through `kstream.state.build.build_store`, which adds
the outer layers (1 and 2) its `StoreLayers` ask for.

A store is a chain of layers, outermost first, as Kafka Streams' `MeteredKeyValueStore(
CachingKeyValueStore(ChangeLoggingKeyValueBytesStore(RocksDBStore)))`:

1. `MeteredStore` (kstream.state.metrics): operation counts and latency. Added by the runtime
   at the debug recording level only; at info there is no layer at all.
2. `CachingStore` (kstream.state.caching): the record cache, which holds back the forwarding
   of a key's updates until the commit (or an eviction) and forwards the latest. Added by the
   runtime while `cache_max_bytes` > 0, to the stores that can cache; not the write cache of
   step 4.
3. `ChangeLoggingStore` (kstream.state.changelog): the store's writes as changelog records.
   `open_store` adds it when the spec has `changelog=True`.
4. The typed store (`KeyValueStore`, `WindowStore`, `SessionStore`, `DedupStore`, on
   `StateStore`): serdes and key layout, and the task's write cache (kstream.state.cache),
   which holds the writes of the open transaction. The change-logging layer logs them at
   commit; after the commit they become one atomic backend batch, so local state never holds
   uncommitted data (exactly-once).
5. The backend (`store_backends.Backend`): bytes only.
"""

from __future__ import annotations

from typing import Any

from kstream.errors import ConfigError, StoreError
from kstream.serde import BUILTIN, Serde, serde
from kstream.state.base import ReadOnlyView, Source, StateStore
from kstream.state.changelog import ChangelogEntry, ChangeLoggingStore
from kstream.state.keyvalue import KeyValueStore
from kstream.state.spec import StoreSpec

Store = StateStore | ChangeLoggingStore
"""What `open_store` returns: a typed store, or the change-logging layer around one."""

__all__ = [
    "ChangeLoggingStore",
    "ChangelogEntry",
    "KeyValueStore",
    "ReadOnlyView",
    "Source",
    "StateStore",
    "Store",
    "StoreSpec",
    "open_backend",
    "open_store",
]


def _serde(spec: Any) -> Serde:
    return BUILTIN["auto"] if spec is None else serde(spec)


def open_backend(
    spec: StoreSpec, *, app_id: str, partition: int, state_dir: str, default_backend: str = "memory"
) -> Any:
    """The backend for one partition of `spec`: an instance is used as given, a URL is opened."""
    import store_backends

    be = spec.backend if spec.backend is not None else default_backend
    if isinstance(be, str):
        return store_backends.open(
            be, name=spec.name, partition=partition, state_dir=state_dir, namespace=app_id
        )
    if isinstance(be, store_backends.Backend):
        return be
    raise ConfigError(
        f"store {spec.name!r}: backend must be a URL, a short name or a store_backends.Backend, "
        f"got {type(be).__name__}"
    )


def open_store(
    spec: StoreSpec,
    *,
    app_id: str,
    partition: int,
    state_dir: str,
    default_backend: str = "memory",
    backend: Any = None,
) -> Store:
    """Open the store `spec` describes for one task partition, inside its change-logging
    layer when the spec keeps a changelog.

    `backend` overrides the spec's backend (used by restore to open a fresh one).
    """
    if backend is None:
        backend = open_backend(
            spec,
            app_id=app_id,
            partition=partition,
            state_dir=state_dir,
            default_backend=default_backend,
        )
    try:
        store = _typed(spec, backend, partition)
    except BaseException:
        backend.close()
        raise
    return ChangeLoggingStore(store) if spec.changelog else store


def _typed(spec: StoreSpec, backend: Any, partition: int) -> StateStore:
    """The typed store of `spec`'s kind over `backend`."""
    ks, vs = _serde(spec.key_serde), _serde(spec.value_serde)
    if spec.kind == "key_value":
        return KeyValueStore(spec, backend, partition, ks, vs)
    if spec.kind == "window":
        from kstream.state.window import WindowStore

        return WindowStore(spec, backend, partition, ks, vs)
    if spec.kind == "session":
        from kstream.state.session import SessionStore

        return SessionStore(spec, backend, partition, ks, vs)
    if spec.kind == "dedup":
        from kstream.state.dedup import DedupStore

        return DedupStore(spec, backend, partition, ks, vs)
    if spec.kind == "versioned_key_value":
        from kstream.state.versioned import VersionedKeyValueStore

        return VersionedKeyValueStore(spec, backend, partition, ks, vs)
    raise StoreError(f"store {spec.name!r}: unknown kind {spec.kind!r}")
