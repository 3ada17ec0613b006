"""Typed state stores over pluggable backends, with a write cache and a changelog layer.

`open_store(spec, app_id=..., partition=..., state_dir=...)` turns a `StoreSpec` into a live
store for one task partition.
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
