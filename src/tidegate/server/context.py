"""What a handler knows about the request it is answering, and how it frees its connection.

A connection runs its requests one after another (server/listener.py): the next one
starts only when this handler has finished. A handler whose effects are all done and
that only waits before answering (Produce, after its appends, waiting for the fsync that
moves the high watermark) calls `release()`; the connection may then start its next
request if that one is of the same API — a producer's next pipelined Produce, so that
both share one group-commit fsync. A request of any other API still waits for this
handler to finish, so it sees the effects published (the high watermark moved), as
it would on Kafka, which reads a connection's next request only once this one is
answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kio.static.protocol import Entity

from tidegate.protocol.messages import response_class


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # Set by `release()` (and by the listener when the handler finishes); None outside
    # a connection, e.g. when a test calls a handler directly.
    released: asyncio.Future[None] | None = field(default=None, compare=False, repr=False)
    # Who sent it and where (server/security.py): `User:ANONYMOUS` on PLAINTEXT, else
    # the SASL user or the client certificate's mapped subject; the listener's name
    # (Metadata answers with that listener's endpoints). `session`: the connection's
    # Session, for the SASL handlers.
    principal: str = "User:ANONYMOUS"
    listener: str = ""
    session: Any = field(default=None, compare=False, repr=False)

    @property
    def response_class(self) -> type[Entity]:
        return response_class(self.api_key, self.api_version)

    def release(self) -> None:
        """This request's effects are all done; only a wait remains before the answer.
        Call it after the last change to shared state, never before: from here on the
        connection's next request of the same API may run. Idempotent."""
        if self.released is not None and not self.released.done():
            self.released.set_result(None)
