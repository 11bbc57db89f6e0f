"""DescribeTopicPartitions (API 75, KIP-966): Metadata's topic part, paginated.

As Kafka's DescribeTopicPartitionsRequestHandler: the topics named (or, when none are
named, every topic the principal may DESCRIBE; the others are silently left out, as in
Metadata), sorted by name, from the request's `cursor` on: topics before the cursor's
topic are skipped and the cursor's topic starts at its partition index. Partitions are
answered in order until `response_partition_limit` (capped at Kafka's
`max.request.partition.size.limit`, 2000) are in the response; when that cuts the list,
`next_cursor` names the topic and partition to ask from next (the next topic's
partition 0 when the limit fell on a topic's end and topics remain).

A named topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED (always
answered, first), an unknown one UNKNOWN_TOPIC_OR_PARTITION where it falls in the
order, before the limit cuts the list; neither uses up the limit. In a cluster, a named
topic this broker's view lacks is looked up in ZooKeeper and awaited before it is called
unknown (handlers/new_topics.py). A negative cursor partition
is INVALID_REQUEST on every named topic (Kafka's error response to an
InvalidRequestException). Every topic
carries its authorized operations (there is no flag to ask for them). The KIP-966
`eligible_leader_replicas` / `last_known_elr` fields are empty lists: Tidegate keeps no
eligible leader replicas (Kafka without ELR answers the same).
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import authorized_ops, check
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID
from tidegate.server.handlers.metadata import partition_payload
from tidegate.server.handlers.new_topics import catch_up, unsettled
from tidegate.server.handlers.operations import TOPIC_OPS
from tidegate.server.metadata_view import TopicView

log = logging.getLogger(__name__)

# Kafka's max.request.partition.size.limit default: the most partitions one response holds.
MAX_PARTITIONS = 2000


def _error_topic(name: str, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": False,
            "partitions": []}


def _topic(broker: Broker, ctx: RequestContext, tv: TopicView, start: int,
           limit: int) -> dict[str, Any]:
    parts = [dict(partition_payload(p), eligible_leader_replicas=[], last_known_elr=[])
             for p in tv.partitions if p.index >= start][:limit]
    return {
        "error_code": 0,
        "name": tv.name,
        "topic_id": tv.topic_id,
        "is_internal": tv.internal,
        "partitions": parts,
        "topic_authorized_operations": authorized_ops(broker, ctx, Res.TOPIC, tv.name,
                                                      TOPIC_OPS),
    }


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    md = broker.metadata
    cursor = view(req, "cursor")
    cursor_topic = str(view(cursor, "topic_name")) if cursor is not None else None
    cursor_part = int(view(cursor, "partition_index")) if cursor is not None else 0
    requested = [str(view(t, "name")) for t in view(req, "topics") or ()]
    if cursor_part < 0:
        log.info("DescribeTopicPartitions from %s: negative cursor partition %d", ctx.peer,
                 cursor_part)
        return build(ctx.response_class, {"throttle_time": 0, "next_cursor": None, "topics": [
            _error_topic(n, ErrorCode.invalid_request) for n in requested]})
    limit = min(int(view(req, "response_partition_limit", MAX_PARTITIONS)), MAX_PARTITIONS)
    limit = max(limit, 1)  # a limit below 1 could never make progress
    list_all = not requested
    names = sorted(set(md.topic_names() if list_all else requested))
    if cursor_topic is not None:
        names = [n for n in names if n >= cursor_topic]

    topics: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    remaining = limit
    # Kafka answers refused named topics whatever the limit and cursor do with the rest
    allowed = [n for n in names
               if check(broker, ctx, Op.DESCRIBE, Res.TOPIC, n, log_denied=not list_all)]
    if not list_all:
        ok = set(allowed)
        topics += [_error_topic(n, ErrorCode.topic_authorization_failed)
                   for n in names if n not in ok]
    # a named topic this broker has not seen yet (in a cluster, created through another
    # broker moments ago) is looked up and awaited, once the ACLs allow it
    late = {} if list_all else await catch_up(
        broker, [n for n in allowed if (tv := md.topic(n)) is None or unsettled(broker, tv)])
    for name in allowed:
        tv = late.get(name) or md.topic(name)
        if tv is None:
            if not list_all:
                topics.append(_error_topic(name, ErrorCode.unknown_topic_or_partition))
            continue
        if remaining == 0:  # the limit fell on the previous topic's end
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        start = cursor_part if name == cursor_topic else 0
        entry = _topic(broker, ctx, tv, start, remaining)
        topics.append(entry)
        remaining -= len(entry["partitions"])
        left = [p.index for p in tv.partitions if p.index >= start][len(entry["partitions"]):]
        if left:
            next_cursor = {"topic_name": name, "partition_index": left[0]}
            break
    return build(ctx.response_class, {"throttle_time": 0, "topics": topics,
                                      "next_cursor": next_cursor})
