"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``.

Why: ``inspect keys`` checks whether a partition's keys are the ones Kafka's default partitioner
would have sent there (producers with a custom partitioner, or a changed partition count, leave
misplaced keys that a compaction of one partition never dedupes against the other's).

``murmur2`` is Kafka's ``Utils.murmur2``: 32-bit MurmurHash2 over the key bytes read as
little-endian 4-byte words, the tail of 1-3 bytes mixed in Java's fall-through order, returned as
Java's signed int.
"""

from __future__ import annotations

MURMUR2_SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed and mixing constants
MURMUR2_M = 0x5BD1E995
MURMUR2_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: the hash its default partitioner uses.

    Args:
        data: the serialized key.

    Returns:
        The hash as Java's signed 32-bit int.
    """
    length, m = len(data), MURMUR2_M
    h = (MURMUR2_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & _MASK32
        k = ((k ^ (k >> MURMUR2_R)) * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    tail = length - whole
    if tail:  # Java's switch falls through: 3 -> 2 -> 1
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * m) & _MASK32
    h = ((h ^ (h >> 13)) * m) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a key: ``(murmur2 & 0x7fffffff) % n``.

    Args:
        key: the serialized key.
        partitions: the topic's partition count (>= 1).

    Returns:
        The partition number, ``0 <= p < partitions``.
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions
