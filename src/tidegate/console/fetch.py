"""The message browser's fetch: raw Fetch requests to a partition's leader.

The consumer hides control batches and (read_committed) aborted ones; the browser must
show them, marked. So it sends its own Fetch requests over a `BrokerConnection` to the
partition's leader: read_uncommitted for everything below the high watermark, and
read_committed from the same offset for the broker's aborted-transaction list
(`browse.py` decides each record's status from both). Offsets are checked against the
partition's log start and high watermark first: an offset outside them is a 400
(`ParamError`), never a request the broker would refuse. A timestamp is turned into
an offset with ListOffsets. Bytes fetched and decompressed are capped (`params.LIMITS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidegate.client.net import BrokerConnection
from tidegate.client.types import TopicPartition
from tidegate.common.errors import ErrorCode, error_for_code
from tidegate.console.browse import BrowsedRecord, browse_batches
from tidegate.console.data import ConsoleClient, PartitionOffsets
from tidegate.console.params import LIMITS, ParamError

__all__ = ["BrowseResult", "browse"]

FETCH = 1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(slots=True)
class BrowseResult:
    tp: TopicPartition
    offsets: PartitionOffsets
    start: int  # the offset the page starts at
    rows: list[BrowsedRecord] = field(default_factory=list)
    note: str = ""


class LeaderConnections:
    """One connection per broker for the browser's fetches."""

    def __init__(self, client: ConsoleClient) -> None:
        self._client = client
        self._conns: dict[int, BrokerConnection] = {}

    async def get(self, node: int) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is not None and conn.usable:
            return conn
        cluster = await self._client.admin.describe_cluster()
        broker = next((b for b in cluster.brokers if b.node_id == node), None)
        if broker is None:
            raise error_for_code(ErrorCode.leader_not_available.value,
                                 f"broker {node} is not in the cluster's metadata")
        conn = await BrokerConnection.open(broker.host, broker.port, node_id=node,
                                           client_id="tidegate-console",
                                           security=self._client.groups.security)
        self._conns[node] = conn
        return conn

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()


async def _fetch(conn: BrokerConnection, topic: str, topic_id: Any, partition: int,
                 offset: int, max_bytes: int, isolation: int) -> Any:
    resp = await conn.request(FETCH, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1,
            "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    top = getattr(resp, "error_code", ErrorCode.none)
    if top != ErrorCode.none:
        raise error_for_code(top.value, f"fetch failed: {top.name.upper()}")
    p = resp.responses[0].partitions[0]
    if p.error_code != ErrorCode.none:
        raise error_for_code(p.error_code.value, f"cannot fetch {topic}-{partition} at "
                             f"offset {offset}: {p.error_code.name.upper()}")
    return p


async def browse(client: ConsoleClient, conns: LeaderConnections, tp: TopicPartition, *,
                 offset: int | None, timestamp: int | None, limit: int, max_bytes: int,
                 read_committed: bool) -> BrowseResult:
    desc = (await client.admin.describe_topics([tp.topic], include_configs=False))[0]
    info = next((p for p in desc.partitions if p.partition == tp.partition), None)
    if info is None:
        raise ParamError(f"topic {tp.topic!r} has no partition {tp.partition} (it has "
                         f"{len(desc.partitions)})")
    offsets = (await client.partition_offsets([tp]))[tp]
    note = ""
    if timestamp is not None:
        found = (await client.admin.list_offsets({tp: timestamp})).get(tp)
        if found is None or found.offset < 0:
            start, note = offsets.high_watermark, f"no record at or after timestamp {timestamp}"
        else:
            start = found.offset
    elif offset is None:
        # the newest `limit` records by default
        start = max(offsets.log_start, offsets.high_watermark - limit)
    else:
        start = offset
        if start > offsets.high_watermark:
            raise ParamError(f"offset {start} is past the end of {tp.topic}-{tp.partition} "
                             f"(high watermark {offsets.high_watermark})")
        if start < offsets.log_start:
            raise ParamError(f"offset {start} is before the start of {tp.topic}-"
                             f"{tp.partition} (log start offset {offsets.log_start})")
    result = BrowseResult(tp, offsets, start, note=note)
    if start >= offsets.high_watermark:
        return result
    conn = await conns.get(info.leader)
    raw = await _fetch(conn, tp.topic, desc.topic_id, tp.partition, start,
                       min(max_bytes, LIMITS["max_bytes"]), READ_UNCOMMITTED)
    committed = await _fetch(conn, tp.topic, desc.topic_id, tp.partition, start,
                             min(max_bytes, LIMITS["max_bytes"]), READ_COMMITTED)
    aborted = [(int(a.producer_id), int(a.first_offset))
               for a in (getattr(committed, "aborted_transactions", None) or [])]
    lso = int(getattr(committed, "last_stable_offset", offsets.last_stable))
    rows = browse_batches(bytes(raw.records or b""), start, last_stable_offset=lso,
                          aborted=aborted, max_records=limit,
                          max_batch_bytes=LIMITS["max_batch_bytes"])
    if read_committed:
        # what a read_committed consumer gets: below the LSO, no aborted data, no markers
        shown = [r for r in rows if r.offset < lso and r.status in ("committed", "error")]
        hidden = sum(1 for r in rows if r.offset < lso) - len(shown)
        if hidden:
            result.note = (f"read_committed: {hidden} aborted records and transaction "
                           "markers hidden")
        rows = shown
    if not rows and not result.note:
        result.note = ("nothing fits in max_bytes: raise it to see the next batch"
                       if raw.records else "no records")
    result.rows = rows
    return result
