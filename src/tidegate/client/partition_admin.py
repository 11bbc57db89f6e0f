"""The admin client's partition tools: leader elections (ElectLeaders, KIP-460) and
partition reassignments (AlterPartitionReassignments / ListPartitionReassignments,
KIP-455), as Kafka's `Admin.electLeaders`, `alterPartitionReassignments` and
`listPartitionReassignments`.

All three go to the controller (the `controller_id` of Metadata). A NOT_CONTROLLER
answer — top-level, or for any partition of an ElectLeaders — means the controller moved:
metadata is refreshed and the request sent again, with ``retry.backoff.ms`` between
tries, until ``default.api.timeout.ms``. Per-partition outcomes come back as None
(done) or the typed `KafkaError` of the partition's error code; a top-level error is
raised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.metadata import MetadataClient
from tidegate.client.net import BrokerConnection
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError, UnsupportedVersionError, error_for_code

__all__ = ["PREFERRED", "UNCLEAN", "PartitionAdmin", "PartitionReassignment"]

ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 43, 45, 46
PREFERRED, UNCLEAN = 0, 1
# The versions this module reads and writes (ElectLeaders v1 adds the election type).
VERSIONS: dict[int, tuple[int, int]] = {
    ELECT_LEADERS: (1, 2), ALTER_REASSIGNMENTS: (0, 0), LIST_REASSIGNMENTS: (0, 0)}


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment in progress: the full replica list and who is joining/leaving."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def _version(conn: BrokerConnection, api: int) -> int:
    lo, hi = VERSIONS[api]
    theirs = conn.broker_versions.get(api)
    if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
        raise UnsupportedVersionError(
            f"broker {conn.host}:{conn.port} does not support API {api} at versions "
            f"{lo}-{hi} (it supports {theirs or 'none'})")
    return min(hi, theirs[1])


def _error(code: int, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return error_for_code(int(code), f"{what}: {message or ErrorCode(code).name.upper()}")


class PartitionAdmin:
    def __init__(self, metadata: MetadataClient, timeout_ms: int, retry_backoff_ms: int) -> None:
        self.metadata = metadata
        self.timeout_ms = timeout_ms
        self.backoff_s = retry_backoff_ms / 1000

    async def _to_controller(self, api: int, data: Mapping[str, Any],
                             not_controller: Any) -> Any:
        """Send to the controller; again while `not_controller(resp)` (it moved)."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            await self.metadata.refresh([])
            cache = self.metadata.cache
            net = self.metadata.net
            conn = await (net.connect(cache.controller_id) if cache.controller_id in cache.brokers
                          else net.any_connection())
            resp = await conn.request(api, data, version=_version(conn, api),
                                      timeout_ms=self.timeout_ms + 5000)
            if not not_controller(resp) or time.monotonic() > deadline:
                return resp
            cache.request_update()
            await asyncio.sleep(self.backoff_s)

    async def elect_leaders(self, election_type: int,
                            partitions: Iterable[TopicPartition] | None = None
                            ) -> dict[TopicPartition, KafkaError | None]:
        """PREFERRED (0) or UNCLEAN (1) elections for `partitions` (None: all; the
        answer then lists only the partitions that needed an election)."""
        asked = None if partitions is None else list(dict.fromkeys(partitions))
        by_topic: dict[str, list[int]] = {}
        for tp in asked or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        data = {"election_type": election_type, "timeout": self.timeout_ms,
                "topic_partitions": None if asked is None else [
                    {"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        resp = await self._to_controller(ELECT_LEADERS, data, lambda r: (
            r.error_code == ErrorCode.not_controller or any(
                p.error_code == ErrorCode.not_controller
                for t in r.replica_election_results for p in t.partition_result)))
        top = _error(resp.error_code, None, "leader election")
        if top is not None:
            raise top
        kind = "preferred" if election_type == PREFERRED else "unclean"
        return {TopicPartition(str(t.topic), int(p.partition_id)): _error(
                    p.error_code, p.error_message,
                    f"{kind} leader election of {t.topic}-{p.partition_id}")
                for t in resp.replica_election_results for p in t.partition_result}

    async def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move each partition to the replicas given (None: cancel its reassignment)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in reassignments.items():
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition,
                "replicas": None if replicas is None else list(replicas)})
        data = {"timeout": self.timeout_ms,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        resp = await self._to_controller(ALTER_REASSIGNMENTS, data,
                                         lambda r: r.error_code == ErrorCode.not_controller)
        top = _error(resp.error_code, resp.error_message, "partition reassignment")
        if top is not None:
            raise top
        return {TopicPartition(str(t.name), int(p.partition_index)): _error(
                    p.error_code, p.error_message,
                    f"reassignment of {t.name}-{p.partition_index}")
                for t in resp.responses for p in t.partitions}

    async def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of `partitions`, or all)."""
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        resp = await self._to_controller(LIST_REASSIGNMENTS,
                                         {"timeout": self.timeout_ms, "topics": topics},
                                         lambda r: r.error_code == ErrorCode.not_controller)
        top = _error(resp.error_code, resp.error_message, "listing reassignments")
        if top is not None:
            raise top
        return {TopicPartition(str(t.name), int(p.partition_index)): PartitionReassignment(
                    tuple(int(r) for r in p.replicas), tuple(int(r) for r in p.adding_replicas),
                    tuple(int(r) for r in p.removing_replicas))
                for t in resp.topics for p in t.partitions}
