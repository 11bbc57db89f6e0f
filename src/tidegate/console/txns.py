"""The transactions page's data: open transactions, and what pins each stuck LSO.

"Why does my read_committed consumer see nothing?" — because a partition's last stable
offset (LSO) is held back by the oldest transaction still open there. `transactions()`
answers it in two lists:

- open transactions as their coordinators see them (ListTransactions for the states
  that are not finished, then DescribeTransactions: producer id and epoch, age,
  timeout, partitions);
- for every partition whose LSO is below its high watermark, the producer whose open
  transaction starts at the LSO (DescribeProducers on the partition's leader), with
  its transactional id when a coordinator lists that producer id, and whether it is
  *hanging* (no coordinator knows it, or its coordinator's transaction does not
  include the partition: the coordinator will never end it there).

`abort_in_partition()` ends one partition's open transaction with an ABORT marker
(WriteTxnMarkers), as `tidegate txn abort` does; `force_terminate()` ends a
transactional id's transaction through its coordinator, fencing its producer, as
`tidegate txn force-terminate` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.client.config import ProducerConfig
from tidegate.client.producer import AsyncProducer
from tidegate.client.types import TopicPartition, TransactionDescription
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.console.data import ConsoleClient, PartitionOffsets

__all__ = ["OpenTxn", "PinnedPartition", "TxnView", "abort_in_partition", "force_terminate",
           "transactions"]

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


@dataclass(frozen=True, slots=True)
class OpenTxn:
    description: TransactionDescription

    def age_ms(self, now_ms: int) -> int:
        start = self.description.start_time_ms
        return -1 if start < 0 else max(now_ms - start, 0)


@dataclass(frozen=True, slots=True)
class PinnedPartition:
    tp: TopicPartition
    offsets: PartitionOffsets
    producer_id: int  # -1: no producer reports a transaction at the LSO
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp: int
    transactional_id: str  # "" when no coordinator lists the producer id
    hanging: str  # why it is hanging, "" if its coordinator will end it


@dataclass(frozen=True, slots=True)
class TxnView:
    open: list[OpenTxn]
    pinned: list[PinnedPartition]


async def transactions(client: ConsoleClient) -> TxnView:
    admin = client.admin
    listings = await admin.list_transactions(OPEN_STATES)
    described: dict[str, TransactionDescription] = {}
    for t in listings:
        try:
            described[t.transactional_id] = (
                await admin.describe_transactions([t.transactional_id]))[t.transactional_id]
        except KafkaError as e:
            if e.code != ErrorCode.transactional_id_not_found:
                raise
    opened = [OpenTxn(d) for d in described.values()]
    topics = await admin.list_topics()
    tps = [TopicPartition(n, p) for n, t in topics.items() for p in t.partitions]
    offsets = await client.partition_offsets(tps)
    stuck = [tp for tp in tps if tp in offsets and offsets[tp].pinned > 0]
    producers = await admin.describe_producers(stuck) if stuck else {}
    by_pid = {d.producer_id: d for d in described.values()}
    pinned = []
    for tp in stuck:
        o = offsets[tp]
        holder = next((s for s in producers.get(tp, [])
                       if s.current_txn_start_offset == o.last_stable), None)
        if holder is None:
            pinned.append(PinnedPartition(tp, o, -1, -1, -1, -1, "", ""))
            continue
        d = by_pid.get(holder.producer_id)
        if d is None:
            # not an open transaction of a coordinator: which id had it, if any?
            known = await admin.list_transactions(producer_ids=[holder.producer_id])
            tid = known[0].transactional_id if known else ""
            why = (f"{tid!r} has no open transaction" if tid
                   else "no coordinator knows this producer id")
        else:
            tid = d.transactional_id
            why = "" if tp in d.partitions else f"not in the transaction of {tid!r}"
        pinned.append(PinnedPartition(tp, o, holder.producer_id, holder.producer_epoch,
                                      holder.coordinator_epoch, holder.last_timestamp,
                                      tid, why))
    return TxnView(opened, pinned)


async def abort_in_partition(client: ConsoleClient, tp: TopicPartition, producer_id: int
                             ) -> int:
    """Abort `producer_id`'s open transaction in `tp`; return the partition's new LSO."""
    states = (await client.admin.describe_producers([tp]))[tp]
    match = [s for s in states if s.producer_id == producer_id
             and s.current_txn_start_offset >= 0]
    if not match:
        raise ValueError(f"producer {producer_id} has no open transaction in "
                         f"{tp.topic}-{tp.partition}")
    s = match[0]
    # As `tidegate txn abort`: 0 is no newer than any real coordinator epoch.
    await client.admin.abort_transaction(tp.topic, tp.partition, s.producer_id,
                                         s.producer_epoch, max(s.coordinator_epoch, 0))
    return (await client.partition_offsets([tp]))[tp].last_stable


async def force_terminate(client: ConsoleClient, transactional_id: str) -> str:
    """End `transactional_id`'s transaction through its coordinator (InitProducerId
    fences its producer and aborts what it had open); return its state before."""
    before = (await client.admin.describe_transactions([transactional_id]))[transactional_id]
    settings = dict(client.settings)
    settings.update({"client.id": "tidegate-console", "transactional.id": transactional_id})
    known = ProducerConfig.keys()
    async with AsyncProducer({k: v for k, v in settings.items() if k in known}) as p:
        await p.init_transactions()
    return before.state
