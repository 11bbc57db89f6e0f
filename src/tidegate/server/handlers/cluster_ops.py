"""ControlledShutdown, ElectLeaders, AlterPartitionReassignments and
ListPartitionReassignments: the controller's operations, through the `ClusterAdmin` port
(`broker.cluster_admin`, server/cluster_admin.py).

Each handler only translates between the wire and the port, in Kafka's shapes:

- ElectLeaders: one result per partition asked about; when the request names no
  partitions (all of them), the partitions that needed no election are left out, as
  Kafka does. An election type other than PREFERRED (0) or UNCLEAN (1) is a top-level
  INVALID_REQUEST (v1+; v0 has no election type and means PREFERRED).
- AlterPartitionReassignments: a top-level error (NOT_CONTROLLER, REQUEST_TIMED_OUT)
  with no partition results, else one result per partition (the last request for a
  partition named twice wins, as in Kafka's map).
- ListPartitionReassignments: the ongoing reassignments, of the partitions named or all.
- ControlledShutdown (hand-written codec, protocol/controlled_shutdown.py): the error and
  the partitions the broker still leads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.controlled_shutdown import ControlledShutdownRequest, response_for
from tidegate.protocol.messages import build, ms, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.cluster_admin import PartitionResult, TopicPartition
from tidegate.server.context import RequestContext

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1


def _by_topic(results: Mapping[TopicPartition, Any]) -> dict[str, list[tuple[int, Any]]]:
    grouped: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in sorted(results.items()):
        grouped.setdefault(topic, []).append((partition, value))
    return grouped


async def handle_controlled_shutdown(broker: Broker, ctx: RequestContext,
                                     req: ControlledShutdownRequest) -> Any:
    if not check_cluster(broker, ctx, Op.CLUSTER_ACTION):  # Kafka: brokers only
        return response_for(ctx.api_version, ErrorCode.cluster_authorization_failed, ())
    answer = await broker.cluster_admin.controlled_shutdown(int(req.broker_id),
                                                            int(req.broker_epoch))
    if answer.code != ErrorCode.none:
        log.info("controlled shutdown of broker %d (from %s): %s", req.broker_id, ctx.peer,
                 answer.code.name.upper())
    return response_for(ctx.api_version, answer.code, answer.remaining)


async def handle_elect_leaders(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    election_type = int(view(req, "election_type", PREFERRED))
    if not check_cluster(broker, ctx, Op.ALTER):  # Kafka's ACL: ALTER on the cluster
        return build(ctx.response_class, {"throttle_time": 0,
                                          "error_code": ErrorCode.cluster_authorization_failed,
                                          "replica_election_results": []})
    asked = req.topic_partitions
    partitions = None if asked is None else list(dict.fromkeys(
        (str(t.topic), int(p)) for t in asked for p in t.partitions))
    if election_type not in (PREFERRED, UNCLEAN):
        log.info("ElectLeaders from %s: unknown election type %d", ctx.peer, election_type)
        return build(ctx.response_class, {"throttle_time": 0,
                                          "error_code": ErrorCode.invalid_request,
                                          "replica_election_results": []})
    results: dict[TopicPartition, PartitionResult] = await broker.cluster_admin.elect_leaders(
        election_type, partitions, ms(req.timeout))
    if partitions is None:  # everything: report only elections made or failed
        results = {tp: r for tp, r in results.items()
                   if r.code != ErrorCode.election_not_needed}
    return build(ctx.response_class, {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "replica_election_results": [
            {"topic": topic, "partition_result": [
                {"partition_id": p, "error_code": r.code,
                 "error_message": r.message if r.code != ErrorCode.none else None}
                for p, r in parts]}
            for topic, parts in _by_topic(results).items()],
    })


async def handle_alter_partition_reassignments(broker: Broker, ctx: RequestContext,
                                               req: Any) -> Any:
    requests: dict[TopicPartition, Sequence[int] | None] = {}
    if not check_cluster(broker, ctx, Op.ALTER):  # Kafka's ACL: ALTER on the cluster
        return build(ctx.response_class, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": None, "responses": []})
    for t in req.topics:
        for p in t.partitions:
            replicas = p.replicas
            requests[(str(t.name), int(p.partition_index))] = (
                None if replicas is None else [int(r) for r in replicas])
    try:
        results = await broker.cluster_admin.alter_reassignments(requests, ms(req.timeout))
    except KafkaError as e:
        return build(ctx.response_class, {"throttle_time": 0, "error_code": e.code,
                                          "error_message": str(e), "responses": []})
    return build(ctx.response_class, {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "responses": [
            {"name": topic, "partitions": [
                {"partition_index": p, "error_code": r.code, "error_message": r.message}
                for p, r in parts]}
            for topic, parts in _by_topic(results).items()],
    })


async def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext,
                                              req: Any) -> Any:
    asked = req.topics
    if not check_cluster(broker, ctx, Op.DESCRIBE):  # Kafka's ACL: DESCRIBE on the cluster
        return build(ctx.response_class, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": None, "topics": []})
    partitions = None if asked is None else [
        (str(t.name), int(p)) for t in asked for p in t.partition_indexes]
    try:
        ongoing = await broker.cluster_admin.list_reassignments(partitions, ms(req.timeout))
    except KafkaError as e:
        return build(ctx.response_class, {"throttle_time": 0, "error_code": e.code,
                                          "error_message": str(e), "topics": []})
    return build(ctx.response_class, {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "topics": [
            {"name": topic, "partitions": [
                {"partition_index": p, "replicas": list(r.replicas),
                 "adding_replicas": list(r.adding), "removing_replicas": list(r.removing)}
                for p, r in parts]}
            for topic, parts in _by_topic(ongoing).items()],
    })
