"""The foreign-key join's wire format: what travels on its subscription and response topics
and sits in its subscription store (`kstream.dsl.fk_join` builds the join).

Kafka's design (KIP-213) with kstream's own byte layout, which only kstream reads: a header
(version, flags with the instruction, the left row's partition), the hash of the left value
the subscription was made from, then the primary key (subscription) or the foreign value
(response). The hash lets the left side drop an answer made for an outdated row.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from typing import Any, NamedTuple

from kstream.errors import SerdeError
from kstream.serde import Serde


class Instruction(enum.IntEnum):
    """What a subscription asks of the right side (Kafka's byte values)."""

    DELETE_KEY_NO_PROPAGATE = 0
    DELETE_KEY_AND_PROPAGATE = 1
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = 2
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = 3


DELETE_INSTRUCTIONS = (Instruction.DELETE_KEY_NO_PROPAGATE, Instruction.DELETE_KEY_AND_PROPAGATE)


class Subscription(NamedTuple):
    """A left row's subscription to a foreign key: the hash of the left value it was made from
    (None: the row was deleted), the instruction, the row's key and the partition it lives in."""

    hash: bytes | None
    instruction: Instruction
    primary_key: Any
    partition: int


class Response(NamedTuple):
    """An answer to a subscription: its hash, the foreign row's value (None: no row, or a
    value that serializes to no bytes, as Kafka reads it) and the partition of the left row
    to deliver it to."""

    hash: bytes | None
    foreign_value: Any
    partition: int


_VERSION = 0
_HASH_SIZE = 16
_HEAD = struct.Struct(">BBi")  # version, flags, partition
_FLAG_HASH = 0x80  # a hash follows the header
_FLAG_VALUE = 0x40  # a response: a foreign value follows
_INSTRUCTION = 0x0F


def value_hash(data: bytes | None) -> bytes | None:
    """The hash a subscription carries of its left value's bytes (None for a delete)."""
    return None if data is None else hashlib.blake2b(data, digest_size=_HASH_SIZE).digest()


def subscription_serde(primary_key_serde: Serde) -> Serde:
    """The subscription topic's and store's value serde: header, hash, primary key bytes."""

    def to_bytes(s: Subscription) -> bytes:
        flags = int(s.instruction) | (_FLAG_HASH if s.hash is not None else 0)
        key = primary_key_serde.to_bytes(s.primary_key)
        if key is None:
            raise SerdeError("a foreign-key join subscription needs a primary key")
        return _HEAD.pack(_VERSION, flags, s.partition) + (s.hash or b"") + key

    def from_bytes(data: bytes) -> Subscription:
        flags, partition, h, pos = _read_head(data, "subscription")
        pk = primary_key_serde.from_bytes(data[pos:])
        return Subscription(h, Instruction(flags & _INSTRUCTION), pk, partition)

    return Serde(to_bytes, from_bytes, "fk-join-subscription")


def response_serde(foreign_value_serde: Serde) -> Serde:
    """The response topic's value serde: header, hash, foreign value bytes."""

    def to_bytes(r: Response) -> bytes:
        value = foreign_value_serde.to_bytes(r.foreign_value)
        flags = (_FLAG_HASH if r.hash is not None else 0) | (
            _FLAG_VALUE if value is not None else 0
        )
        head = _HEAD.pack(_VERSION, flags, r.partition) + (r.hash or b"")
        return head if value is None else head + value

    def from_bytes(data: bytes) -> Response:
        flags, partition, h, pos = _read_head(data, "response")
        # a foreign value of no bytes reads as no value (None), as Kafka's response serde
        # (SubscriptionResponseWrapperSerde) reads it: a row whose value serializes to
        # nothing (a "" string) joins as a missing row in Kafka Streams, and so here
        fv = (
            foreign_value_serde.from_bytes(data[pos:])
            if flags & _FLAG_VALUE and len(data) > pos
            else None
        )
        return Response(h, fv, partition)

    return Serde(to_bytes, from_bytes, "fk-join-response")


def _read_head(data: bytes, what: str) -> tuple[int, int, bytes | None, int]:
    """The header of a subscription or response: flags, partition, hash (None: none), and
    where the rest starts."""
    version, flags, partition = _HEAD.unpack_from(data)
    if version != _VERSION:
        raise SerdeError(f"foreign-key join {what} of unknown version {version}")
    pos = _HEAD.size
    if not flags & _FLAG_HASH:
        return flags, partition, None, pos
    return flags, partition, bytes(data[pos : pos + _HASH_SIZE]), pos + _HASH_SIZE


_PREFIX_LEN = struct.Struct(">i")


def combined_prefix(foreign_key_bytes: bytes) -> bytes:
    """The subscription store's key prefix of a foreign key (Kafka's `CombinedKeySchema`: its
    length, then its bytes), so that a prefix scan finds exactly its subscribers."""
    return _PREFIX_LEN.pack(len(foreign_key_bytes)) + foreign_key_bytes
