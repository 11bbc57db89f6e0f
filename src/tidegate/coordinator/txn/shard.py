"""`TxnShard`: the transactional ids of one `__transaction_state` partition.

`replay` is the only code that changes state: it decodes each record, checks the move
against the state table (live records only; a load takes what the log says), installs
the metadata and keeps the `prepared` index of ids in PrepareCommit/PrepareAbort with
the offset of that record. The request operations live in `ops.py` (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn), `end.py` (EndTxn, marker completion, timeouts,
expiry) and `admin.py` (ListTransactions, DescribeTransactions); each is
`op(shard, ..., now) -> Result`.

Markers: `pending_markers(durable_offset)` hands out one `MarkerJob` per prepared id
whose Prepare record lies below `durable_offset` — so markers are never written for a
Prepare that is not yet fsynced — and only once per Prepare record: the writer calls
`release_marker` if it gives up on a job, so the next call hands it out again. A load
starts with nothing handed out: every prepared transaction is completed again
(recovery). Jobs carry the shard's `coordinator_epoch` so partition leaders can fence a
coordinator that lost its partition.

Timers (`DeadlineQueue`): "abort" every transaction.abort.timed.out.transaction.
cleanup.interval.ms and "expire" every transaction.remove.expired.transaction.cleanup.
interval.ms, both started by `on_loaded`. A run writes at most MAX_RECORDS_PER_POLL
records; a full run reschedules its timer at once so the shell polls again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from tidegate.coordinator.runtime import LoggedRecord, ReplayRecord, Result
from tidegate.coordinator.timers import DeadlineQueue
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.model import MarkerJob, TxnMetadata, from_log_value
from tidegate.coordinator.txn.states import TxnState, transition_to
from tidegate.protocol.txn_records import (
    TxnLogValue,
    UnknownTxnKeyVersion,
    decode_txn_key,
    decode_txn_value,
)

__all__ = ["ABORT_TIMER", "EXPIRE_TIMER", "MAX_RECORDS_PER_POLL", "TxnShard"]

ABORT_TIMER = "abort"
EXPIRE_TIMER = "expire"
# Records per timer batch: one RecordBatch must stay well below the topic's
# max.message.bytes (1 MiB), as Kafka bounds its expiry batches.
MAX_RECORDS_PER_POLL = 1000


class TxnShard:
    def __init__(self, partition: int, config: TxnConfig | None = None,
                 coordinator_epoch: int = 0) -> None:
        self.partition = partition
        self.config = config or TxnConfig()
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMetadata] = {}
        self.prepared: dict[str, int] = {}  # txn id -> offset of its Prepare* record
        self._handed_out: set[str] = set()
        self.timers = DeadlineQueue()
        self.now_ms = 0
        self.loading = True
        self.skipped_records = 0
        self.end_offset = 0  # one past the last replayed record

    # -- the Shard protocol ---------------------------------------------------------------

    def set_time(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def on_loaded(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.loading = False
        self.timers.schedule(ABORT_TIMER, now_ms + self.config.abort_timed_out_interval_ms)
        self.timers.schedule(EXPIRE_TIMER, now_ms + self.config.remove_expired_interval_ms)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def poll(self, now_ms: int) -> Result[None]:
        """Handle due timers until one produces records (the shell polls again while
        anything is due, so later work sees those records replayed)."""
        from tidegate.coordinator.txn import end

        while True:
            key = self.timers.pop_next(now_ms)
            if key is None:
                return Result(None)
            if key == ABORT_TIMER:
                interval = self.config.abort_timed_out_interval_ms
                res = end.abort_timed_out(self, now_ms, MAX_RECORDS_PER_POLL)
            elif key == EXPIRE_TIMER:
                interval = self.config.remove_expired_interval_ms
                res = end.expire_ids(self, now_ms, MAX_RECORDS_PER_POLL)
            else:
                continue
            # a full batch may have left work: run again right away, else at the interval
            full = len(res.records) >= MAX_RECORDS_PER_POLL
            self.timers.schedule(key, now_ms if full else now_ms + interval)
            if res.records:
                return res

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """`__transaction_state` holds no transactional data: markers never apply."""

    def replay(self, records: Sequence[ReplayRecord], producer_id: int = -1,
               producer_epoch: int = -1, transactional: bool = False) -> None:
        for r in records:
            self.end_offset = max(self.end_offset, r.offset + 1)
            known = r.known if type(r) is LoggedRecord else None
            if known is not None:  # built by an operation just now (runtime.KnownRecord)
                txn_id, value = cast("tuple[str, TxnLogValue]", known)
            else:
                if r.key is None:
                    self.skipped_records += 1
                    continue
                try:
                    txn_id = decode_txn_key(r.key)
                except UnknownTxnKeyVersion:
                    self.skipped_records += 1  # Kafka's loader skips unknown keys too
                    continue
                if r.value is None:
                    self._remove(txn_id)
                    continue
                value = decode_txn_value(r.value)
            state = TxnState.from_id(value.status)
            if state is TxnState.DEAD:
                self._remove(txn_id)
                continue
            if state is TxnState.PREPARE_EPOCH_FENCE:
                self.skipped_records += 1  # never written; a foreign log's oddity
                continue
            prev = self.txns.get(txn_id)
            if not self.loading:
                transition_to(prev.state if prev else TxnState.EMPTY, state)
            meta = from_log_value(txn_id, value, prev, r.offset)
            self.txns[txn_id] = meta
            if state.is_prepare:
                self.prepared[txn_id] = r.offset
                self._handed_out.discard(txn_id)
            else:
                self._drop_prepared(txn_id)

    def _remove(self, txn_id: str) -> None:
        prev = self.txns.pop(txn_id, None)
        if prev is not None and not self.loading:
            transition_to(prev.state, TxnState.DEAD)
        self._drop_prepared(txn_id)

    def _drop_prepared(self, txn_id: str) -> None:
        if self.prepared.pop(txn_id, None) is not None:
            self._handed_out.discard(txn_id)

    # -- markers --------------------------------------------------------------------------

    def pending_markers(self, durable_offset: int) -> list[MarkerJob]:
        """Jobs for prepared transactions whose Prepare record is below
        `durable_offset` and that were not handed out yet (marked handed out now)."""
        jobs = []
        for txn_id, offset in self.prepared.items():
            if offset >= durable_offset or txn_id in self._handed_out:
                continue
            meta = self.txns[txn_id]
            self._handed_out.add(txn_id)
            jobs.append(MarkerJob(
                transactional_id=txn_id,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                coordinator_epoch=self.coordinator_epoch,
                commit=meta.state is TxnState.PREPARE_COMMIT,
                partitions=meta.partitions,
                prepare_offset=offset,
            ))
        return jobs

    def release_marker(self, transactional_id: str, prepare_offset: int | None = None) -> None:
        """Hand the job out again (its writer gave up). Ignored if the id has moved on
        from the Prepare record at `prepare_offset`."""
        if prepare_offset is None or self.prepared.get(transactional_id) == prepare_offset:
            self._handed_out.discard(transactional_id)

    def markers_in_flight(self) -> set[str]:
        return set(self._handed_out)
