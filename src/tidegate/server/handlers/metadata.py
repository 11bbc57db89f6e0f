"""Metadata: brokers, topics and partition leaders, auto-creation.

Everything comes from the broker's metadata view (server/metadata_view.py): on the
embedded broker this node leads every partition; in a cluster, the view ZooKeeper
feeds. A partition with no leader is LEADER_NOT_AVAILABLE with leader -1, as in Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import authorized_ops, check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID
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
        allow_auto = bool(view(req, "allow_auto_topic_creation", True))
        for t in requested:
            name = view(t, "name")
            topic_id = view(t, "topic_id")
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                tv = md.topic_by_id(topic_id)
                if tv is None:
                    topics.append(_error_topic(None, ErrorCode.unknown_topic_id, topic_id))
                elif not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, tv.name):
                    topics.append(_error_topic(None, ErrorCode.topic_authorization_failed,
                                               topic_id))
                else:
                    topics.append(payload(tv))
                continue
            if not name:
                topics.append(_error_topic(name, ErrorCode.invalid_topic_exception))
                continue
            # ACLs (Kafka): a named topic needs DESCRIBE; auto-creating it CREATE on the
            # cluster or the topic
            if not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
                topics.append(_error_topic(name, ErrorCode.topic_authorization_failed))
                continue
            tv = md.topic(name)
            if (tv is None and allow_auto and broker.auto_create_enabled() and acl
                    and not check_cluster(broker, ctx, Op.CREATE, log_denied=False)
                    and not check(broker, ctx, Op.CREATE, Res.TOPIC, name)):
                topics.append(_error_topic(name, ErrorCode.topic_authorization_failed))
                continue
            if tv is None and allow_auto and broker.auto_create_enabled():
                try:
                    await broker.topic_admin.create_topic(
                        name, broker.default_partitions(), -1, None, {}, validate_only=False)
                except KafkaError as e:
                    if md.topic(name) is None:
                        topics.append(_error_topic(name, e.code))
                        continue
                # On the embedded broker the new topic's leaders exist at once, so it is
                # answered with the topic itself; in a cluster the view has no leaders
                # yet and answers LEADER_NOT_AVAILABLE per partition, as Kafka does.
                tv = md.topic(name)
            if tv is None:
                # Kafka tells a name no topic can have (INVALID_TOPIC_EXCEPTION) from one
                # that merely does not exist
                try:
                    validate_topic_name(name)
                    code = ErrorCode.unknown_topic_or_partition
                except KafkaError:
                    code = ErrorCode.invalid_topic_exception
                topics.append(_error_topic(name, code))
            else:
                topics.append(payload(tv))
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
