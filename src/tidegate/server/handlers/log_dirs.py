"""DescribeLogDirs (key 35) and AlterReplicaLogDirs (key 34): the directories of
`log.dirs`, their partitions, and moving a partition between them (JBOD, docs/broker.md).

DescribeLogDirs answers one result per configured directory, in `log.dirs` order: its
absolute path, every requested partition stored there (all of them when `topics` is
null) with its size in bytes and offset lag (Kafka's max(HW - LEO, 0): 0 here, where the
leader is the only replica), and from v4 the volume's total and usable bytes
(`statvfs`), as Kafka reports them. Unknown topics or partitions are left out, as in
Kafka. A directory taken offline after an I/O error answers KAFKA_STORAGE_ERROR with no
partitions, as Kafka's. A full disk is not an error here: the directory still serves
reads (Kafka would have taken it offline).

AlterReplicaLogDirs moves each named partition to the named directory of this broker
(`LogManager.move`, in a worker thread), answering when the move is done; Kafka answers
at once and copies in the background through a future replica. Errors as Kafka's:
LOG_DIR_NOT_FOUND for a path that is not one of `log.dirs`, KAFKA_STORAGE_ERROR for an
offline directory or partition, UNKNOWN_TOPIC_OR_PARTITION for a partition not hosted
here, CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster. In cluster mode moves
are refused with REPLICA_NOT_AVAILABLE (the replica's leadership state would not follow
the reopened log).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.storage.disk_space import space_usage

log = logging.getLogger(__name__)


def _wanted(req: Any) -> dict[str, set[int]] | None:
    topics = view(req, "topics")
    if topics is None:
        return None
    out: dict[str, set[int]] = {}
    for t in topics:
        out.setdefault(str(t.topic), set()).update(int(p) for p in (t.partitions or ()))
    return out


def _index(p: dict[str, Any]) -> int:
    return int(p["partition_index"])


def _usage(d: Path) -> tuple[int, int]:
    try:
        usage = space_usage(d)
    except OSError:
        return -1, -1
    return usage.total_bytes, usage.usable_bytes


async def handle_describe_log_dirs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if not check_cluster(broker, ctx, Op.DESCRIBE):  # Kafka's ACL: DESCRIBE on the cluster
        return build(ctx.response_class, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
            "results": []})
    wanted = _wanted(req)
    logs = broker.logs
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: {} for d in logs.dirs.dirs}
    for topic, partition, lg in logs.logs():
        if wanted is not None and partition not in wanted.get(topic, ()):
            continue
        d = logs.dir_of(topic, partition) or logs.log_dir
        by_dir.setdefault(d, {}).setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_size": lg.size_bytes,
                "offset_lag": max(lg.high_watermark - lg.log_end_offset, 0),
                "is_future_key": False,
            }
        )
    results: list[dict[str, Any]] = []
    for d, by_topic in by_dir.items():
        offline = d in logs.dirs.offline
        total, usable = (-1, -1) if offline else _usage(d)
        results.append({
            "error_code": ErrorCode.kafka_storage_error if offline else ErrorCode.none,
            "log_dir": str(d.resolve()),
            "topics": [] if offline else [
                {"name": name, "partitions": sorted(parts, key=_index)}
                for name, parts in sorted(by_topic.items())
            ],
            "total_bytes": total,
            "usable_bytes": usable,
        })
    return build(ctx.response_class, {"throttle_time": 0, "error_code": 0, "results": results})


async def handle_alter_replica_log_dirs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    # the last directory named for a partition wins, as in Kafka (a map keyed by partition)
    moves: dict[tuple[str, int], str] = {}
    for entry in view(req, "dirs") or ():
        for t in entry.topics or ():
            for p in t.partitions or ():
                moves[(str(t.name), int(p))] = str(entry.path)
    codes: dict[tuple[str, int], ErrorCode] = {}
    if not check_cluster(broker, ctx, Op.ALTER):  # Kafka's ACL: ALTER on the cluster
        codes = dict.fromkeys(moves, ErrorCode.cluster_authorization_failed)
    elif broker.replicas.cluster:
        codes = dict.fromkeys(moves, ErrorCode.replica_not_available)
    else:
        loop = asyncio.get_running_loop()
        for (topic, partition), path in moves.items():
            dest = broker.logs.dirs.find(path)
            if dest is None:
                codes[(topic, partition)] = ErrorCode.log_dir_not_found
                continue
            try:
                await loop.run_in_executor(None, broker.logs.move, topic, partition, dest)
                codes[(topic, partition)] = ErrorCode.none
            except KafkaError as e:
                log.warning("AlterReplicaLogDirs of %s-%d to %s from %s: %s",
                            topic, partition, path, ctx.peer, e)
                codes[(topic, partition)] = e.code
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return build(ctx.response_class, {
        "throttle_time": 0,
        "results": [{"topic_name": name, "partitions": parts}
                    for name, parts in by_topic.items()],
    })
