"""Keys LMDB cannot hold directly: the empty key and keys over its 511-byte limit.

LMDB keys are 1..511 bytes, but a backend must accept every key Kafka Streams accepts. Keys
of 1..511 bytes stay in the `data` database unchanged (files written before long keys were
supported read as they are). A longer key goes to the `long` database, into the bucket of its
first 511 bytes: one LMDB entry per distinct 511-byte prefix, whose value is the bucket's
entries `(rest of the key, sealed value)` sorted by the rest. Order is kept: buckets sort by
prefix, entries inside a bucket by the rest, and every key in a bucket is longer than any
`data` key it shares the prefix with, so a scan is the ordered merge of the two databases.
Buckets are rewritten whole on a write, which is cheap while few long keys share a prefix
(the common case: a long user key and its window or session suffixes share one bucket).
The empty key, which sorts before every other, is one entry of the `meta` database.
"""

from __future__ import annotations

import struct
from bisect import bisect_left

from kstream.errors import StoreCorruptedError

MAX_KEY = 511
EMPTY_KEY = b"empty-key"
"""Where the empty key's value lives in the `meta` database."""

_LEN = struct.Struct(">I")

Bucket = list[tuple[bytes, bytes]]
"""Entries `(rest of key, sealed value)` sorted by the rest."""


def is_direct(key: bytes) -> bool:
    return 0 < len(key) <= MAX_KEY


def split(key: bytes) -> tuple[bytes, bytes]:
    """(bucket prefix, rest) of a long key."""
    return key[:MAX_KEY], key[MAX_KEY:]


def decode_bucket(raw: bytes, where: str) -> Bucket:
    out: Bucket = []
    at, end = 0, len(raw)
    try:
        while at < end:
            (n,) = _LEN.unpack_from(raw, at)
            rest = raw[at + 4 : at + 4 + n]
            at += 4 + n
            (m,) = _LEN.unpack_from(raw, at)
            value = raw[at + 4 : at + 4 + m]
            at += 4 + m
            if len(rest) != n or len(value) != m:
                raise struct.error("truncated")
            out.append((rest, value))
    except struct.error as e:
        raise StoreCorruptedError(f"{where}: damaged long-key bucket: {e}") from e
    return out


def encode_bucket(bucket: Bucket) -> bytes:
    parts: list[bytes] = []
    for rest, value in bucket:
        parts += (_LEN.pack(len(rest)), rest, _LEN.pack(len(value)), value)
    return b"".join(parts)


def bucket_put(bucket: Bucket, rest: bytes, sealed: bytes) -> None:
    i = bisect_left(bucket, (rest,))
    if i < len(bucket) and bucket[i][0] == rest:
        bucket[i] = (rest, sealed)
    else:
        bucket.insert(i, (rest, sealed))


def bucket_delete(bucket: Bucket, rest: bytes) -> None:
    i = bisect_left(bucket, (rest,))
    if i < len(bucket) and bucket[i][0] == rest:
        del bucket[i]


def bucket_get(bucket: Bucket, rest: bytes) -> bytes | None:
    i = bisect_left(bucket, (rest,))
    if i < len(bucket) and bucket[i][0] == rest:
        return bucket[i][1]
    return None
