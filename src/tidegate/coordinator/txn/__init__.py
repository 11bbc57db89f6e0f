"""The transaction coordinator's sans-IO core: one `TxnShard` per `__transaction_state`
partition, run by the generic `coordinator.runtime`.

Modules: `states` (the state table), `model` (frozen metadata, marker jobs), `shard`
(replay, prepared index, timers), `ops` (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn), `end` (EndTxn, completion, timeouts, expiry), `admin`
(ListTransactions, DescribeTransactions), `messages`, `config`.
"""
