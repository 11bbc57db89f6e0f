"""Sans-IO client side of one broker connection: requests out, responses in.

`ClientConnection` turns request entities into frames (choosing the header version from
the request's flexibility), assigns correlation ids, keeps the in-flight table and
decodes response frames back into entities. It never touches a socket or a clock.

Invariants:
- Kafka answers requests on a connection in the order they were sent, so a response
  must carry the correlation id of the oldest in-flight request; anything else is a
  `ProtocolError` and the connection must be closed.
- Requests that expect no response (Produce with acks=0) never enter the table.
- Correlation ids count up from 0 and wrap at int32 max.
- ApiVersions responses always use header v0. A broker that does not speak the
  requested ApiVersions version answers at v0 with UNSUPPORTED_VERSION, so such a
  response that does not decode at the requested version is decoded at v0.

`negotiate_versions` picks, per API, the highest version both sides support.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.static.protocol import Entity

from tidegate.client.errors import ProtocolError
from tidegate.client.lenient_responses import LENIENT_RESPONSES
from tidegate.protocol.framing import FrameDecoder, FrameError, encode_frame
from tidegate.protocol.headers import HeaderError, encode_request_header, parse_response_header
from tidegate.protocol.messages import (
    DecodeError,
    decode,
    encode,
    is_flexible,
    request_class,
    response_class,
)

__all__ = [
    "CLIENT_VERSIONS",
    "ClientConnection",
    "InFlight",
    "negotiate_versions",
]

API_VERSIONS = 18
_INT32_MAX = 2_147_483_647
_SIZE = struct.Struct(">i")

# The versions this client's code reads and writes, per API key. Request bodies are
# built version-agnostically (protocol.messages.build), and responses are read with
# `view`, so the ranges are those whose field sets the client code handles.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 13),    # Produce (v13: topics by id)
    1: (4, 18),    # Fetch (v13+: topics by id)
    2: (1, 11),    # ListOffsets
    3: (1, 13),    # Metadata
    18: (0, 4),    # ApiVersions
    19: (2, 7),    # CreateTopics
    20: (1, 6),    # DeleteTopics (v6: topics as entities)
    21: (0, 2),    # DeleteRecords
    29: (1, 3),    # DescribeAcls
    30: (1, 3),    # CreateAcls
    31: (1, 3),    # DeleteAcls
    32: (1, 4),    # DescribeConfigs
    35: (1, 4),    # DescribeLogDirs (v4: volume total/usable bytes)
    37: (0, 3),    # CreatePartitions
    44: (0, 1),    # IncrementalAlterConfigs
    48: (0, 1),    # DescribeClientQuotas
    49: (0, 1),    # AlterClientQuotas
    50: (0, 0),    # DescribeUserScramCredentials
    51: (0, 0),    # AlterUserScramCredentials
    60: (0, 1),    # DescribeCluster
}


def negotiate_versions(
    broker: Mapping[int, tuple[int, int]],
    client: Mapping[int, tuple[int, int]] = CLIENT_VERSIONS,
) -> dict[int, int]:
    """For each API both sides know, the highest version in both ranges.

    APIs whose ranges do not overlap are left out; using one then raises
    UnsupportedVersionError at the call site (see `net.BrokerConnection.version`).
    """
    chosen: dict[int, int] = {}
    for key, (cmin, cmax) in client.items():
        theirs = broker.get(key)
        if theirs is None:
            continue
        lo, hi = max(cmin, theirs[0]), min(cmax, theirs[1])
        if lo <= hi:
            chosen[key] = hi
    return chosen


@dataclass(frozen=True, slots=True)
class InFlight:
    correlation_id: int
    api_key: int
    api_version: int


class ClientConnection:
    """Encodes requests and matches response frames to them; see the module docstring."""

    def __init__(self, client_id: str | None = "tidegate",
                 max_frame_bytes: int = 2_147_483_647) -> None:
        self.client_id = client_id
        self._next_id = 0
        self._in_flight: deque[InFlight] = deque()
        self._decoder = FrameDecoder(max_frame_bytes)

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def in_flight(self) -> list[InFlight]:
        return list(self._in_flight)

    def _correlation_id(self) -> int:
        cid = self._next_id
        self._next_id = 0 if cid >= _INT32_MAX else cid + 1
        return cid

    def send_request(self, request: Entity, *, expect_response: bool = True) -> tuple[int, bytes]:
        """Frame `request`; return its correlation id and the bytes to write."""
        cls: Any = type(request)
        api_key, version = int(cls.__api_key__), int(cls.__version__)
        cid = self._correlation_id()
        header = encode_request_header(api_key, version, cid, self.client_id,
                                       is_flexible(api_key, version))
        data = encode_frame(header + encode(request))
        if expect_response:
            self._in_flight.append(InFlight(cid, api_key, version))
        return cid, data

    def send_parts(self, api_key: int, version: int, body: list[bytes], *,
                   expect_response: bool = True) -> tuple[int, list[bytes]]:
        """`send_request` for a body the caller encoded, as parts (the producer's: its
        record batches are not copied into one body): return the correlation id and
        the frame as parts to write in order."""
        cid = self._correlation_id()
        header = encode_request_header(api_key, version, cid, self.client_id,
                                       is_flexible(api_key, version))
        size = len(header) + sum(map(len, body))
        if expect_response:
            self._in_flight.append(InFlight(cid, api_key, version))
        return cid, [_SIZE.pack(size) + header, *body]

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[tuple[InFlight, Entity]]:
        """Feed received bytes; return each completed (request, response) in order."""
        try:
            frames = self._decoder.feed(data)
        except FrameError as e:
            raise ProtocolError(f"bad response frame: {e}") from e
        return [self._response(frame) for frame in frames]

    def receive_frames(self, frames: list[bytes | memoryview]) -> list[tuple[InFlight, Entity]]:
        """`receive_data` for frames already split (client/stream.py reads them in
        place): each frame's bytes without its size prefix."""
        return [self._response(frame) for frame in frames]

    def _response(self, frame: bytes | memoryview) -> tuple[InFlight, Entity]:
        if not self._in_flight:
            raise ProtocolError("received a response with no request in flight")
        req = self._in_flight[0]
        cls = LENIENT_RESPONSES.get((req.api_key, req.api_version)) or \
            response_class(req.api_key, req.api_version)
        flexible = bool(getattr(cls, "__flexible__", False)) and req.api_key != API_VERSIONS
        try:
            cid, pos = parse_response_header(frame, flexible)
        except HeaderError as e:
            raise ProtocolError(f"bad response header: {e}") from e
        if cid != req.correlation_id:
            raise ProtocolError(
                f"correlation id {cid} does not match the oldest request in flight "
                f"({req.correlation_id}); the broker answered out of order")
        self._in_flight.popleft()
        try:
            return req, decode(cls, frame, pos)
        except DecodeError as e:
            if req.api_key == API_VERSIONS and req.api_version > 0:
                try:
                    return req, decode(response_class(API_VERSIONS, 0), frame, pos)
                except DecodeError:
                    pass
            raise ProtocolError(f"cannot decode response to api {req.api_key} "
                                f"v{req.api_version}: {e}") from e

    def fail_all(self) -> list[InFlight]:
        """Forget every in-flight request (the connection is gone); return them."""
        pending = list(self._in_flight)
        self._in_flight.clear()
        return pending


def request_for(api_key: int, version: int) -> type[Entity]:
    """The request class (re-exported so callers need not import protocol.messages)."""
    return request_class(api_key, version)
