"""ListTransactions and DescribeTransactions (KIP-664) over one shard's transactional ids.

Read-only: no records. The shell merges the results of every shard it leads and answers
COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR itself for partitions that are loading
or not ours, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.runtime import Result
from tidegate.coordinator.txn.messages import DescribedTxn, ListedTxn, ListTransactionsResponse
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import TxnState

__all__ = ["describe_transactions", "list_transactions"]


def list_transactions(shard: TxnShard, states: Iterable[str] = (),
                      producer_ids: Iterable[int] = (), duration_filter_ms: int = -1,
                      now: int = 0) -> Result[ListTransactionsResponse]:
    """Kafka's filters: states by name (unknown names reported back), producer ids,
    and (ListTransactions v1, KIP-994) only transactions running longer than
    `duration_filter_ms` (`now - start > duration`) when it is >= 0."""
    names = list(dict.fromkeys(states))
    wanted = {s for s in (TxnState.from_name(n) for n in names) if s is not None}
    unknown = tuple(n for n in names if TxnState.from_name(n) is None)
    pids = set(producer_ids)
    out = []
    for meta in shard.txns.values():
        if names and meta.state not in wanted:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if duration_filter_ms >= 0 and now - meta.txn_start_ms <= duration_filter_ms:
            continue
        out.append(ListedTxn(meta.transactional_id, meta.producer_id, meta.state.wire_name))
    return Result(ListTransactionsResponse(ErrorCode.none, unknown, tuple(out)))


def describe_transactions(shard: TxnShard, transactional_ids: Iterable[str]
                          ) -> Result[list[DescribedTxn]]:
    out = []
    for txn_id in transactional_ids:
        if not txn_id:
            out.append(DescribedTxn(txn_id, ErrorCode.invalid_request))
            continue
        meta = shard.txns.get(txn_id)
        if meta is None:
            out.append(DescribedTxn(txn_id, ErrorCode.transactional_id_not_found))
            continue
        topics: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            topics.setdefault(topic, []).append(p)
        out.append(DescribedTxn(
            transactional_id=txn_id,
            error=ErrorCode.none,
            state=meta.state.wire_name,
            timeout_ms=meta.timeout_ms,
            start_time_ms=meta.txn_start_ms,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=topics,
        ))
    return Result(out)
