"""CreateTopics, DeleteTopics, CreatePartitions and DescribeCluster.

CreateTopics and CreatePartitions with a timeout answer once this broker's metadata
shows a leader for every partition they made, as Kafka's ZooKeeper-mode broker does
(its DelayedCreatePartitions): in a cluster the topic admin only writes ZooKeeper and
the controller elects the leaders. A topic still without leaders at the timeout is
answered REQUEST_TIMED_OUT (it is created all the same), as in Kafka. The other brokers
follow the same ZooKeeper znodes, so by then they know the topic too, or within
milliseconds (handlers that only ask whether a topic exists ask ZooKeeper when their
cache says no: handlers/common.py's `partition_counts` and, for DeleteTopics v6 by id,
`topic_names`).

In a cluster each topic of a DeleteTopics or CreatePartitions costs ZooKeeper round
trips (a lookup, then the write): the topics of one request go side by side
(`_each_topic`), a name given twice one after the other, so every answer, in request
order, is the one the topics would get in turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, TypeVar

from tidegate.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.protocol.messages import build, ms, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID, error_fields, topic_names
from tidegate.server.handlers.configs import describe_topic_configs
from tidegate.server.handlers.metadata import brokers_payload
from tidegate.server.handlers.operations import cluster_ops_field
from tidegate.server.metadata_view import next_change
from tidegate.server.topic_admin import check_assignment_shape
from tidegate.storage.config import LogConfig

log = logging.getLogger(__name__)

# how often a view that cannot say when it changed is looked at (the cluster view can)
_LEADER_POLL_S = 0.02

T = TypeVar("T")


async def _each_topic(broker: Broker, keys: Sequence[Hashable],
                      work: Callable[[int], Awaitable[T]]) -> list[T]:
    """`work(i)` for each topic `i` of a request (`keys[i]`: its name), answers in
    request order. In a cluster the topics go side by side, the ones with the same key
    one after the other in request order; embedded (no ZooKeeper: nothing to wait for)
    one after the other."""
    if not broker.replicas.cluster or len(keys) < 2:
        return [await work(i) for i in range(len(keys))]
    alike: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        alike.setdefault(key, []).append(i)
    got: dict[int, T] = {}

    async def in_turn(indexes: list[int]) -> None:
        for i in indexes:
            got[i] = await work(i)

    await asyncio.gather(*map(in_turn, alike.values()))
    return [got[i] for i in range(len(keys))]


def _leaderless(broker: Broker, name: str, first: int, end: int) -> bool:
    tv = broker.metadata.topic(name)
    return (tv is None or len(tv.partitions) < end
            or any(p.leader < 0 for p in tv.partitions[first:end]))


async def _await_leaders(broker: Broker, made: dict[str, tuple[int, int]],
                         timeout_ms: int) -> set[str]:
    """Wait up to `timeout_ms` for a leader of every partition made (name -> the range
    of partition indexes made); the names still without one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        left = {n for n, (first, end) in made.items() if _leaderless(broker, n, first, end)}
        if not left or loop.time() >= deadline:
            return left
        await next_change(broker.metadata, deadline - loop.time(), _LEADER_POLL_S)


async def _time_out_leaderless(broker: Broker, made: dict[str, tuple[int, int]],
                               timeout_ms: int, results: list[dict[str, Any]],
                               what: str) -> None:
    """With a timeout, answer once every partition made has a leader (Kafka's
    DelayedCreatePartitions); a topic still without one is REQUEST_TIMED_OUT ("`what`
    <name> was not completed within the timeout"), its partitions kept."""
    if not made or timeout_ms <= 0:
        return
    late = await _await_leaders(broker, made, timeout_ms)
    for out in results:
        if out["name"] in late and out["error_code"] == 0:
            out["error_code"] = ErrorCode.request_timed_out
            out["error_message"] = f"{what} {out['name']} was not completed within the timeout"


def _assignment(assignments: Any) -> dict[int, list[int]]:
    return {int(view(a, "partition_index", i)): [int(b) for b in view(a, "broker_ids", ()) or ()]
            for i, a in enumerate(assignments or ())}


async def handle_create_topics(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    validate_only = bool(view(req, "validate_only", False))
    results = []
    names = [str(t.name) for t in req.topics]
    # Kafka: a name given twice is not created at all and is answered once, INVALID_REQUEST
    duplicates = {n for n in names if names.count(n) > 1}
    seen: set[str] = set()
    # ACLs (Kafka): CREATE on the cluster, or else on each topic
    cluster_create = check_cluster(broker, ctx, Op.CREATE, log_denied=False)
    # Kafka's ControllerApis: the created topic's configs, partition count and
    # replication factor are answered only to a principal with DESCRIBE_CONFIGS on it;
    # otherwise topic_config_error_code says TOPIC_AUTHORIZATION_FAILED (not logged)
    describable = {n for n in set(names) if check(broker, ctx, Op.DESCRIBE_CONFIGS,
                                                   Res.TOPIC, n, log_denied=False)}
    made: dict[str, tuple[int, int]] = {}  # created here: name -> its partitions
    for t in req.topics:
        name = str(t.name)
        if name in duplicates and name in seen:
            continue
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
            seen.add(name)
            if name in duplicates:
                raise InvalidRequestError(
                    f"Create topics request from client contains duplicate topic {name}")
            if not cluster_create and not check(broker, ctx, Op.CREATE, Res.TOPIC, name):
                raise KafkaError(f"Authorization failed: CREATE on topic {name}",
                                 code=ErrorCode.topic_authorization_failed)
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
            factor = int(t.replication_factor)
            by_partition = _assignment(assignments)
            check_assignment_shape(list(by_partition.values()))
            broker.topic_admin.check_replication(factor, list(by_partition.values()))
            configs = {str(c.name): str(c.value) for c in t.configs if c.value is not None}
            LogConfig.from_props(configs)  # unknown names (Kafka 4's too), bad values
            if broker.metadata.topic(name) is not None:
                raise KafkaError(
                    f"Topic '{name}' already exists.", code=ErrorCode.topic_already_exists
                )
            topic_id, factor = await broker.topic_admin.create_topic(
                name, partitions, factor, by_partition or None, configs,
                validate_only=validate_only)
            if not validate_only:
                out["topic_id"] = topic_id
                made[name] = (0, partitions)
            if name not in describable:
                out["topic_config_error_code"] = ErrorCode.topic_authorization_failed
                results.append(out)
                continue
            out["num_partitions"] = partitions
            out["replication_factor"] = factor
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
            # Kafka answers a duplicate with an empty config list, other errors with null
            out["configs"] = None if ctx.api_version >= 5 and name not in duplicates else []
        results.append(out)
    await _time_out_leaderless(broker, made, ms(req.timeout), results,
                               "Creation of topic")
    return build(ctx.response_class, {"throttle_time": 0, "topics": results})


async def handle_delete_topics(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    targets: list[tuple[str | None, Any]] = []
    if ctx.api_version >= 6:
        targets = [(view(t, "name"), view(t, "topic_id")) for t in req.topics]
    else:
        targets = [(str(n), None) for n in req.topic_names]
    enabled = broker.config.get_bool("delete.topic.enable")
    # topics named by id (v6+): the metadata view's names, else the topic admin's truth
    # (in a cluster the view may lack a topic created through another broker moments ago)
    by_id = await topic_names(broker, [i for n, i in targets if not n and i is not None]
                              ) if enabled else {}

    async def delete(i: int) -> dict[str, Any]:
        name, topic_id = targets[i]
        out: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id or ZERO_UUID,
            "error_code": 0,
            "error_message": None,
        }
        try:
            if not enabled:
                raise KafkaError(
                    "topic deletion is disabled (delete.topic.enable=false)",
                    code=ErrorCode.topic_deletion_disabled,
                )
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                name = by_id.get(topic_id)
                if name is None:
                    raise KafkaError(code=ErrorCode.unknown_topic_id)
                out["name"] = name
            if name and not check(broker, ctx, Op.DELETE, Res.TOPIC, name):  # Kafka's ACL
                raise KafkaError(f"Authorization failed: DELETE on topic {name}",
                                 code=ErrorCode.topic_authorization_failed)
            # the topic admin's truth when the cache lacks the topic: in a cluster the
            # cache may not have seen one created through another broker moments ago
            tv = (broker.metadata.topic(name) or await broker.topic_admin.find_topic(name)
                  if name else None)
            if not name or tv is None:
                raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
            if name in INTERNAL_TOPICS:
                raise KafkaError(
                    f"internal topic {name} cannot be deleted",
                    code=ErrorCode.invalid_topic_exception,
                )
            out["topic_id"] = tv.topic_id
            await broker.topic_admin.delete_topic(name)
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
        return out

    keys = [n or by_id.get(i, i) for n, i in targets]  # a topic named twice: in turn
    responses = await _each_topic(broker, keys, delete)
    return build(ctx.response_class, {"throttle_time": 0, "responses": responses})


async def handle_create_partitions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    made: dict[str, tuple[int, int]] = {}  # grown here: name -> the partitions added

    async def grow(i: int) -> dict[str, Any]:
        t = req.topics[i]
        out: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            if not check(broker, ctx, Op.ALTER, Res.TOPIC, str(t.name)):  # Kafka's ACL
                raise KafkaError(f"Authorization failed: ALTER on topic {t.name}",
                                 code=ErrorCode.topic_authorization_failed)
            count = int(t.count)
            assignments = [[int(b) for b in view(a, "broker_ids", ()) or ()]
                           for a in t.assignments or ()]
            # not this broker's metadata cache: in a cluster it may not have seen a topic
            # created through another broker moments ago; the topic admin counts the
            # partitions where it writes (the topic's znode), as Kafka's broker does
            had = await broker.topic_admin.create_partitions(
                str(t.name), count, assignments or None, validate_only=bool(req.validate_only))
            if not req.validate_only:
                log.info("topic %s now has %d partitions", t.name, count)
                made[str(t.name)] = (had, count)
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
        return out

    results = await _each_topic(broker, [str(t.name) for t in req.topics], grow)
    await _time_out_leaderless(broker, made, ms(req.timeout), results,
                               "Adding partitions to topic")
    return build(ctx.response_class, {"throttle_time": 0, "results": results})


async def handle_describe_cluster(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    endpoint_type = int(view(req, "endpoint_type", 1))
    if endpoint_type != 1:
        # Kafka's broker: asked for controllers (2) it answers MISMATCHED_ENDPOINT_TYPE
        # (ask a controller's listener); any other type is UNSUPPORTED_ENDPOINT_TYPE
        code = (ErrorCode.mismatched_endpoint_type if endpoint_type == 2
                else ErrorCode.unsupported_endpoint_type)
        return build(
            ctx.response_class,
            {
                "throttle_time": 0,
                "error_code": code,
                "error_message": "only broker endpoints are served",
                "cluster_id": broker.metadata.cluster_id,
                "controller_id": broker.metadata.controller_id,
                "brokers": [],
            },
        )
    brokers = [
        {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
        for b in brokers_payload(broker, ctx.listener)
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
            "cluster_authorized_operations": cluster_ops_field(
                broker, ctx, bool(view(req, "include_cluster_authorized_operations", False))),
        },
    )

