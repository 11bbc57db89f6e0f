"""Small helpers shared by handlers: topic lookup by name or id, error payloads."""

from __future__ import annotations

import uuid
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.server.broker import Broker

ZERO_UUID = uuid.UUID(int=0)


def resolve_topic(broker: Broker, topic: Any) -> tuple[str | None, uuid.UUID | None]:
    """Topic name and id of a request topic that carries a name, an id, or both."""
    name = getattr(topic, "name", None) or getattr(topic, "topic", None)
    topic_id = getattr(topic, "topic_id", None)
    if name:
        tv = broker.metadata.topic(name)
        return name, (tv.topic_id if tv else None)
    if topic_id is not None and topic_id != ZERO_UUID:
        tv = broker.metadata.topic_by_id(topic_id)
        if tv is not None:
            return tv.name, tv.topic_id
        return None, topic_id
    return None, None


def error_fields(exc: BaseException) -> tuple[ErrorCode, str]:
    if isinstance(exc, KafkaError):
        return exc.code, str(exc)
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"
