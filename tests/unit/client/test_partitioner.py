"""The partitioner must pick the partitions the Java client and librdkafka pick."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tidegate.client.partitioner import StickyPartitioner, murmur2, partition_for_key

# Test vectors from Kafka's UtilsTest.testMurmur2 (Java's signed results).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
}


@pytest.mark.parametrize(("data", "expected"), list(JAVA_VECTORS.items()))
def test_murmur2_matches_java(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF


@given(st.binary(min_size=0, max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_matches_kafka_python_default_partitioner(
    key: bytes, n: int
) -> None:
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % n
    assert partition_for_key(key, n) == expected


def test_partition_is_never_negative_for_negative_hashes() -> None:
    # "21" hashes negative in Java; the partition must still be in range.
    assert murmur2(b"21") < 0
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_sticky_partitioner_sticks_until_a_new_batch() -> None:
    sp = StickyPartitioner(random.Random(1))
    first = sp.partition("t", 6)
    assert all(sp.partition("t", 6) == first for _ in range(100))
    sp.on_new_batch("t", 6, first)
    second = sp.partition("t", 6)
    assert second != first
    # A stale notification (not the current partition) does not move it.
    sp.on_new_batch("t", 6, first)
    assert sp.partition("t", 6) == second


def test_sticky_partitioner_single_partition_and_shrinking_topic() -> None:
    sp = StickyPartitioner(random.Random(2))
    assert sp.partition("t", 1) == 0
    sp.on_new_batch("t", 1, 0)
    assert sp.partition("t", 1) == 0
    # The topic now has fewer partitions than the sticky choice: pick again, in range.
    sp2 = StickyPartitioner(random.Random(3))
    while sp2.partition("u", 100) == 0:
        sp2.on_new_batch("u", 100, 0)
    assert sp2.partition("u", 1) == 0


def test_sticky_partitioner_spreads_over_partitions() -> None:
    sp = StickyPartitioner(random.Random(4))
    seen = set()
    for _ in range(200):
        p = sp.partition("t", 4)
        seen.add(p)
        sp.on_new_batch("t", 4, p)
    assert seen == {0, 1, 2, 3}
