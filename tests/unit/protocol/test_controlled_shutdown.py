"""The hand-written ControlledShutdown codec: Kafka's bytes, round trips through the
generic `messages` functions, and malformed bodies refused as DecodeError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tidegate.protocol.controlled_shutdown import (
    RemainingPartition,
    request_for,
    response_for,
)
from tidegate.protocol.messages import (
    DecodeError,
    decode,
    encode,
    is_flexible,
    request_class,
    response_class,
)
from tidegate.server.dispatch import Dispatcher, default_dispatcher, register_cluster_apis


def test_request_bytes_per_version() -> None:
    assert encode(request_for(1, 3)) == bytes.fromhex("00000003")
    assert encode(request_for(2, 3, 77)) == bytes.fromhex("00000003" "000000000000004d")
    # v3 is flexible: an empty tagged-field section ends the body
    assert encode(request_for(3, 3, 77)) == bytes.fromhex("00000003" "000000000000004d" "00")
    assert [is_flexible(7, v) for v in (1, 2, 3)] == [False, False, True]


def test_response_bytes_legacy_and_compact() -> None:
    resp = response_for(2, ErrorCode.none, (("t", 1),))
    #                        error  count=1   len=1 "t"  partition 1
    assert encode(resp) == bytes.fromhex("0000" "00000001" "0001" "74" "00000001")
    resp3 = response_for(3, ErrorCode.not_controller, (("t", 1),))
    #                         error  N+1  len+1 "t" partition  tags tags
    assert encode(resp3) == bytes.fromhex("0029" "02" "02" "74" "00000001" "00" "00")


@given(st.integers(1, 3), st.integers(-1, 2**31 - 1), st.integers(-1, 2**62),
       st.lists(st.tuples(st.text(min_size=0, max_size=20), st.integers(0, 2**31 - 1)),
                max_size=5))
def test_round_trips(version: int, broker: int, epoch: int,
                     parts: list[tuple[str, int]]) -> None:
    req = request_for(version, broker, epoch)
    got = decode(request_class(7, version), encode(req))
    assert got.broker_id == broker  # type: ignore[attr-defined]
    assert got.broker_epoch == (epoch if version >= 2 else -1)  # type: ignore[attr-defined]
    resp = response_for(version, ErrorCode.stale_broker_epoch, tuple(parts))
    back = decode(response_class(7, version), encode(resp))
    assert back == resp
    assert back.remaining_partitions == tuple(  # type: ignore[attr-defined]
        RemainingPartition(t, p) for t, p in parts)


@pytest.mark.parametrize("body", [b"", b"\x00\x00", bytes.fromhex("0000" "7fffffff")])
def test_truncated_or_lying_bodies_are_decode_errors(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(response_class(7, 2), body)
    with pytest.raises(DecodeError):
        decode(request_class(7, 3), body[:3])


def test_advertised_only_in_cluster_mode() -> None:
    d: Dispatcher = default_dispatcher()
    assert 7 not in d.apis
    register_cluster_apis(d)
    api = d.apis[7]
    assert (api.name, api.min_version, api.max_version) == ("controlled_shutdown", 1, 3)
    assert d.supports(7, 3) and not d.supports(7, 0)
    # the controller's other operations are always served
    assert {43, 45, 46} <= set(d.apis)
