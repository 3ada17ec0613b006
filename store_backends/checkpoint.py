"""The stored form of a backend's checkpoint, for the backends that keep it as bytes (lmdb,
redis): a JSON object, written and read by one rule.

`encode_checkpoint` gives the same bytes for the same dict, which the redis backend relies on
when it compares the checkpoint on the server with the one it last saw. `decode_checkpoint`
says what an unreadable checkpoint is: `StoreCorruptedError`, which makes a restore wipe the
store partition and rebuild it from its changelog.
"""

from __future__ import annotations

from typing import Any

import orjson

from kstream.errors import StoreCorruptedError

__all__ = ["decode_checkpoint", "encode_checkpoint"]


def encode_checkpoint(checkpoint: dict[str, Any] | None) -> bytes | None:
    """The bytes to store for `checkpoint` (None: the batch leaves the checkpoint as it is)."""
    return None if checkpoint is None else orjson.dumps(checkpoint)


def decode_checkpoint(raw: bytes | None, where: str) -> dict[str, Any]:
    """The checkpoint stored as `raw` ({} when there is none); `where` names the store
    partition in the error."""
    if raw is None:
        return {}
    try:
        cp = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise StoreCorruptedError(f"{where}: checkpoint is not JSON: {e}") from e
    if not isinstance(cp, dict):
        raise StoreCorruptedError(f"{where}: checkpoint is not an object: {cp!r}")
    return cp
