"""A connection from this broker to another one (replica fetches, later markers).

Deliberately small: one request in flight at a time per connection, which is how
Kafka's replica fetcher uses its `NetworkClient` too. Requests are kio entities; the
frame and header codecs are the ones the listener uses (tidegate.protocol). The
connection says who it is (`client.id` = `broker-<id>-fetcher-<n>`), so the leader's
logs name it.

Errors: any socket error (uvloop's RuntimeError on a transport reset under us included),
a timeout or a malformed answer raises `InterBrokerError`
after closing the connection; the caller backs off (`replica.fetch.backoff.ms`) and
connects again, possibly to a new leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from kio.static.protocol import Entity

from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_request_header, parse_response_header
from tidegate.protocol.messages import DecodeError, decode, encode, is_flexible, response_class

__all__ = ["InterBrokerConnection", "InterBrokerError"]

_SIZE = struct.Struct(">i")
_MAX_RESPONSE = 256 << 20


class InterBrokerError(Exception):
    pass


class InterBrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20), self.timeout)
        except (OSError, TimeoutError) as e:
            raise InterBrokerError(f"cannot connect to {self.host}:{self.port}: {e}") from e

    async def request(self, api_key: int, api_version: int, body: Entity,
                      timeout: float | None = None) -> Any:
        """Send one request and return its decoded response."""
        if not self.connected:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._correlation
        flexible = is_flexible(api_key, api_version)
        header = encode_request_header(api_key, api_version, cid, self.client_id, flexible)
        try:
            self._writer.write(encode_frame(header + encode(body)))
            await self._writer.drain()
            async with asyncio.timeout(timeout or self.timeout):
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                if not 0 < size <= _MAX_RESPONSE:
                    raise InterBrokerError(f"bad response size {size}")
                frame = await self._reader.readexactly(size)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, RuntimeError) as e:
            # RuntimeError: uvloop's write on a transport the peer reset since we
            # connected (a broker killed as we connect): a network error like the others
            await self.close()
            raise InterBrokerError(f"request to {self.host}:{self.port} failed: {e!r}") from e
        try:
            got, pos = parse_response_header(frame, flexible and api_key != 18)
            if got != cid:
                raise InterBrokerError(f"correlation id {got} != {cid}")
            return decode(response_class(api_key, api_version), frame, pos)
        except (DecodeError, ValueError) as e:
            await self.close()
            raise InterBrokerError(f"malformed response from {self.host}:{self.port}: {e}") from e

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
