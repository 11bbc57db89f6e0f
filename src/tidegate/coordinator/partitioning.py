"""Which coordinator partition owns a key, as Kafka computes it.

`partition_for(key, n)` = `Utils.abs(key.hashCode()) % n`, with Java's
`String.hashCode` over UTF-16 code units, so a group or transactional id lands on the
same partition here as on a Kafka cluster with the same partition count.
"""

from __future__ import annotations

import functools

__all__ = ["java_string_hash", "partition_for"]


# Cached: every transactional request maps its id to a partition, several times per
# transaction (add, end, the Produce's verification, the finish), and the hash is a
# Python loop over the id (~12 us for a 14-character id, ~5 % of the event loop's CPU
# per one-record transaction). Bounded: ids come from clients.
@functools.lru_cache(maxsize=16384)
def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()` (int32, over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode) % partitions` (abs(MIN_VALUE) is 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
