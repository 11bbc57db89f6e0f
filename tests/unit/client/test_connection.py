"""The sans-IO client connection: framing, correlation ids, header versions."""

from __future__ import annotations

from typing import Any

import pytest
from kio.static.protocol import Entity

from tidegate.client.connection import (
    CLIENT_VERSIONS,
    ClientConnection,
    negotiate_versions,
)
from tidegate.client.errors import ProtocolError
from tidegate.protocol.framing import FrameDecoder, encode_frame
from tidegate.protocol.headers import encode_response_header, parse_request_header
from tidegate.protocol.messages import (
    build,
    decode,
    encode,
    is_flexible,
    request_class,
    response_class,
)


def metadata_request(version: int) -> Entity:
    return build(request_class(3, version), {"topics": [{"name": "t"}]})


def server_parse(frame: bytes) -> tuple[int, int, int, Entity]:
    """Parse a request frame as the broker would."""
    api_key, version = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:4], "big")
    header, pos = parse_request_header(frame, is_flexible(api_key, version))
    return api_key, version, header.correlation_id, decode(request_class(api_key, version),
                                                           frame, pos)


def response_frame(api_key: int, version: int, cid: int, data: dict[str, Any]) -> bytes:
    cls = response_class(api_key, version)
    flexible = bool(getattr(cls, "__flexible__", False)) and api_key != 18
    return encode_frame(encode_response_header(cid, flexible) + encode(build(cls, data)))


METADATA_RESPONSE = {"brokers": [{"node_id": 1, "host": "h", "port": 9}], "topics": []}


@pytest.mark.parametrize("version", [1, 8, 9, 12])
def test_request_framing_and_header_version(version: int) -> None:
    conn = ClientConnection("me")
    cid, data = conn.send_request(metadata_request(version))
    (frame,) = FrameDecoder().feed(data)
    api_key, v, got_cid, body = server_parse(frame)
    assert (api_key, v, got_cid) == (3, version, cid)
    assert body.topics[0].name == "t"
    # Flexible requests (v9+) use header v2: a tagged-fields byte after client_id.
    _, pos = parse_request_header(frame, flexible=version >= 9)
    assert pos == 2 + 2 + 4 + 2 + len("me") + (1 if version >= 9 else 0)


def test_correlation_ids_increase_and_responses_match_in_order() -> None:
    conn = ClientConnection("me")
    ids = [conn.send_request(metadata_request(12))[0] for _ in range(3)]
    assert ids == [0, 1, 2]
    assert conn.in_flight_count == 3
    wire = b"".join(response_frame(3, 12, cid, METADATA_RESPONSE) for cid in ids)
    # Deliver in awkward pieces: frames split across reads.
    got = []
    for i in range(0, len(wire), 7):
        got += conn.receive_data(wire[i:i + 7])
    assert [req.correlation_id for req, _ in got] == ids
    assert all(resp.brokers[0].host == "h" for _, resp in got)
    assert conn.in_flight_count == 0


def test_out_of_order_response_is_a_protocol_error() -> None:
    conn = ClientConnection()
    conn.send_request(metadata_request(12))
    second, _ = conn.send_request(metadata_request(12))
    with pytest.raises(ProtocolError, match="does not match"):
        conn.receive_data(response_frame(3, 12, second, METADATA_RESPONSE))


def test_unsolicited_response_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="no request in flight"):
        ClientConnection().receive_data(response_frame(3, 12, 0, METADATA_RESPONSE))


def test_requests_without_response_are_not_tracked() -> None:
    conn = ClientConnection()
    req = build(request_class(0, 9), {"acks": 0, "timeout": 100, "topic_data": []})
    cid0, _ = conn.send_request(req, expect_response=False)
    cid1, _ = conn.send_request(metadata_request(12))
    assert (cid0, cid1) == (0, 1)
    assert [f.correlation_id for f in conn.in_flight()] == [1]
    ((req_info, _),) = conn.receive_data(response_frame(3, 12, 1, METADATA_RESPONSE))
    assert req_info.correlation_id == 1


def test_correlation_id_wraps_at_int32_max() -> None:
    conn = ClientConnection()
    conn._next_id = 2**31 - 1
    assert conn.send_request(metadata_request(1))[0] == 2**31 - 1
    assert conn.send_request(metadata_request(1))[0] == 0


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    conn = ClientConnection()
    cid, _ = conn.send_request(build(request_class(18, 3), {}))
    frame = response_frame(18, 3, cid, {
        "error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}]})
    ((_, resp),) = conn.receive_data(frame)
    assert resp.api_keys[0].max_version == 12


def test_api_versions_fallback_to_v0_on_unsupported_version() -> None:
    conn = ClientConnection()
    cid, _ = conn.send_request(build(request_class(18, 4), {}))
    # A broker that does not know v4 answers with a v0 body and UNSUPPORTED_VERSION.
    frame = response_frame(18, 0, cid, {
        "error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]})
    ((_, resp),) = conn.receive_data(frame)
    assert resp.error_code.value == 35
    assert resp.api_keys[0].max_version == 2


def test_garbage_response_is_a_protocol_error() -> None:
    conn = ClientConnection()
    cid, _ = conn.send_request(metadata_request(12))
    with pytest.raises(ProtocolError, match="cannot decode"):
        conn.receive_data(encode_frame(cid.to_bytes(4, "big") + b"\x00\xff\xff"))
    with pytest.raises(ProtocolError, match="bad response frame"):
        ClientConnection(max_frame_bytes=10).receive_data(b"\x00\x00\x10\x00")


def test_fail_all_returns_pending() -> None:
    conn = ClientConnection()
    conn.send_request(metadata_request(12))
    conn.send_request(metadata_request(12))
    assert [f.correlation_id for f in conn.fail_all()] == [0, 1]
    assert conn.in_flight_count == 0


def test_negotiate_picks_highest_common_version() -> None:
    broker = {3: (0, 12), 0: (3, 9), 1: (4, 17), 18: (0, 3), 999: (0, 1), 19: (8, 9)}
    chosen = negotiate_versions(broker)
    assert chosen[3] == 12 and chosen[0] == 9 and chosen[1] == 17 and chosen[18] == 3
    assert 999 not in chosen  # we do not speak it
    assert 19 not in chosen  # ranges do not overlap (we speak 2..7)
    assert 2 not in chosen  # the broker does not speak it
    assert CLIENT_VERSIONS[3][1] == 13
