"""Choosing a partition for a record, compatibly with the Java client and librdkafka.

- Keyed records: ``(murmur2(key) & 0x7fffffff) % num_partitions``, where `murmur2` is
  Kafka's `Utils.murmur2` (seed 0x9747b28c). librdkafka's ``murmur2_random``
  partitioner computes the same, so a key lands in the same partition whichever of
  these clients wrote it.
- Unkeyed records (or every record, with ``partitioner.ignore.keys``): the sticky
  partitioner (KIP-480) — stay on one partition until a batch for it is completed, then
  pick another at random, so unkeyed traffic fills whole batches.

Sans-IO: the random source is injectable for tests.
"""

from __future__ import annotations

import random

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: a signed 32-bit hash of `data`."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Per-topic sticky choice for unkeyed records (KIP-480)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._rng.randrange(num_partitions)
            self._current[topic] = p
        return p

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        """A batch for `previous` filled up: move to a different partition."""
        if self._current.get(topic) != previous:
            return
        if num_partitions <= 1:
            self._current[topic] = 0
            return
        p = self._rng.randrange(num_partitions - 1)
        self._current[topic] = p + 1 if p >= previous else p
