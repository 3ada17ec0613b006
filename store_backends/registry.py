"""Backends by URL: the built-in schemes plus anything registered under the entry-point group.

A factory is called as `factory(url, name=..., partition=..., state_dir=..., namespace=...)`
and returns a `Backend`. Third parties register one with, in their pyproject.toml:

    [project.entry-points."kstream.store_backends"]
    myscheme = "mypkg.backend:open_backend"
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from kstream.errors import ConfigError
from store_backends.base import Backend

ENTRY_POINT_GROUP = "kstream.store_backends"

Factory = Callable[..., Backend]

_BUILTIN: dict[str, str] = {
    "memory": "store_backends.memory:open_url",
    "lru": "store_backends.lru:open_url",
    "lmdb": "store_backends.lmdb_backend:open_url",
    "redis": "store_backends.redis_backend:open_url",
}
_registered: dict[str, Factory] = {}


def register(scheme: str, factory: Factory) -> None:
    """Make `scheme://...` URLs open with `factory` (for code that cannot ship entry points)."""
    _registered[scheme.lower()] = factory


def schemes() -> list[str]:
    """Every scheme that `open` understands right now."""
    from importlib.metadata import entry_points  # scanning installed packages: only when asked

    found = set(_BUILTIN) | set(_registered)
    found.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(found)


def _load(ref: str) -> Factory:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return cast("Callable[..., Backend]", obj)


def _factory(scheme: str) -> Factory:
    if scheme in _registered:
        return _registered[scheme]
    if scheme in _BUILTIN:
        return _load(_BUILTIN[scheme])
    from importlib.metadata import entry_points  # only for schemes kstream does not ship

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == scheme:
            factory: Factory = ep.load()
            return factory
    raise ConfigError(
        f"unknown store backend {scheme!r}; known schemes: {', '.join(schemes())} "
        f"(third-party backends register under the entry-point group {ENTRY_POINT_GROUP!r})"
    )


def open(
    url: str,
    name: str = "store",
    partition: int = 0,
    state_dir: str | os.PathLike[str] | None = None,
    namespace: str = "",
) -> Backend:
    """Open the backend that `url` names for one store partition.

    `url` is a URL (`memory://`, `lru://?max_entries=N`, `lmdb:///abs/dir`, `lmdb://rel/dir`,
    `redis://host:port/db`) or a bare scheme name (`"memory"`, `"lmdb"`, ...). `namespace`
    (normally the application id) keeps stores of different applications apart in shared
    places: the state directory and Redis.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(f"store backend: expected a URL or name, got {url!r}")
    if "://" not in url:
        url = url + "://"
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise ConfigError(f"store backend URL {url!r} has no scheme")
    factory = _factory(scheme)
    sd = os.fspath(state_dir) if state_dir is not None else None
    return factory(url, name=name, partition=partition, state_dir=sd, namespace=namespace)
