"""ListOffsets for many partitions: by timestamp, earliest (-2) or latest (-1).

Shared by the consumer (position resets, `offsets_for_times`, `beginning_offsets`,
`end_offsets`) and the admin client. Requests go to each partition's leader; leadership
and connection errors refresh metadata and retry with ``retry.backoff.ms`` until
`timeout_ms`; other errors raise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.errors import KafkaTimeoutError
from tidegate.client.metadata import MetadataClient
from tidegate.client.types import OffsetAndTimestamp, TopicPartition
from tidegate.common.errors import KafkaError, error_for_code

__all__ = ["EARLIEST", "LATEST", "MAX_TIMESTAMP", "list_offsets"]

LIST_OFFSETS = 2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


async def list_offsets(metadata: MetadataClient, query: Mapping[TopicPartition, int], *,
                       isolation_level: int = 0, timeout_ms: int = 60_000,
                       retry_backoff_ms: int = 100
                       ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Offsets for `query` (partition -> timestamp or EARLIEST/LATEST). A timestamp
    later than every record maps to None, as in Kafka's offsetsForTimes."""
    deadline = time.monotonic() + timeout_ms / 1000
    result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    pending = dict(query)
    last_error: KafkaError | None = None
    await metadata.refresh({tp.topic for tp in pending})
    while pending:
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            leader = metadata.cache.leader_for(tp)
            if leader is None:
                err = metadata.cache.topic_error(tp.topic)
                if err is not None and not err.retriable:
                    raise err
                info = metadata.cache.topic(tp.topic)
                if info is not None and tp.partition not in info.partitions:
                    raise error_for_code(ErrorCode.unknown_topic_or_partition.value,
                                         f"{tp.topic}-{tp.partition} does not exist")
                continue
            by_node.setdefault(leader, []).append(tp)
        outcomes = await asyncio.gather(
            *(_ask(metadata, node, tps, pending, isolation_level)
              for node, tps in by_node.items()), return_exceptions=True)
        retry = False
        for outcome in outcomes:
            if isinstance(outcome, KafkaError) and outcome.retriable:
                last_error, retry = outcome, True
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                for tp, value in outcome.items():
                    if isinstance(value, KafkaError):
                        if not value.retriable:
                            raise value
                        last_error, retry = value, True
                    else:
                        result[tp] = value
                        pending.pop(tp, None)
        if len(by_node) < 1 and pending:
            retry = True
        if pending and retry:
            if time.monotonic() + retry_backoff_ms / 1000 > deadline:
                raise KafkaTimeoutError(
                    f"listing offsets for {len(pending)} partition(s) did not finish within "
                    f"{timeout_ms} ms" + (f": {last_error}" if last_error else ""))
            await asyncio.sleep(retry_backoff_ms / 1000)
            await metadata.refresh()
    return result


async def _ask(metadata: MetadataClient, node: int, tps: list[TopicPartition],
               query: Mapping[TopicPartition, int], isolation_level: int
               ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError | None]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in tps:
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "timestamp": query[tp],
             "current_leader_epoch": -1})
    data = {"replica_id": -1, "isolation_level": isolation_level, "timeout": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    try:
        resp = await metadata.net.request(node, LIST_OFFSETS, data)
    except KafkaError:
        metadata.cache.request_update()
        raise
    out: dict[TopicPartition, OffsetAndTimestamp | KafkaError | None] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            code = p.error_code
            if code != ErrorCode.none:
                metadata.cache.request_update()
                out[tp] = error_for_code(code.value, f"listing offsets of {tp.topic}-"
                                         f"{tp.partition}: {code.name.upper()}")
            elif int(p.offset) < 0:
                out[tp] = None
            else:
                out[tp] = OffsetAndTimestamp(int(p.offset), int(getattr(p, "timestamp", -1)))
    return out
