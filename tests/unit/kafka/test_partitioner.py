"""The pure-Python murmur2 partitioner against Kafka's own test vectors."""

from __future__ import annotations

import pytest

from kstream.kafka.partitioner import default_partition, murmur2

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS)
def test_murmur2_matches_java(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS)
def test_default_partition_is_positive_hash_modulo(key: str, expected: int) -> None:
    for n in (1, 2, 3, 7, 12, 100):
        assert default_partition(key.encode(), n) == (expected & 0x7FFFFFFF) % n


def test_known_partitions() -> None:
    assert default_partition(b"foobar", 12) == 6
    assert default_partition(b"abc", 3) == 0


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_partitions must be positive, got 0"):
        default_partition(b"k", 0)


def test_remembered_hashes_place_keys_as_the_hash_does() -> None:
    """`default_partition` keeps the hashes of the keys it placed last (bounded): a key seen
    before, one after the memory was cleared, and an unhashable buffer all land where the
    hash itself puts them."""
    from kstream.kafka import partitioner

    keys = [f"user-{i}".encode() for i in range(partitioner._HASHES_MAX + 10)]
    for _ in range(2):
        for k in keys[:100] + keys[-100:]:
            assert default_partition(k, 7) == (murmur2(k) & 0x7FFFFFFF) % 7
    for k in keys:
        default_partition(k, 3)
    assert len(partitioner._HASHES) <= partitioner._HASHES_MAX
    assert default_partition(bytearray(b"foobar"), 12) == 6
    assert default_partition(b"foobar", 12) == 6
