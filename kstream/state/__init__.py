"""Typed state stores over pluggable backends, and the layers around them.

Where a store lives, by one rule: what the user *describes* is in `kstream.stores`, what the
engine *types and wraps* is in `kstream.state`, what *holds the bytes* is in `store_backends`.
Here a `StoreSpec` (kstream.stores) becomes a live store for one task partition, over a backend
(store_backends). `open_store(spec, app_id=..., partition=..., state_dir=...)` opens it.

A store is a chain, outermost first, like Kafka Streams' `MeteredKeyValueStore(
ChangeLoggingKeyValueStore(RocksDBStore))`:

1. `MeteredStore` (kstream.state.metrics): operation counts and latency. Added by the runtime
   at the debug recording level only; at info there is no layer at all.
2. The typed store (`KeyValueStore`, `WindowStore`, `SessionStore`, `DedupStore`, on
   `StateStore`): serdes and key layout, and the task's write cache (kstream.state.cache),
   which holds the writes of the open transaction; at commit its entries become the changelog
   records (kstream.state.changelog) and then one atomic backend batch. Logging happens at
   commit and not per write, so local state never holds uncommitted data (exactly-once).
3. The backend (`store_backends.Backend`): bytes only.

There is no record cache (Kafka's `CachingKeyValueStore`, which coalesces a key's updates
before forwarding and logging them): every update is forwarded and logged.
"""

from __future__ import annotations

from typing import Any

from kstream.errors import ConfigError, StoreError
from kstream.serde import BUILTIN, Serde, serde
from kstream.state.base import ChangelogEntry, ReadOnlyView, Source, StateStore
from kstream.state.keyvalue import KeyValueStore
from kstream.state.spec import StoreSpec

__all__ = [
    "ChangelogEntry",
    "KeyValueStore",
    "ReadOnlyView",
    "Source",
    "StateStore",
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
) -> StateStore:
    """Open the store `spec` describes for one task partition.

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
    ks, vs = _serde(spec.key_serde), _serde(spec.value_serde)
    try:
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
    except BaseException:
        backend.close()
        raise
    raise StoreError(f"store {spec.name!r}: unknown kind {spec.kind!r}")
