"""CreateTopics, DeleteTopics, CreatePartitions and DescribeCluster."""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.protocol.messages import build, view
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID, error_fields
from tidegate.server.handlers.configs import describe_topic_configs, validate_topic_configs
from tidegate.server.handlers.metadata import brokers_payload
from tidegate.server.handlers.operations import CLUSTER_OPS, authorized_operations

log = logging.getLogger(__name__)


def _invalid_assignment(message: str) -> KafkaError:
    return KafkaError(message, code=ErrorCode.invalid_replica_assignment)


def _check_replication(broker: Broker, factor: int, assignments: Any) -> None:
    """A replication factor this one node can hold, and assignments naming only it.

    As in Kafka, an assignment naming an unknown broker, naming one twice, or naming
    none is INVALID_REPLICA_ASSIGNMENT; too large a factor is INVALID_REPLICATION_FACTOR.
    """
    if factor not in (-1, 1) and factor is not None:
        raise InvalidReplicationFactorError(
            f"replication factor {factor} is larger than the 1 available broker"
        )
    for a in assignments or ():
        ids = [int(i) for i in view(a, "broker_ids", ()) or ()]
        if not ids:
            raise _invalid_assignment("a partition's replica assignment is empty")
        if len(set(ids)) != len(ids):
            raise _invalid_assignment(f"duplicate brokers in replica assignment {ids}")
        unknown = sorted(set(ids) - {broker.node_id})
        if unknown:
            raise _invalid_assignment(
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))} "
                f"(the only broker is {broker.node_id})"
            )


async def handle_create_topics(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    validate_only = bool(view(req, "validate_only", False))
    results = []
    seen: set[str] = set()
    for t in req.topics:
        name = str(t.name)
        out: dict[str, Any] = {
            "name": name,
            "topic_id": ZERO_UUID,
            "error_code": 0,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        try:
            if name in seen:
                raise InvalidRequestError(f"topic {name} appears twice in the request")
            seen.add(name)
            assignments = list(t.assignments or ())
            partitions = int(t.num_partitions)
            if assignments:
                if partitions != -1:
                    raise InvalidRequestError(
                        "both num_partitions and replica assignments were given"
                    )
                partitions = len(assignments)
            elif partitions == -1:
                partitions = broker.default_partitions()
            if partitions <= 0:
                raise InvalidPartitionsError(f"number of partitions must be > 0, got {partitions}")
            _check_replication(broker, int(t.replication_factor), assignments)
            configs = {str(c.name): str(c.value) for c in t.configs if c.value is not None}
            validate_topic_configs(configs)
            if name in broker.logs.topics:
                raise KafkaError(
                    f"topic '{name}' already exists.", code=ErrorCode.topic_already_exists
                )
            if validate_only:
                broker.logs.validate_new_topic(name, partitions, configs)
            else:
                out["topic_id"] = broker.create_topic(name, partitions, configs)
            out["num_partitions"] = partitions
            out["replication_factor"] = 1
            out["configs"] = [
                {
                    "name": c["name"],
                    "value": c["value"],
                    "read_only": c["read_only"],
                    "config_source": c["config_source"],
                    "is_sensitive": False,
                }
                for c in describe_topic_configs(broker, name, configs)
            ]
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
            out["configs"] = None if ctx.api_version >= 5 else []
        results.append(out)
    return build(ctx.response_class, {"throttle_time": 0, "topics": results})


async def handle_delete_topics(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    targets: list[tuple[str | None, Any]] = []
    if ctx.api_version >= 6:
        targets = [(view(t, "name"), view(t, "topic_id")) for t in req.topics]
    else:
        targets = [(str(n), None) for n in req.topic_names]
    responses = []
    for name, topic_id in targets:
        out: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id or ZERO_UUID,
            "error_code": 0,
            "error_message": None,
        }
        try:
            if not broker.config.get_bool("delete.topic.enable"):
                raise KafkaError(
                    "topic deletion is disabled (delete.topic.enable=false)",
                    code=ErrorCode.topic_deletion_disabled,
                )
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                meta = broker.logs.topic_by_id(topic_id)
                if meta is None:
                    raise KafkaError(code=ErrorCode.unknown_topic_id)
                name = meta.name
                out["name"] = name
            if not name or name not in broker.logs.topics:
                raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
            if name in INTERNAL_TOPICS:
                raise KafkaError(
                    f"internal topic {name} cannot be deleted",
                    code=ErrorCode.invalid_topic_exception,
                )
            out["topic_id"] = broker.logs.topics[name].topic_id
            broker.delete_topic(name)
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
        responses.append(out)
    return build(ctx.response_class, {"throttle_time": 0, "responses": responses})


async def handle_create_partitions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    results = []
    for t in req.topics:
        out: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            meta = broker.logs.topics.get(t.name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"topic {t.name} does not exist")
            count = int(t.count)
            if count <= meta.partitions:
                raise InvalidPartitionsError(
                    f"topic {t.name} has {meta.partitions} partitions; the new count must "
                    f"be larger, got {count}"
                )
            assignments = list(t.assignments or ())
            if assignments and len(assignments) != count - meta.partitions:
                raise _invalid_assignment(
                    f"Increasing the number of partitions by {count - meta.partitions} "
                    f"but {len(assignments)} assignments provided."
                )
            _check_replication(broker, 1, assignments)
            if not req.validate_only:
                broker.logs.create_partitions(t.name, count)
                log.info("topic %s now has %d partitions", t.name, count)
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
        results.append(out)
    return build(ctx.response_class, {"throttle_time": 0, "results": results})


async def handle_describe_cluster(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if int(view(req, "endpoint_type", 1)) != 1:
        return build(
            ctx.response_class,
            {
                "throttle_time": 0,
                "error_code": ErrorCode.unsupported_endpoint_type,
                "error_message": "only broker endpoints are served",
                "cluster_id": broker.metadata.cluster_id,
                "controller_id": broker.metadata.controller_id,
                "brokers": [],
            },
        )
    brokers = [
        {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
        for b in brokers_payload(broker)
    ]
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": broker.metadata.cluster_id,
            "controller_id": broker.metadata.controller_id,
            "brokers": brokers,
            "cluster_authorized_operations": authorized_operations(
                CLUSTER_OPS, bool(view(req, "include_cluster_authorized_operations", False))
            ),
        },
    )
