"""What a handler knows about the request it is answering."""

from __future__ import annotations

from dataclasses import dataclass

from kio.static.protocol import Entity

from tidegate.protocol.messages import response_class


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str

    @property
    def response_class(self) -> type[Entity]:
        return response_class(self.api_key, self.api_version)
