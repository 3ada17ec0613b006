"""Pluggable state backends: ordered bytes -> bytes maps opened from a URL.

Where a store lives, by one rule: what the user *describes* is in `kstream.stores`, what the
engine *types and wraps* is in `kstream.state`, what *holds the bytes* is in `store_backends`.
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
