"""Metadata: brokers, topics and partition leaders (always this node), auto-creation."""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.protocol.messages import build, view
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID
from tidegate.server.handlers.operations import CLUSTER_OPS, TOPIC_OPS, authorized_operations

log = logging.getLogger(__name__)

LEADER_EPOCH = 0


def brokers_payload(broker: Broker) -> list[dict[str, Any]]:
    lis = broker.config.advertised_listeners()[0]
    rack = broker.config.get("broker.rack") or None
    return [{"node_id": broker.node_id, "host": lis.host, "port": lis.port, "rack": rack}]


def topic_payload(broker: Broker, name: str, with_ops: bool = False) -> dict[str, Any]:
    meta = broker.logs.topics[name]
    node = broker.node_id
    return {
        "error_code": 0,
        "name": name,
        "topic_id": meta.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for p in range(meta.partitions)
        ],
        "topic_authorized_operations": authorized_operations(TOPIC_OPS, with_ops),
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
    requested = view(req, "topics")
    with_ops = bool(view(req, "include_topic_authorized_operations", False))
    # v0 had no null: an empty list meant "all topics".
    if requested is None or (ctx.api_version == 0 and not requested):
        names = sorted(broker.logs.topics)
        topics = [topic_payload(broker, n, with_ops) for n in names]
    else:
        allow_auto = bool(view(req, "allow_auto_topic_creation", True))
        topics = []
        for t in requested:
            name = view(t, "name")
            topic_id = view(t, "topic_id")
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                meta = broker.logs.topic_by_id(topic_id)
                if meta is None:
                    topics.append(_error_topic(None, ErrorCode.unknown_topic_id, topic_id))
                else:
                    topics.append(topic_payload(broker, meta.name, with_ops))
                continue
            if not name:
                topics.append(_error_topic(name, ErrorCode.invalid_topic_exception))
                continue
            if name not in broker.logs.topics and allow_auto and broker.auto_create_enabled():
                try:
                    broker.create_topic(name, broker.default_partitions(), {})
                except KafkaError as e:
                    if name not in broker.logs.topics:
                        topics.append(_error_topic(name, e.code))
                        continue
                if name in broker.logs.topics:
                    # Kafka answers LEADER_NOT_AVAILABLE while a new topic's leaders are
                    # elected; ours exist at once, so answer with the topic itself.
                    topics.append(topic_payload(broker, name, with_ops))
                    continue
            if name not in broker.logs.topics:
                topics.append(_error_topic(name, ErrorCode.unknown_topic_or_partition))
            else:
                topics.append(topic_payload(broker, name, with_ops))
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "brokers": brokers_payload(broker),
            "cluster_id": broker.cluster_id,
            "controller_id": broker.node_id,
            "topics": topics,
            "cluster_authorized_operations": authorized_operations(
                CLUSTER_OPS, bool(view(req, "include_cluster_authorized_operations", False))
            ),
        },
    )
