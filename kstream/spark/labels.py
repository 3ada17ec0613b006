"""Grouping labels that Spark spreads evenly over its shuffle partitions.

A stateful sub-topology's query groups its input by task (one group per Kafka partition).
Spark places a group in shuffle partition `hash(label) mod P`, so labels 0, 1, 2, ... could put
two busy tasks on one core while another idles; `spread_labels` picks labels whose Spark hash
sends task i to partition i mod P instead.
"""

from __future__ import annotations


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of an int column (Murmur3 x86_32, seed 42), as a signed int."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    k1 = (value & m) * 0xCC9E2D51 & m
    k1 = rotl(k1, 15) * 0x1B873593 & m
    h1 = rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & m
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & m
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & m
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spread_labels(n: int, modulus: int) -> list[int]:
    """Grouping values for groups 0..n-1 that Spark spreads evenly over its partitions.

    Label i is an int whose Spark hash is i modulo `modulus` (a power of two), so for every P
    dividing `modulus` group i lands in partition i mod P: no two of P consecutive groups share
    a core, whatever partition count a checkpoint was started with, and the labels never change.
    """
    want = [i % modulus for i in range(n)]
    rank = [i // modulus for i in range(n)]
    seen: dict[int, int] = {}
    found: dict[tuple[int, int], int] = {}
    x = 0
    while len(found) < n:
        r = _murmur3_int(x) % modulus
        k = seen.get(r, 0)
        seen[r] = k + 1
        if r < min(n, modulus) and k <= (n - 1 - r) // modulus:
            found[(r, k)] = x
        x += 1
    return [found[(w, k)] for w, k in zip(want, rank, strict=True)]
