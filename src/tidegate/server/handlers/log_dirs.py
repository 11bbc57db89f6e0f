"""DescribeLogDirs (key 35): the log directory, its partitions' sizes and its free space.

One result for the one log directory served (the first of `log.dirs`): its absolute
path, every requested partition stored there (all of them when `topics` is null) with
its size in bytes and offset lag (Kafka's max(HW - LEO, 0): 0 here, where the leader
is the only replica), and from v4 the volume's total and usable bytes (`statvfs`), as
Kafka reports them. Unknown topics or partitions are left out, as in Kafka. A full
disk is not an error here: the directory still serves reads (Kafka would have taken it
offline and answered KAFKA_STORAGE_ERROR for it).
"""

from __future__ import annotations

from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext


def _wanted(req: Any) -> dict[str, set[int]] | None:
    topics = view(req, "topics")
    if topics is None:
        return None
    out: dict[str, set[int]] = {}
    for t in topics:
        out.setdefault(str(t.topic), set()).update(int(p) for p in (t.partitions or ()))
    return out


async def handle_describe_log_dirs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if not check_cluster(broker, ctx, Op.DESCRIBE):  # Kafka's ACL: DESCRIBE on the cluster
        return build(ctx.response_class, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
            "results": []})
    wanted = _wanted(req)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, lg in broker.logs.logs():
        if wanted is not None and partition not in wanted.get(topic, ()):
            continue
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_size": lg.size_bytes,
                "offset_lag": max(lg.high_watermark - lg.log_end_offset, 0),
                "is_future_key": False,
            }
        )
    usage = broker.logs.space.usage()
    result: dict[str, Any] = {
        "error_code": 0,
        "log_dir": str(broker.logs.log_dir.resolve()),
        "topics": [
            {"name": name, "partitions": sorted(parts, key=lambda p: p["partition_index"])}
            for name, parts in sorted(by_topic.items())
        ],
        "total_bytes": usage.total_bytes if usage else -1,
        "usable_bytes": usage.usable_bytes if usage else -1,
    }
    return build(ctx.response_class, {"throttle_time": 0, "error_code": 0, "results": [result]})
