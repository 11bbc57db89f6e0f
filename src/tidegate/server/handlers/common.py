"""Small helpers shared by handlers: topic lookup by name or id, error payloads."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
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
    """Partitions of topic `name` in the cluster (0: no such topic): `partition_counts`
    of one topic."""
    return (await partition_counts(broker, {name: wanted}))[name]


async def partition_counts(broker: Broker, wanted: Mapping[str, int]) -> dict[str, int]:
    """Partitions of each topic named (0: no such topic), trusting this broker's
    metadata view only for a topic of which it has at least `wanted[name]`.

    For the others the topic admin's source of truth is asked (ZooKeeper's topic znode
    in a cluster), all at once: a broker's view follows ZooKeeper a few milliseconds
    late, and clients use a topic through any broker right after creating or growing it
    through another (librdkafka's tests commit offsets to the group's coordinator at
    once). Kafka's brokers, fed by the controller's UpdateMetadata, show the same lag
    less often. The view is not this broker's logs: in a cluster those hold only the
    topics with a replica here. Callers ask only for topics the principal is authorized
    for: a lookup costs a ZooKeeper read, and Kafka answers TOPIC_AUTHORIZATION_FAILED
    whether or not the topic exists."""
    counts: dict[str, int] = {}
    missing: list[str] = []
    for name, n in wanted.items():
        tv = broker.metadata.topic(name)
        counts[name] = have = 0 if tv is None else len(tv.partitions)
        if have < n:
            missing.append(name)
    if missing:
        found = await asyncio.gather(*map(broker.topic_admin.find_topic, missing))
        for name, f in zip(missing, found, strict=True):
            if f is not None:
                counts[name] = max(counts[name], f.partitions)
    return counts


async def topic_names(broker: Broker, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The names of the topics with these ids (an id no topic has is left out): the
    metadata view's, and for the ids it lacks (in a cluster, a topic created through
    another broker moments ago) the topic admin's truth, in one lookup for them all
    (ZooKeeper in a cluster: server/cluster/topic_admin.py's `find_topic_ids`)."""
    out: dict[uuid.UUID, str] = {}
    missing: set[uuid.UUID] = set()
    for topic_id in ids:
        if topic_id == ZERO_UUID:
            continue
        tv = broker.metadata.topic_by_id(topic_id)
        if tv is None:
            missing.add(topic_id)
        else:
            out[topic_id] = tv.name
    if missing:
        out.update(await broker.topic_admin.find_topic_ids(missing))
        # the view may have caught up meanwhile (the lookup skips the topics it knows)
        for topic_id in missing - out.keys():
            if (tv := broker.metadata.topic_by_id(topic_id)) is not None:
                out[topic_id] = tv.name
    return out


def error_fields(exc: BaseException) -> tuple[ErrorCode, str]:
    if isinstance(exc, KafkaError):
        return exc.code, str(exc)
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"
