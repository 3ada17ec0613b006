"""The consumer group metadata a simulated consumer hands to transactions.

It begins as librdkafka's does (`"CGMDv2:"` and the generation as a native int32), which is
what `kstream.runtime.rebalance.generation` reads, and carries the group and member id after
it, which the simulated broker checks transactional offsets against (KIP-447).
"""

from __future__ import annotations

import struct
from typing import Any

from kstream.errors import ConfigError

__all__ = ["group_metadata", "parse_metadata"]

_PREFIX = b"CGMDv2:"


def group_metadata(group_id: str, member_id: str, generation: int) -> bytes:
    return _PREFIX + struct.pack("=i", generation) + f"\0{group_id}\0{member_id}".encode()


def parse_metadata(blob: Any) -> tuple[str, str, int]:
    """(group id, member id, generation) of `group_metadata`'s bytes."""
    if not isinstance(blob, bytes) or not blob.startswith(_PREFIX):
        raise ConfigError(f"send_offsets: expected a simulated consumer's metadata, got {blob!r}")
    (generation,) = struct.unpack_from("=i", blob, len(_PREFIX))
    _, group, member = blob[len(_PREFIX) + 4 :].decode().split("\0")
    return group, member, generation
