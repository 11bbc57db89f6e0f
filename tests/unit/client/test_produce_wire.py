"""The producer's own Produce request encoding matches the generic one byte for byte."""

from __future__ import annotations

import uuid

import pytest

from tidegate.client.producer.wire import MAX_VERSION, MIN_VERSION, encode_produce
from tidegate.protocol.messages import build, encode, request_class
from tidegate.records.builder import build_batch


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@pytest.mark.parametrize("transactional_id", [None, "tx-é"])
def test_same_bytes_as_the_generic_encoder(version: int, transactional_id: str | None) -> None:
    batches = [build_batch([(1000 + i, None, b"v" * (i * 70))]) for i in range(1, 4)]
    big = build_batch([(5, b"k", b"x" * 300) for _ in range(20)])  # lengths over 127
    ids = [uuid.uuid4(), uuid.uuid4()]
    topics = [("orders", ids[0], [(0, batches[0]), (7, big)]),
              ("ünïcode", ids[1], [(2, batches[2])])]
    data = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [
            {"name": name, "topic_id": tid,
             "partition_data": [{"index": p, "records": r} for p, r in parts]}
            for name, tid, parts in topics],
    }
    expected = encode(build(request_class(0, version), data))
    parts = encode_produce(version, -1, 30_000, topics, transactional_id)
    assert b"".join(parts) == expected
    assert any(part is big for part in parts)  # the batch itself, not a copy


def test_versions_outside_the_range_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_produce(MIN_VERSION - 1, 1, 1000, [])
    with pytest.raises(ValueError):
        encode_produce(MAX_VERSION + 1, 1, 1000, [])
