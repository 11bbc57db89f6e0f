"""Malformed and hostile input never stops the broker or disturbs other connections.

Each case sends exact bytes over a raw socket and checks the Java broker's answer
(an error code, or a closed connection), then checks that a separate connection
still produces and fetches normally and the log is intact.
"""

from __future__ import annotations

import os
import random
import struct

import pytest
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

from tidegate.records.builder import build_batch


def _healthy(broker: BrokerProcess, topic: str = "health") -> None:
    c = RawClient(broker.bootstrap)
    try:
        md = c.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": True})
        assert md.topics[0].error_code == 0
        batch = build_batch([(1_700_000_000_000, b"k", b"v", ())])
        r = c.call(
            0,
            9,
            {
                "acks": -1,
                "timeout": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
            },
        )
        part = r.responses[0].partition_responses[0]
        assert part.error_code == 0, part
        f = c.call(
            1,
            12,
            {
                "max_wait": 0,
                "min_bytes": 0,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": part.base_offset,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
        )
        assert f.responses[0].partitions[0].records, "fetch returned nothing"
    finally:
        c.close()
    assert broker.proc is not None and broker.proc.poll() is None, "broker died"


def test_oversized_and_negative_frames_close_only_that_connection(
    shared_broker: BrokerProcess,
) -> None:
    for size in (200 * 1024 * 1024, -5, 2**31 - 1):
        c = RawClient(shared_broker.bootstrap)
        c.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert c.is_closed_by_peer()
        c.close()
    _healthy(shared_broker)


def test_unknown_api_and_unsupported_versions(shared_broker: BrokerProcess) -> None:
    c = RawClient(shared_broker.bootstrap)
    c.send_frame(struct.pack(">hhih", 999, 0, 1, -1))
    assert c.is_closed_by_peer()
    c = RawClient(shared_broker.bootstrap)
    c.send_frame(struct.pack(">hhih", 3, 99, 1, -1))  # Metadata v99
    assert c.is_closed_by_peer()
    # ApiVersions at an unknown version: answered at v0 with UNSUPPORTED_VERSION (35).
    c = RawClient(shared_broker.bootstrap)
    c.send_frame(struct.pack(">hhih", 18, 77, 42, -1) + b"\x00")
    frame = c.recv_frame()
    assert frame is not None
    corr, code = struct.unpack_from(">ih", frame, 0)
    assert (corr, code) == (42, 35)
    (count,) = struct.unpack_from(">i", frame, 6)
    assert count > 5
    c.close()
    _healthy(shared_broker)


def test_truncated_and_garbled_bodies(shared_broker: BrokerProcess) -> None:
    c = RawClient(shared_broker.bootstrap)
    req = c.request_bytes(3, 12, b"")  # Metadata with no body at all
    c.send_frame(req)
    assert c.is_closed_by_peer()
    # A compact array claiming 2^32 topics: kio would try to allocate it.
    c = RawClient(shared_broker.bootstrap)
    c.send_frame(c.request_bytes(3, 12, b"\xff\xff\xff\xff\x0f\x01\x00\x00"))
    assert c.is_closed_by_peer()
    rng = random.Random(7)
    for _ in range(150):
        c = RawClient(shared_broker.bootstrap)
        api, ver = rng.choice([(0, 9), (1, 12), (3, 12), (2, 7), (19, 7), (32, 4), (18, 3)])
        body = os.urandom(rng.randint(0, 80))
        c.send_frame(c.request_bytes(api, ver, body))
        c.is_closed_by_peer(timeout=2)
        c.close()
    _healthy(shared_broker)


def _produce_raw(c: RawClient, topic: str, records: bytes) -> int:
    r = c.call(
        0,
        9,
        {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return int(r.responses[0].partition_responses[0].error_code)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        ("crc", 2),  # CORRUPT_MESSAGE
        ("magic", 87),  # INVALID_RECORD, as Kafka 4.x answers
        ("length_short", 2),
        ("length_long", 2),
        ("count", 87),  # INVALID_RECORD
        ("acks", 21),  # INVALID_REQUIRED_ACKS
    ],
)
def test_bad_batches_get_kafka_error_codes(
    shared_broker: BrokerProcess, mutate: str, expected: int
) -> None:
    c = RawClient(shared_broker.bootstrap)
    c.call(3, 12, {"topics": [{"name": "badbatch"}], "allow_auto_topic_creation": True})
    batch = bytearray(
        build_batch(
            [(1_700_000_000_000, b"k", b"v" * 20, ()), (1_700_000_000_001, b"k2", b"w", ())]
        )
    )
    if mutate == "acks":
        r = c.call(
            0,
            9,
            {
                "acks": 2,
                "timeout": 5000,
                "topic_data": [
                    {"name": "badbatch", "partition_data": [{"index": 0, "records": bytes(batch)}]}
                ],
            },
        )
        assert r.responses[0].partition_responses[0].error_code == expected
        return
    if mutate == "crc":
        batch[-1] ^= 0xFF
    elif mutate == "magic":
        batch[16] = 1
    elif mutate == "length_short":
        struct.pack_into(">i", batch, 8, 10)
    elif mutate == "length_long":
        struct.pack_into(">i", batch, 8, len(batch) + 100)
    elif mutate == "count":
        struct.pack_into(">i", batch, 57, 5)
        from tidegate.records.batch import compute_crc

        struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    before = c.call(
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": "badbatch", "partitions": [{"partition_index": 0, "timestamp": -1}]}
            ],
        },
    )
    assert _produce_raw(c, "badbatch", bytes(batch)) == expected
    after = c.call(
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": "badbatch", "partitions": [{"partition_index": 0, "timestamp": -1}]}
            ],
        },
    )
    assert before.topics[0].partitions[0].offset == after.topics[0].partitions[0].offset
    c.close()
    _healthy(shared_broker, "badbatch")


def test_internal_topics_are_protected(shared_broker: BrokerProcess) -> None:
    c = RawClient(shared_broker.bootstrap)
    batch = build_batch([(1_700_000_000_000, b"k", b"v", ())])
    r = c.call(
        0,
        9,
        {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": batch}]}
            ],
        },
    )
    assert r.responses[0].partition_responses[0].error_code == 17  # INVALID_TOPIC_EXCEPTION
    r = c.call(20, 6, {"topics": [{"name": "__consumer_offsets"}], "timeout": 5000})
    assert r.responses[0].error_code == 17
    c.close()
    _healthy(shared_broker)


def _produce_response(c: RawClient, topic: str, records: bytes) -> object:
    r = c.call(
        0,
        9,
        {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return r.responses[0].partition_responses[0]


def _corrupt_records_valid_crc() -> bytes:
    from tidegate.records.batch import HEADER_SIZE, compute_crc

    batch = bytearray(build_batch([(1_700_000_000_000, b"k", b"v" * 20, ())]))
    batch[HEADER_SIZE] = 0x7E  # the first record's length varint: 63, past the batch's end
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def test_bad_records_inside_a_valid_batch(shared_broker: BrokerProcess) -> None:
    """Valid CRC but corrupt records, a keyless record on a compacted topic and a zstd
    bomb: each gets its Kafka error code, nothing is written, the broker keeps serving."""
    from tidegate.records.compression import Codec

    c = RawClient(shared_broker.bootstrap)
    try:
        c.call(3, 12, {"topics": [{"name": "badrecords"}], "allow_auto_topic_creation": True})
        r = c.call(
            19,
            5,
            {
                "topics": [
                    {
                        "name": "compactedbad",
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": "cleanup.policy", "value": "compact"}],
                    }
                ],
                "timeout_ms": 5000,
                "validate_only": False,
            },
        )
        assert r.topics[0].error_code == 0, r
        part = _produce_response(c, "badrecords", _corrupt_records_valid_crc())
        assert part.error_code == 2, part  # CORRUPT_MESSAGE
        keyless = build_batch(
            [(1_700_000_000_000, b"k", b"v", ()), (1_700_000_000_001, None, b"w", ())]
        )
        part = _produce_response(c, "compactedbad", keyless)
        assert part.error_code == 87, part  # INVALID_RECORD
        assert [e.batch_index for e in part.record_errors] == [1]
        assert "without key" in (part.record_errors[0].batch_index_error_message or "")
        bomb = build_batch([(1_700_000_000_000, b"k", bytes(65 << 20), ())], compression=Codec.ZSTD)
        assert len(bomb) < 1 << 20
        part = _produce_response(c, "badrecords", bomb)
        assert part.error_code == 87, part
        # keyed records are fine on the compacted topic
        ok = _produce_response(
            c, "compactedbad", build_batch([(1_700_000_000_000, b"k", b"v", ())])
        )
        assert ok.error_code == 0 and ok.base_offset == 0, ok
    finally:
        c.close()
    _healthy(shared_broker, "badrecords")
