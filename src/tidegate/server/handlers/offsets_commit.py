"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets in `__consumer_offsets`.

Partitions of topics that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION
(UNKNOWN_TOPIC_ID for topics named by id, OffsetCommit v10 / OffsetFetch v10) without
reaching the coordinator, as Kafka does. "Exists" is the cluster's answer
(handlers/common.py's `partition_counts` and `topic_names`), not this broker's logs: a
coordinator need not host a replica of the topics whose offsets it keeps, and may not
have seen a topic created through another broker moments ago. Topics the principal may
not use are refused before they are looked up (a lookup may read ZooKeeper).
OffsetFetch v8+ asks for several groups at once (the ids they name, v10, are looked up
once for the request, for the groups the principal may describe); `topics` null means
every partition the group has an offset for.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.group.messages import (
    CommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from tidegate.protocol.messages import build, ms, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import ZERO_UUID, partition_counts, topic_names


async def _id_names(broker: Broker, topics: Iterable[Any]) -> dict[uuid.UUID, str]:
    """The names of the topics named by id (v10) among `topics`, in one lookup
    (`topic_names`: the metadata view, else the topic admin's truth); an id no topic
    has is left out."""
    by_id = [i for t in topics if not view(t, "name") and (i := view(t, "topic_id")) is not None]
    return await topic_names(broker, by_id) if by_id else {}


def _with_names(topics: Any, ids: dict[uuid.UUID, str]
                ) -> list[tuple[str | None, uuid.UUID | None]]:
    """(name, id) of each request topic: a topic named by id gets its name from `ids`
    (`_id_names`), or None if no topic has that id."""
    named = [(view(t, "name"), view(t, "topic_id")) for t in topics]
    return [(str(n), None) if n else (None if i is None else ids.get(i), i) for n, i in named]


async def _topic_names(broker: Broker, topics: Any, resolve: bool = True
                       ) -> list[tuple[str | None, uuid.UUID | None]]:
    """(name, id) of each request topic, ids looked up once for the request; with
    `resolve` false (the request is refused whole) nothing is looked up."""
    return _with_names(topics, await _id_names(broker, topics) if resolve else {})


async def _counts(broker: Broker, named: list[tuple[str, list[int]]]) -> dict[str, int]:
    """Each named topic's partition count, asked once for all the partitions named.
    Only topics the principal may use are passed: a topic unknown to the metadata view
    costs a ZooKeeper read in a cluster."""
    wanted: dict[str, int] = {}
    for name, parts in named:
        wanted[name] = max(wanted.get(name, 0), 1 + max(parts, default=-1))
    return await partition_counts(broker, wanted)


def _topic_key(by_id: bool, name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
    return {"topic_id": topic_id or ZERO_UUID} if by_id else {"name": name or ""}


async def handle_offset_commit(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    by_id = ctx.api_version >= 10
    codes: dict[tuple[int, int], ErrorCode] = {}  # (topic index, partition) -> error
    valid: list[CommitPartition] = []
    where: dict[tuple[str, int], tuple[int, int]] = {}
    # ACLs (Kafka): READ on the group, else every partition fails; READ on each topic,
    # checked before the topic is looked up (Kafka's order: an id no topic has is
    # UNKNOWN_TOPIC_ID, then TOPIC_AUTHORIZATION_FAILED, then UNKNOWN_TOPIC_OR_PARTITION)
    group_ok = check(broker, ctx, Op.READ, Res.GROUP, str(req.group_id))
    topics = [(name, topic_id, [int(p.partition_index) for p in t.partitions])
              for (name, topic_id), t in zip(await _topic_names(broker, req.topics, group_ok),
                                             req.topics, strict=True)]
    refused = [ErrorCode.group_authorization_failed if not group_ok else
               ErrorCode.topic_authorization_failed if name is not None
               and not check(broker, ctx, Op.READ, Res.TOPIC, name) else None
               for name, _, _ in topics]
    counts = await _counts(broker, [(name, parts) for (name, _, parts), denied
                                    in zip(topics, refused, strict=True)
                                    if name is not None and denied is None])
    for ti, t in enumerate(req.topics):
        name, denied = topics[ti][0], refused[ti]
        for p in t.partitions:
            index = int(p.partition_index)
            if denied is not None:
                codes[(ti, index)] = denied
                continue
            if name is None or not 0 <= index < counts[name]:
                codes[(ti, index)] = (
                    ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                )
                continue
            assert name is not None
            valid.append(
                CommitPartition(
                    name,
                    index,
                    int(p.committed_offset),
                    int(view(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
            )
            where[(name, index)] = (ti, index)
    if valid:
        cr = OffsetCommitRequest(
            group_id=str(req.group_id),
            generation_id=int(req.generation_id_or_member_epoch),
            member_id=str(req.member_id),
            group_instance_id=view(req, "group_instance_id"),
            retention_ms=ms(view(req, "retention_time", -1)),
            partitions=tuple(valid),
            api_version=ctx.api_version,
        )
        try:
            for tp, code in await broker.group_coordinator.commit(cr):
                codes[where[tp]] = code
        except KafkaError as e:
            for slot in where.values():
                codes[slot] = e.code
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "topics": [
                {
                    **_topic_key(by_id, name, topic_id),
                    "partitions": [
                        {"partition_index": p, "error_code": codes[(ti, p)]} for p in parts
                    ],
                }
                for ti, (name, topic_id, parts) in enumerate(topics)
            ],
        },
    )


async def _fetch_group(
    broker: Broker, ctx: RequestContext, group_id: str, topics: Any,
    id_names: dict[uuid.UUID, str], by_id: bool, require_stable: bool,
    member: tuple[str, int] = ("", -1)
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """One group's answer: (group error, topics payload), for a group the principal may
    DESCRIBE (the caller checks: else GROUP_AUTHORIZATION_FAILED); `id_names` has the
    names of the topics named by id (`_id_names`, once for the request). Topics the
    principal may not DESCRIBE are TOPIC_AUTHORIZATION_FAILED when named, left out when
    all are asked for, as Kafka."""
    unknown: list[tuple[uuid.UUID | None, list[int]]] = []
    refused: list[tuple[str, uuid.UUID | None, list[int]]] = []
    wanted: list[tuple[str, int]] | None = None
    ids: dict[str, uuid.UUID | None] = {}
    if topics is not None:
        wanted = []
        for t, (name, topic_id) in zip(topics, _with_names(topics, id_names), strict=True):
            parts = [int(p) for p in t.partition_indexes]
            if name is None:
                unknown.append((topic_id, parts))
                continue
            if not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
                refused.append((name, topic_id, parts))
                continue
            ids[name] = topic_id
            wanted += [(name, p) for p in parts]
    try:
        resp = await broker.group_coordinator.fetch(
            OffsetFetchRequest(group_id, None if wanted is None else tuple(wanted),
                               require_stable, *member)
        )
    except KafkaError as e:
        resp = OffsetFetchResponse(e.code)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for f in resp.partitions:
        grouped.setdefault(f.topic, []).append(
            {
                "partition_index": f.partition,
                "committed_offset": f.offset,
                "committed_leader_epoch": f.leader_epoch,
                "metadata": f.metadata,
                "error_code": f.error,
            }
        )
    payload = []
    for name, fetched in grouped.items():
        if wanted is None and not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, name,
                                        log_denied=False):
            continue
        topic_id = ids.get(name)
        if by_id and topic_id is None:
            tv = broker.metadata.topic(name)
            if tv is None:
                continue  # offsets of a topic that is gone cannot be named by id
            topic_id = tv.topic_id
        payload.append({**_topic_key(by_id, name, topic_id), "partitions": fetched})
    for name, topic_id, parts in refused:
        payload.append({**_topic_key(by_id, name, topic_id), "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": ErrorCode.topic_authorization_failed}
            for p in parts]})
    for topic_id, parts in unknown:
        payload.append(
            {
                **_topic_key(by_id, None, topic_id),
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": ErrorCode.unknown_topic_id,
                    }
                    for p in parts
                ],
            }
        )
    return resp.error, payload


async def handle_offset_fetch(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    stable = bool(view(req, "require_stable", False))
    if v >= 8:
        # ACLs first (a group refused costs no lookup), then one lookup of the ids every
        # allowed group names, not one per group
        allowed = [check(broker, ctx, Op.DESCRIBE, Res.GROUP, str(g.group_id))
                   for g in req.groups]
        id_names = await _id_names(broker, [t for g, ok in zip(req.groups, allowed, strict=True)
                                            if ok and g.topics is not None for t in g.topics])
        groups = []
        for g, ok in zip(req.groups, allowed, strict=True):
            if not ok:
                groups.append({"group_id": g.group_id, "topics": [],
                               "error_code": ErrorCode.group_authorization_failed})
                continue
            # v9+: a KIP-848 member names itself, fenced by its epoch
            member = (str(view(g, "member_id", "") or ""), int(view(g, "member_epoch", -1)))
            code, topics = await _fetch_group(broker, ctx, str(g.group_id), g.topics, id_names,
                                              v >= 10, stable, member)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return build(ctx.response_class, {"throttle_time": 0, "groups": groups})
    if check(broker, ctx, Op.DESCRIBE, Res.GROUP, str(req.group_id)):
        code, topics = await _fetch_group(broker, ctx, str(req.group_id), req.topics, {}, False,
                                          stable)
    else:
        code, topics = ErrorCode.group_authorization_failed, []
    if v < 2 and code != ErrorCode.none:  # v1 has no top-level error: per partition
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = code
    return build(ctx.response_class, {"throttle_time": 0, "error_code": code, "topics": topics})


async def handle_offset_delete(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    codes: dict[tuple[str, int], ErrorCode] = {}
    valid: list[tuple[str, int]] = []
    # ACLs (Kafka): DELETE on the group, READ on each topic
    if not check(broker, ctx, Op.DELETE, Res.GROUP, str(req.group_id)):
        return build(ctx.response_class, {"throttle_time": 0, "topics": [],
                                          "error_code": ErrorCode.group_authorization_failed})
    readable = [check(broker, ctx, Op.READ, Res.TOPIC, str(t.name)) for t in req.topics]
    counts = await _counts(broker, [(str(t.name), [int(p.partition_index) for p in t.partitions])
                                    for t, ok in zip(req.topics, readable, strict=True) if ok])
    for t, ok in zip(req.topics, readable, strict=True):
        for p in t.partitions:
            tp = (str(t.name), int(p.partition_index))
            if not ok:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif 0 <= tp[1] < counts[tp[0]]:
                valid.append(tp)
            else:
                codes[tp] = ErrorCode.unknown_topic_or_partition
    try:
        code, errors = await broker.group_coordinator.delete_offsets(str(req.group_id), valid)
    except KafkaError as e:
        code, errors = e.code, []
    if code != ErrorCode.none:
        return build(ctx.response_class, {"throttle_time": 0, "error_code": code, "topics": []})
    codes.update(dict(errors))
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": codes[(str(t.name), int(p.partition_index))],
                        }
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ],
        },
    )
