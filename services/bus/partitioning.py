"""Kafka's default key partitioner (murmur2), as the Java client and aiokafka compute it.

All producers must agree on key -> partition or one subject's events would split across
partitions and lose their order. confluent-kafka is configured with ``murmur2_random`` to match;
this module lets the in-memory bus and the tests compute the same answer.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit murmur2 exactly as ``org.apache.kafka.common.utils.Utils.murmur2``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - (length % 4)
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    remaining = length % 4
    if remaining == 3:
        h ^= data[whole + 2] << 16
    if remaining >= 2:
        h ^= data[whole + 1] << 8
    if remaining >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Java's ``toPositive(murmur2(key)) % partitions``."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
