"""Request and response headers, and which header version each API version uses.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id
nullable legacy string. v2 (flexible requests) appends tagged fields. Response header
v0 is the correlation id; v1 (flexible responses) appends tagged fields — except that
ApiVersions responses always use v0 so a client can read the broker's answer before it
knows which versions the broker speaks.

Headers are parsed by hand (a dozen bytes) so that a request at a version we do not
know can still be answered with its correlation id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidegate.protocol.flexible import skip_tagged_fields

_FIXED = struct.Struct(">hhih")
_I32 = struct.Struct(">i")

API_VERSIONS_KEY = 18


class HeaderError(Exception):
    """The request header is malformed; the connection should be closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def parse_request_header_prefix(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Parse the v1 part of a request header; return it and the offset after it."""
    if len(frame) < _FIXED.size:
        raise HeaderError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, client_len = _FIXED.unpack_from(frame, 0)
    pos = _FIXED.size
    client_id: str | None = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise HeaderError("client_id runs past the end of the request")
        try:
            client_id = str(frame[pos:end], "utf-8")  # bytes or memoryview
        except UnicodeDecodeError as e:
            raise HeaderError("client_id is not valid UTF-8") from e
        pos = end
    elif client_len != -1:
        raise HeaderError(f"invalid client_id length {client_len}")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def parse_request_header(frame: bytes | memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    header, pos = parse_request_header_prefix(frame)
    if flexible:
        pos = skip_tagged_fields(frame, pos, len(frame), HeaderError)
    return header, pos


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    if flexible:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    if client_id is None:
        out = _FIXED.pack(api_key, api_version, correlation_id, -1)
    else:
        raw = client_id.encode("utf-8")
        out = _FIXED.pack(api_key, api_version, correlation_id, len(raw)) + raw
    return out + b"\x00" if flexible else out


def parse_response_header(frame: bytes | memoryview, flexible: bool) -> tuple[int, int]:
    if len(frame) < 4:
        raise HeaderError("response shorter than its header")
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = 4
    if flexible:
        pos = skip_tagged_fields(frame, pos, len(frame), HeaderError)
    return int(correlation_id), pos
