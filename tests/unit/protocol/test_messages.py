"""Message building and decoding across versions, and fuzzing the request decoder."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.protocol.headers import (
    HeaderError,
    encode_request_header,
    parse_request_header,
)
from tidegate.protocol.messages import (
    DecodeError,
    build,
    decode,
    encode,
    request_class,
    response_class,
)

METADATA = {
    "throttle_time": 5,
    "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
    "cluster_id": "c1",
    "controller_id": 1,
    "topics": [
        {
            "error_code": 0,
            "name": "t",
            "topic_id": uuid.UUID(int=7),
            "is_internal": False,
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": 0,
                    "leader_id": 1,
                    "replica_nodes": [1],
                    "isr_nodes": [1],
                }
            ],
        }
    ],
}


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_response_builds_at_every_version(version: int) -> None:
    cls = response_class(3, version)
    entity = build(cls, METADATA)
    back = decode(cls, encode(entity))
    assert back == entity
    assert back.brokers[0].port == 9092  # type: ignore[attr-defined]
    assert back.topics[0].partitions[0].leader_id == 1  # type: ignore[attr-defined]


def test_trailing_bytes_are_a_decode_error() -> None:
    cls = request_class(18, 3)
    body = encode(build(cls, {"client_software_name": "x", "client_software_version": "1"}))
    assert decode(cls, body).client_software_name == "x"  # type: ignore[attr-defined]
    with pytest.raises(DecodeError):
        decode(cls, body + b"\x00", strict=True)
    assert decode(cls, body + b"\x00") == decode(cls, body)
    with pytest.raises(DecodeError):
        decode(cls, body[:-2])


def test_request_header_round_trip() -> None:
    raw = encode_request_header(3, 12, 77, "me", flexible=True)
    header, pos = parse_request_header(raw, flexible=True)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        77,
        "me",
    )
    assert pos == len(raw)


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_header_parser_never_crashes(raw: bytes) -> None:
    try:
        parse_request_header(raw, flexible=True)
    except HeaderError:
        pass


@given(
    st.sampled_from([(0, 9), (1, 12), (3, 12), (2, 7), (19, 7), (32, 4)]), st.binary(max_size=200)
)
# no deadline: an API's first example imports its kio schema (0.4 s on a loaded machine)
@settings(max_examples=300, deadline=None)
def test_request_decoder_only_raises_decode_error(api: tuple[int, int], body: bytes) -> None:
    try:
        decode(request_class(*api), body)
    except DecodeError:
        pass


@pytest.mark.parametrize(("api_key", "version"), [(1, 12), (1, 17), (2, 7)])
def test_load_codecs_builds_what_the_first_request_needs(api_key: int, version: int) -> None:
    """`load_codecs` (called by a consumer's start) leaves the request's writer and the
    response's reader cached, so the first Fetch / ListOffsets builds neither."""
    from tidegate.protocol import messages

    messages.load_codecs(api_key, version)
    writer_misses = messages._writer.cache_info().misses
    reader_misses = messages._reader.cache_info().misses
    messages._writer(request_class(api_key, version))
    messages._reader(response_class(api_key, version))
    assert messages._writer.cache_info().misses == writer_misses
    assert messages._reader.cache_info().misses == reader_misses
