"""A minimal blocking Kafka client over a raw socket, for sending exact (and broken) bytes."""

from __future__ import annotations

import socket
import struct
from typing import Any

from tidegate.protocol.headers import encode_request_header, parse_response_header
from tidegate.protocol.messages import build, decode, encode, request_class, response_class


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def recv_frame(self) -> bytes | None:
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, TimeoutError):
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def request_bytes(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        cls = request_class(api_key, version)
        flexible = bool(getattr(cls, "__flexible__", False))
        return encode_request_header(api_key, version, self.correlation, "raw", flexible) + body

    def call(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        body = encode(build(request_class(api_key, version), data))
        self.send_frame(self.request_bytes(api_key, version, body))
        frame = self.recv_frame()
        assert frame is not None, "connection closed"
        cls = response_class(api_key, version)
        flexible = bool(getattr(cls, "__flexible__", False)) and api_key != 18
        corr, pos = parse_response_header(frame, flexible)
        assert corr == self.correlation
        return decode(cls, frame, pos)
