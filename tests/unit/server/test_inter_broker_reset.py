"""An inter-broker connection reset by the peer right after it connected (a broker killed
as we connect): uvloop raises RuntimeError on the write, which must surface as the
retriable `InterBrokerError` (logged as a delivery failure), not as an unknown error with
a traceback (seen in the cluster soak)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from tidegate.protocol.messages import build, request_class
from tidegate.server.cluster.inter_broker import InterBrokerConnection, InterBrokerError


def test_a_connection_reset_after_connecting_is_an_inter_broker_error() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = int(server.sockets[0].getsockname()[1])
        conn = InterBrokerConnection("127.0.0.1", port, "test", timeout=2)
        connect = conn._connect

        async def connect_then_reset() -> None:
            await connect()
            assert conn._writer is not None
            conn._writer.transport.abort()  # what the peer's reset does to the transport
            await asyncio.sleep(0.05)  # uvloop closes the handle on a later iteration

        conn._connect = connect_then_reset  # type: ignore[method-assign]
        with pytest.raises(InterBrokerError, match="failed"):
            await conn.request(18, 0, build(request_class(18, 0), {}), timeout=1)
        assert not conn.connected
        server.close()
        await server.wait_closed()

    uvloop.run(main())
