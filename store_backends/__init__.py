"""Pluggable state backends: ordered bytes -> bytes maps opened from a URL.

Where a store piece lives, by one rule: by what it knows. A piece that knows bytes only goes in
`store_backends` (the ordered bytes -> bytes maps; they import nothing of kstream but its
errors). One that knows serdes, time, changelogs or restore goes in `kstream.state` (the typed
stores and the layers the engine wraps them in). What a user calls to describe a store, and
nothing else, is in `kstream.stores` (the factories, which check their arguments and return a
`StoreSpec`; the spec is plain data every layer reads, so it is defined in `kstream.state.spec`
and re-exported by `kstream.stores`).

A backend is the innermost layer of a store (the chain is described in kstream.state): it sees
physical keys and values only, in atomic batches with a checkpoint.

`open("memory://")`, `open("lru://?max_entries=10000")`, `open("lmdb:///var/lib/app")`,
`open("redis://127.0.0.1:6379/0")`. Third parties add schemes through the entry-point group
`kstream.store_backends` (see `store_backends.registry`).
"""

from store_backends.base import Backend, Cursor, prefix_upper_bound
from store_backends.memory import MemoryBackend
from store_backends.registry import ENTRY_POINT_GROUP, open, register, schemes

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "Cursor",
    "MemoryBackend",
    "open",
    "prefix_upper_bound",
    "register",
    "schemes",
]
