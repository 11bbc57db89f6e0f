"""DescribeTransactions answers with TransactionStartTimeMs -1 (no transaction running,
unknown id), which kio's datetime field cannot decode; the client decodes them with
`client.lenient_responses` and reads -1."""

from __future__ import annotations

import pytest

from tidegate.client.connection import ClientConnection
from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_response_header
from tidegate.protocol.messages import build, decode, encode, ms, request_class, response_class

STATE = {"error_code": 0, "transactional_id": "app-1", "transaction_state": "Empty",
         "transaction_timeout": 60000, "transaction_start_time": -1, "producer_id": 7,
         "producer_epoch": 3, "topics": [{"topic": "t", "partitions": [0, 2]}]}


def answer(start_time_ms: int) -> object:
    conn = ClientConnection("me")
    cid, _ = conn.send_request(build(request_class(65, 0), {"transactional_ids": ["app-1"]}))
    body = encode(build(response_class(65, 0), {
        "throttle_time": 0,
        "transaction_states": [{**STATE, "transaction_start_time": start_time_ms}]}))
    [(req, resp)] = conn.receive_data(encode_frame(encode_response_header(cid, True) + body))
    assert req.correlation_id == cid
    return resp


@pytest.mark.parametrize("start", [-1, 0, 1_795_515_080_335])
def test_start_time_is_read_as_milliseconds_including_minus_one(start: int) -> None:
    resp = answer(start)
    [s] = resp.transaction_states  # type: ignore[attr-defined]
    assert ms(s.transaction_start_time) == start
    assert (s.transactional_id, s.transaction_state, int(s.producer_id),
            int(s.producer_epoch)) == ("app-1", "Empty", 7, 3)
    assert ms(s.transaction_timeout) == 60000
    assert [(t.topic, tuple(t.partitions)) for t in s.topics] == [("t", (0, 2))]


def test_kio_alone_cannot_decode_minus_one() -> None:
    """Why the lenient class exists: were kio fixed, this test would say so."""
    body = encode(build(response_class(65, 0), {"throttle_time": 0,
                                                "transaction_states": [STATE]}))
    with pytest.raises(Exception, match="negative"):
        decode(response_class(65, 0), body)
