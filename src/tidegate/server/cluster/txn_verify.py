"""KIP-890 verification with a transaction coordinator on another broker.

Before a partition leader writes a transactional batch that would start a transaction
in a partition (or a group coordinator a transactional offset commit), it asks the
transaction coordinator whether that partition is in the producer's ongoing transaction
(server/handlers/txn_produce.py, handlers/transactions.py). When the id's partition of
`__transaction_state` is led by another broker, `TransactionCoordinator.verify_partition`
asks it through `RemoteTxnVerifier.verify`, as Kafka's AddPartitionsToTxnManager does:

- the coordinator is the leader of that partition in the cluster metadata;
- the question is AddPartitionsToTxn v4 with `verify_only` (or, for transaction version
  2, where the leader adds the partition itself, v5 without it), batched per
  coordinator broker: verifications arriving while a request is in flight leave together
  in the next one, one entry per transactional id (the request keys its entries by id:
  a second question for the same id with another producer epoch or mode waits for the
  next request). The batching is the marker channel's (server/cluster/broker_channel.py);
- the answer is the coordinator's own code for the partition, as the local coordinator
  would give it, so callers treat both alike;
- no answer: COORDINATOR_NOT_AVAILABLE when no broker leads the partition,
  COORDINATOR_LOAD_IN_PROGRESS when the metadata names this broker but its shard is not
  loaded yet, NETWORK_EXCEPTION when the coordinator cannot be reached or does not answer
  in `request.timeout.ms` (Kafka's manager answers disconnects and timeouts so).

Every one of these is retriable, but not every client retries them on Produce or
TxnOffsetCommit: the callers translate them as Kafka's ReplicaManager and group
coordinator do (handlers/txn_produce.py, handlers/transactions.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.static.protocol import Entity

from tidegate.common.errors import ErrorCode
from tidegate.common.topics import TRANSACTION_STATE
from tidegate.protocol.messages import build, request_class
from tidegate.server.cluster.broker_channel import BrokerChannel, Endpoint, RequestKind

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

__all__ = ["RemoteTxnVerifier"]

TopicPartition = tuple[str, int]

ADD_PARTITIONS_KEY = 24
VERIFY_VERSION = 4  # KIP-890 part 1: verify_only
ADD_VERSION = 5  # transaction version 2: the leader adds the partition itself


@dataclass(frozen=True)
class Verification:
    transactional_id: str
    producer_id: int
    epoch: int
    tp: TopicPartition
    add: bool

    @property
    def entry(self) -> tuple[int, int, bool]:
        """What must agree for two verifications to share a transaction entry."""
        return self.producer_id, self.epoch, self.add


class AddPartitionsToTxn(RequestKind[Verification, ErrorCode]):
    name = "transaction verifications"

    def joins(self, batch: Sequence[Verification], item: Verification) -> bool:
        return all(b.transactional_id != item.transactional_id or b.entry == item.entry
                   for b in batch)

    def request(self, items: Sequence[Verification]) -> tuple[int, int, Entity]:
        txns: dict[str, tuple[Verification, dict[str, list[int]]]] = {}
        for v in items:
            _, topics = txns.setdefault(v.transactional_id, (v, {}))
            parts = topics.setdefault(v.tp[0], [])
            if v.tp[1] not in parts:
                parts.append(v.tp[1])
        version = ADD_VERSION if any(v.add for v in items) else VERIFY_VERSION
        body = build(request_class(ADD_PARTITIONS_KEY, version), {"transactions": [
            {"transactional_id": tid, "producer_id": v.producer_id,
             "producer_epoch": v.epoch, "verify_only": not v.add,
             "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            for tid, (v, topics) in txns.items()]})
        return ADD_PARTITIONS_KEY, version, body

    def results(self, items: Sequence[Verification], response: Any) -> list[ErrorCode]:
        top = ErrorCode(int(response.error_code))
        if top != ErrorCode.none:
            return [top] * len(items)
        codes: dict[tuple[str, str, int], ErrorCode] = {}
        for txn in response.results_by_transaction or ():
            for t in txn.topic_results or ():
                for p in t.results_by_partition or ():
                    codes[(str(txn.transactional_id), str(t.name), int(p.partition_index))] = \
                        ErrorCode(int(p.partition_error_code))
        # left out of the answer: not verified; retriable, as an unanswered request
        return [codes.get((v.transactional_id, *v.tp), ErrorCode.network_exception)
                for v in items]

    def failed(self, item: Verification, code: ErrorCode) -> ErrorCode:
        return ErrorCode.network_exception  # disconnected, timed out, unreadable: retry


class RemoteTxnVerifier:
    def __init__(self, broker: Broker, endpoint: Endpoint, client_id: str) -> None:
        self.broker = broker
        timeout_ms = broker.config.get_int("request.timeout.ms", 30000) or 30000
        self.channel: BrokerChannel[Verification, ErrorCode] = BrokerChannel(
            AddPartitionsToTxn(), endpoint, client_id, timeout_s=timeout_ms / 1000)

    def coordinator(self, transactional_id: str) -> int:
        """The broker leading the id's partition of `__transaction_state`, or -1."""
        view = self.broker.metadata.topic(TRANSACTION_STATE)
        p = self.broker.txn_coordinator.partition_for(transactional_id)
        if view is None or not 0 <= p < len(view.partitions):
            return -1
        return view.partitions[p].leader

    async def verify(self, transactional_id: str, producer_id: int, epoch: int,
                     tp: TopicPartition, *, add: bool) -> ErrorCode:
        """The coordinator's answer for `tp` (see the module docstring)."""
        leader = self.coordinator(transactional_id)
        if leader < 0:
            return ErrorCode.coordinator_not_available
        if leader == self.broker.node_id:
            # asked here only when this broker does not lead the partition (yet)
            return ErrorCode.coordinator_load_in_progress
        return await self.channel.send(
            leader, Verification(transactional_id, producer_id, epoch, tp, add))

    async def stop(self) -> None:
        await self.channel.stop()
