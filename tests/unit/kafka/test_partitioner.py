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
