"""The transaction marker channel: COMMIT/ABORT markers to each partition's leader.

The transaction coordinator's finisher (server/txn_finisher.py) calls `write(marker,
partitions)` and retries with backoff every partition whose code is not NONE, so this
module only has to deliver once and say truthfully what happened. For each partition,
from the cluster metadata (`broker.metadata`):

- a partition this broker leads is written here (server/markers.py `write_markers`:
  leader only, stamped with the leader epoch, acks=all over the ISR);
- the others are grouped by their current leader and sent as WriteTxnMarkers (v1) over
  one inter-broker connection per leader, batched: markers of concurrent transactions
  to the same broker share one request, one request in flight per destination (the
  shared mechanism of server/cluster/broker_channel.py; Kafka's
  TransactionMarkerChannelManager does the same);
- no leader (-1): LEADER_NOT_AVAILABLE; connection failure NETWORK_EXCEPTION, no answer
  in time REQUEST_TIMED_OUT — retriable, and by the finisher's next round the
  metadata may name another leader.

UNKNOWN_TOPIC_OR_PARTITION makes the finisher drop a partition as gone, so it is only
returned when the cluster metadata says the topic or partition does not exist; a leader
answering it for a partition the metadata still knows (it has not seen the partition's
creation or its move yet) becomes NOT_LEADER_OR_FOLLOWER, retried. Codes a leader gives
for a stale marker (TRANSACTION_COORDINATOR_FENCED, INVALID_PRODUCER_EPOCH) pass through:
they tell the finisher to stop or that no marker is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.static.protocol import Entity

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, request_class
from tidegate.server.cluster.broker_channel import BrokerChannel, Endpoint, RequestKind
from tidegate.server.markers import Marker, write_markers

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

__all__ = ["MarkerChannel"]

TopicPartition = tuple[str, int]
Codes = dict[TopicPartition, ErrorCode]

WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION = 27, 1


@dataclass(frozen=True)
class MarkerItem:
    """One transaction's marker for the partitions one leader holds."""

    marker: Marker
    partitions: tuple[TopicPartition, ...]


class WriteTxnMarkers(RequestKind[MarkerItem, Codes]):
    name = "transaction markers"

    def joins(self, batch: Sequence[MarkerItem], item: MarkerItem) -> bool:
        # the answer is keyed by producer id: one entry per producer in a request
        pid = item.marker.producer_id
        return all(b.marker.producer_id != pid for b in batch)

    def request(self, items: Sequence[MarkerItem]) -> tuple[int, int, Entity]:
        markers = []
        for item in items:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in item.partitions:
                by_topic.setdefault(topic, []).append(partition)
            m = item.marker
            markers.append({
                "producer_id": m.producer_id,
                "producer_epoch": m.producer_epoch,
                "transaction_result": m.commit,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                "coordinator_epoch": m.coordinator_epoch,
            })
        cls = request_class(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION)
        return WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, build(cls, {"markers": markers})

    def results(self, items: Sequence[MarkerItem], response: Any) -> list[Codes]:
        answered: dict[int, Codes] = {}
        for m in response.markers or ():
            codes = answered.setdefault(int(m.producer_id), {})
            for t in m.topics or ():
                for p in t.partitions or ():
                    codes[(str(t.name), int(p.partition_index))] = ErrorCode(int(p.error_code))
        out = []
        for item in items:
            codes = answered.get(item.marker.producer_id, {})
            # a partition left out of the answer was not written: try again
            out.append({tp: codes.get(tp, ErrorCode.unknown_server_error)
                        for tp in item.partitions})
        return out

    def failed(self, item: MarkerItem, code: ErrorCode) -> Codes:
        return dict.fromkeys(item.partitions, code)


class MarkerChannel:
    def __init__(self, broker: Broker, endpoint: Endpoint, client_id: str) -> None:
        self.broker = broker
        timeout_ms = broker.config.get_int("request.timeout.ms", 30000) or 30000
        # a leader waits up to request.timeout.ms for its in-sync replicas (acks=all):
        # give its answer a moment more to arrive
        self.channel: BrokerChannel[MarkerItem, Codes] = BrokerChannel(
            WriteTxnMarkers(), endpoint, client_id, timeout_s=timeout_ms / 1000 + 5)

    def _exists(self, tp: TopicPartition) -> bool:
        view = self.broker.metadata.topic(tp[0])
        return view is not None and 0 <= tp[1] < len(view.partitions)

    async def write(self, marker: Marker, partitions: Iterable[TopicPartition]) -> Codes:
        """Write `marker` to every partition through its leader; the code per partition
        (see the module docstring)."""
        out: Codes = {}
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        for tp in dict.fromkeys(partitions):
            view = self.broker.metadata.topic(tp[0])
            if view is None or not 0 <= tp[1] < len(view.partitions):
                out[tp] = ErrorCode.unknown_topic_or_partition
                continue
            leader = view.partitions[tp[1]].leader
            if leader < 0:
                out[tp] = ErrorCode.leader_not_available
            elif leader == self.broker.node_id:
                local.append(tp)
            else:
                remote.setdefault(leader, []).append(tp)
        jobs = [self.channel.send(bid, MarkerItem(marker, tuple(tps)))
                for bid, tps in remote.items()]
        if local:
            jobs.append(write_markers(self.broker, marker, local))
        for codes in await asyncio.gather(*jobs):
            out.update(codes)
        for tp, code in out.items():
            if code == ErrorCode.unknown_topic_or_partition and self._exists(tp):
                out[tp] = ErrorCode.not_leader_or_follower
        return out

    async def stop(self) -> None:
        await self.channel.stop()
