"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords: questions about log positions.

ListOffsets special timestamps (Kafka's): -1 latest (the high watermark; the last
stable offset for read_committed), -2 earliest, -3 max timestamp (KIP-734), -4
earliest local (KIP-405), -5 latest tiered (KIP-1005): with no tiered storage -4
equals -2, and -5 finds nothing (offset -1, as Kafka answers when remote storage is
off). Any other timestamp finds the first offset whose timestamp is >= it. A follower
broker asking (`replica_id` >= 0, as its fetcher does after OFFSET_OUT_OF_RANGE) sees
the whole log: latest is the log end offset, as in Kafka.

Each is answered by the partition's leader only (the replica manager refuses others
with NOT_LEADER_OR_FOLLOWER, and checks `current_leader_epoch`: KIP-320). On the
embedded broker every partition has had one leader (this node) at epoch 0, so
OffsetForLeaderEpoch answers the log end offset for any epoch >= 0.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import error_fields
from tidegate.server.partition import NO_EPOCH, Partition

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _leader(broker: Broker, topic: str, index: int, p: Any) -> Partition | ErrorCode:
    """The led partition, or the error code to answer (unknown, not leader, epoch)."""
    try:
        return broker.replicas.leader(
            topic, index, int(view(p, "current_leader_epoch", NO_EPOCH)))
    except KafkaError as e:
        return e.code


async def handle_list_offsets(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    committed = int(view(req, "isolation_level", 0)) == 1
    from_replica = int(view(req, "replica_id", -1)) >= 0
    allowed = {t.name for t in req.topics if check(broker, ctx, Op.DESCRIBE, Res.TOPIC, t.name)}
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            index = int(p.partition_index)
            out: dict[str, Any] = {
                "partition_index": index,
                "error_code": 0,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
                "old_style_offsets": [],
            }
            part = _leader(broker, t.name, index, p) if t.name in allowed else (
                ErrorCode.topic_authorization_failed)
            if isinstance(part, ErrorCode):
                out["error_code"] = part
                parts.append(out)
                continue
            lg = part.log
            ts = int(p.timestamp)
            # read_committed sees only what lies below the last stable offset
            visible = lg.last_stable_offset if committed else lg.high_watermark
            if from_replica:  # a follower replicates everything, not only what is committed
                visible = lg.log_end_offset
            try:
                if ts == LATEST:
                    out["offset"] = visible
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    out["offset"] = lg.log_start_offset
                elif ts == LATEST_TIERED:
                    pass  # nothing is tiered: offset -1
                elif ts == MAX_TIMESTAMP:
                    if visible > lg.log_start_offset:
                        max_ts, max_off = lg.max_timestamp_and_offset()
                        if max_off < visible:
                            out["timestamp"], out["offset"] = max_ts, max_off
                elif ts < 0:
                    out["error_code"] = ErrorCode.invalid_request
                else:
                    found = lg.offset_for_timestamp(ts)
                    if found is not None and found[0] < visible:
                        out["offset"], out["timestamp"] = found
            except KafkaError as e:
                out["error_code"], _ = error_fields(e)
            if out["offset"] >= 0:
                out["leader_epoch"] = part.leader_epoch
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": 0, "topics": topics})


async def handle_offset_for_leader_epoch(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    # ACLs: a follower (replica_id >= 0) needs CLUSTER_ACTION, a client DESCRIBE on the topic
    denied: dict[str, ErrorCode] = {}
    if int(view(req, "replica_id", -1)) >= 0:
        if not check_cluster(broker, ctx, Op.CLUSTER_ACTION):
            denied = {t.topic: ErrorCode.cluster_authorization_failed for t in req.topics}
    else:
        denied = {t.topic: ErrorCode.topic_authorization_failed for t in req.topics
                  if not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, t.topic)}
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            index = int(p.partition)
            out: dict[str, Any] = {
                "error_code": 0,
                "partition": index,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            part = denied.get(t.topic) or _leader(broker, t.topic, index, p)
            if isinstance(part, ErrorCode):
                out["error_code"] = part
            elif part.stamp_epoch:
                # cluster: the epoch cache says where the requested epoch ended (a consumer
                # validating its position after a leader change asks for an older epoch)
                ends = part.log.end_offset_for_epoch(int(p.leader_epoch))
                out["leader_epoch"], out["end_offset"] = ends.epoch, ends.end_offset
            elif int(p.leader_epoch) >= part.leader_epoch:
                out["leader_epoch"] = part.leader_epoch
                out["end_offset"] = part.log.log_end_offset
            parts.append(out)
        topics.append({"topic": t.topic, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": 0, "topics": topics})


async def handle_delete_records(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    allowed = {t.name for t in req.topics if check(broker, ctx, Op.DELETE, Res.TOPIC, t.name)}
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            index = int(p.partition_index)
            out: dict[str, Any] = {"partition_index": index, "low_watermark": -1, "error_code": 0}
            part = _leader(broker, t.name, index, p) if t.name in allowed else (
                ErrorCode.topic_authorization_failed)
            if isinstance(part, ErrorCode):
                out["error_code"] = part
            else:
                lg = part.log
                offset = int(p.offset)
                if offset == -1:
                    offset = lg.high_watermark
                try:
                    # the log refuses a compact-only topic, then an offset out of range;
                    # it fsyncs the log-start checkpoint: keep that off the event loop.
                    out["low_watermark"] = await asyncio.get_running_loop().run_in_executor(
                        None, lg.delete_records_before, offset
                    )
                except KafkaError as e:
                    out["error_code"], _ = error_fields(e)
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": 0, "topics": topics})
