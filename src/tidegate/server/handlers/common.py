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


async def partition_count(broker: Broker, name: str, wanted: int = 1) -> int:
    """Partitions of topic `name` in the cluster (0: no such topic), trusting this
    broker's metadata view only when it has at least `wanted` of them.

    Otherwise the topic admin's source of truth is asked (ZooKeeper's topic znode in a
    cluster): a broker's view follows ZooKeeper a few milliseconds late, and clients
    use a topic through any broker right after creating or growing it through another
    (librdkafka's tests commit offsets to the group's coordinator at once). Kafka's
    brokers, fed by the controller's UpdateMetadata, show the same lag less often.
    The view is not this broker's logs: in a cluster those hold only the topics with a
    replica here."""
    tv = broker.metadata.topic(name)
    have = 0 if tv is None else len(tv.partitions)
    if have >= wanted:
        return have
    found = await broker.topic_admin.find_topic(name)
    return have if found is None else max(have, found.partitions)


def error_fields(exc: BaseException) -> tuple[ErrorCode, str]:
    if isinstance(exc, KafkaError):
        return exc.code, str(exc)
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"
