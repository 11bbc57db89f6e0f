"""Metadata: brokers, topics and partition leaders, auto-creation.

Everything comes from the broker's metadata view (server/metadata_view.py): on the
embedded broker this node leads every partition; in a cluster, the view ZooKeeper
feeds. A partition with no leader is LEADER_NOT_AVAILABLE with leader -1, as in Kafka.

A topic named (by name or id) that a cluster broker's view lacks, typically one created
through another broker moments ago, is looked up in ZooKeeper and awaited
(handlers/new_topics.py) before it is called unknown or auto-created; a topic that
auto-creation made (or found made by another broker meanwhile) and the view does not
show yet is LEADER_NOT_AVAILABLE with no partitions, Kafka's answer, which clients retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import authorized_ops, check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID, topic_names
from tidegate.server.handlers.new_topics import catch_up, unsettled
from tidegate.server.handlers.operations import TOPIC_OPS, authorized_operations, cluster_ops_field
from tidegate.server.metadata_view import PartitionView, TopicView, brokers_on
from tidegate.storage.topics import validate_topic_name

log = logging.getLogger(__name__)



def brokers_payload(broker: Broker, listener: str = "") -> list[dict[str, Any]]:
    """The brokers' endpoints on `listener`, the one the client came in on."""
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in brokers_on(broker.metadata, listener)
    ]


def partition_payload(p: PartitionView) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
        "partition_index": p.index,
        "leader_id": p.leader,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "offline_replicas": list(p.offline),
    }


def topic_payload(topic: TopicView, with_ops: bool = False, ops: int | None = None
                  ) -> dict[str, Any]:
    """`ops`: the topic's authorized-operations bitfield when the authorizer computed it."""
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [partition_payload(p) for p in topic.partitions],
        "topic_authorized_operations": (authorized_operations(TOPIC_OPS, with_ops)
                                        if ops is None or not with_ops else ops),
    }


def _error_topic(name: str | None, code: ErrorCode, topic_id: Any = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or ZERO_UUID,
        "is_internal": False,
        "partitions": [],
    }


async def _requested(broker: Broker, ctx: RequestContext, requested: Any, allow_auto: bool,
                     payload: Callable[[TopicView], dict[str, Any]]) -> list[dict[str, Any]]:
    """The topics a request names, by name or by id, in its order. Those this broker's
    view lacks (in a cluster, a topic created through another broker moments ago) are
    looked up and awaited together once the ACLs allow them (handlers/new_topics.py),
    before any is auto-created."""
    md = broker.metadata
    out: list[dict[str, Any] | None] = []
    by_id: dict[int, Any] = {}  # index in `out` -> the id the view lacked
    by_name: dict[int, str] = {}  # index in `out` -> the name the view lacked
    for t in requested:
        name = view(t, "name")
        topic_id = view(t, "topic_id")
        if not name and topic_id is not None and topic_id != ZERO_UUID:
            tv = md.topic_by_id(topic_id)
            if tv is None or unsettled(broker, tv):
                by_id[len(out)] = topic_id
                out.append(None)
            else:
                out.append(_by_id(broker, ctx, tv, topic_id, payload))
            continue
        if not name:
            out.append(_error_topic(name, ErrorCode.invalid_topic_exception))
        # ACLs (Kafka): a named topic needs DESCRIBE; auto-creating it CREATE on the
        # cluster or the topic
        elif not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
            out.append(_error_topic(name, ErrorCode.topic_authorization_failed))
        elif (tv := md.topic(name)) is None or unsettled(broker, tv):
            by_name[len(out)] = name
            out.append(None)
        else:
            out.append(payload(tv))
    if by_id or by_name:
        await _late(broker, ctx, out, by_id, by_name, allow_auto, payload)
    return [t for t in out if t is not None]


def _by_id(broker: Broker, ctx: RequestContext, tv: TopicView, topic_id: Any,
           payload: Callable[[TopicView], dict[str, Any]]) -> dict[str, Any]:
    if not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, tv.name):
        return _error_topic(None, ErrorCode.topic_authorization_failed, topic_id)
    return payload(tv)


async def _late(broker: Broker, ctx: RequestContext, out: list[dict[str, Any] | None],
                by_id: dict[int, Any], by_name: dict[int, str], allow_auto: bool,
                payload: Callable[[TopicView], dict[str, Any]]) -> None:
    """Fill `out`'s holes: the topics the view lacked."""
    names = await topic_names(broker, by_id.values()) if by_id else {}
    known: set[str] = set()
    for i, topic_id in by_id.items():
        name = names.get(topic_id)
        if name is None:
            out[i] = _error_topic(None, ErrorCode.unknown_topic_id, topic_id)
        elif not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
            out[i] = _error_topic(None, ErrorCode.topic_authorization_failed, topic_id)
        else:
            known.add(name)
    views = await catch_up(broker, by_name.values(), known)
    for i, topic_id in by_id.items():
        if out[i] is None:
            tv = views.get(names[topic_id])
            out[i] = (payload(tv) if tv is not None and tv.topic_id == topic_id
                      else _error_topic(None, ErrorCode.unknown_topic_id, topic_id))
    for i, name in by_name.items():
        tv = views.get(name)
        out[i] = payload(tv) if tv is not None else await _absent(
            broker, ctx, name, allow_auto, payload)


async def _absent(broker: Broker, ctx: RequestContext, name: str, allow_auto: bool,
                  payload: Callable[[TopicView], dict[str, Any]]) -> dict[str, Any]:
    """A named topic no broker knows: auto-created when allowed, else unknown."""
    md = broker.metadata
    allow = allow_auto and broker.auto_create_enabled()
    if (allow and broker.authorizer is not None
            and not check_cluster(broker, ctx, Op.CREATE, log_denied=False)
            and not check(broker, ctx, Op.CREATE, Res.TOPIC, name)):
        return _error_topic(name, ErrorCode.topic_authorization_failed)
    if allow:
        try:
            await broker.topic_admin.create_topic(
                name, broker.default_partitions(), -1, None, {}, validate_only=False)
        except KafkaError as e:
            if md.topic(name) is None and e.code != ErrorCode.topic_already_exists:
                return _error_topic(name, e.code)
        # On the embedded broker the new topic's leaders exist at once, so it is
        # answered with the topic itself. In a cluster the view learns of it a moment
        # later: LEADER_NOT_AVAILABLE, which clients retry, as Kafka's broker answers a
        # topic it just created (or another broker created meanwhile).
        tv = md.topic(name)
        return (payload(tv) if tv is not None
                else _error_topic(name, ErrorCode.leader_not_available))
    # Kafka tells a name no topic can have (INVALID_TOPIC_EXCEPTION) from one that
    # merely does not exist
    try:
        validate_topic_name(name)
        code = ErrorCode.unknown_topic_or_partition
    except KafkaError:
        code = ErrorCode.invalid_topic_exception
    return _error_topic(name, code)


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    md = broker.metadata
    requested = view(req, "topics")
    with_ops = bool(view(req, "include_topic_authorized_operations", False))
    topics: list[dict[str, Any]] = []
    acl = broker.authorizer is not None

    def payload(tv: TopicView) -> dict[str, Any]:
        ops = (authorized_ops(broker, ctx, Res.TOPIC, tv.name, TOPIC_OPS)
               if acl and with_ops else None)
        return topic_payload(tv, with_ops, ops)

    # v0 had no null: an empty list meant "all topics".
    if requested is None or (ctx.api_version == 0 and not requested):
        for n in md.topic_names():
            tv = md.topic(n)
            # ACLs (Kafka): listing all topics shows only those one may DESCRIBE
            if tv is not None and (not acl or check(broker, ctx, Op.DESCRIBE, Res.TOPIC, n,
                                                    log_denied=False)):
                topics.append(payload(tv))
    else:
        topics = await _requested(
            broker, ctx, requested, bool(view(req, "allow_auto_topic_creation", True)), payload)
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "brokers": brokers_payload(broker, ctx.listener),
            "cluster_id": md.cluster_id,
            "controller_id": md.controller_id,
            "topics": topics,
            "cluster_authorized_operations": cluster_ops_field(
                broker, ctx, bool(view(req, "include_cluster_authorized_operations", False))),
        },
    )
