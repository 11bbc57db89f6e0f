"""The state table, loading logs Kafka wrote (value v0, no Tidegate tag), transaction
version 0 (value v0) end to end, and bounded timer batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.runtime import LoggedRecord
from tidegate.coordinator.txn import shard as shard_mod
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import (
    PREVIOUS_STATES,
    IllegalTxnTransition,
    TxnState,
    transition_to,
)
from tidegate.protocol.txn_records import (
    TxnLogValue,
    TxnRecordError,
    encode_txn_key,
    encode_txn_value,
)
from tidegate.records.record import Record, iter_batches

from .test_txn_ops import TxnDriver

E = ErrorCode
S = TxnState


def test_table_is_kafkas() -> None:
    kafka = {  # TransactionState.validPreviousStates (Kafka 4.x)
        "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
        "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
        "PrepareCommit": {"Ongoing"},
        # Kafka 4 (KIP-890 part 2): a version-2 abort with no transaction open
        "PrepareAbort": {"Ongoing", "PrepareEpochFence", "Empty", "CompleteCommit",
                         "CompleteAbort"},
        "CompleteCommit": {"PrepareCommit"},
        "CompleteAbort": {"PrepareAbort"},
        "Dead": {"Empty", "CompleteCommit", "CompleteAbort"},
        "PrepareEpochFence": {"Ongoing"},
    }
    assert {t.wire_name: {s.wire_name for s in prev} for t, prev in PREVIOUS_STATES.items()} \
        == kafka
    assert [s.id for s in TxnState] == list(range(8))
    for target, prev in PREVIOUS_STATES.items():
        for current in TxnState:
            if current in prev:
                assert transition_to(current, target) is target
            else:
                with pytest.raises(IllegalTxnTransition):
                    transition_to(current, target)
    assert all(s.doc for s in TxnState)
    assert TxnState.from_name("PrepareCommit") is S.PREPARE_COMMIT
    assert TxnState.from_name("prepare_commit") is None


def _rec(offset: int, txn_id: str, v: TxnLogValue | None, version: int = 0) -> LoggedRecord:
    return LoggedRecord(offset, encode_txn_key(txn_id),
                        None if v is None else encode_txn_value(v, version))


def test_load_a_kafka_log() -> None:
    """Records as Kafka writes them: v0 values; then a v1 one with Kafka's tags only."""
    shard = TxnShard(3, TxnConfig(), coordinator_epoch=9)
    shard.set_time(100)
    shard.replay([
        _rec(0, "a", TxnLogValue(5, 0, 60000, S.EMPTY.id, None, 10, -1)),
        _rec(1, "a", TxnLogValue(5, 0, 60000, S.ONGOING.id, (("t", (0, 1)),), 11, 11)),
        _rec(2, "a", TxnLogValue(5, 0, 60000, S.PREPARE_COMMIT.id, (("t", (0, 1)),), 12, 11)),
        _rec(3, "b", TxnLogValue(6, 3, 60000, S.ONGOING.id, (("u", (2,)),), 13, 13)),
        _rec(4, "b", TxnLogValue(6, 4, 60000, S.PREPARE_ABORT.id, (("u", (2,)),), 14, 13,
                                 6, -1, 2), 1),
        _rec(5, "c", TxnLogValue(7, 0, 60000, S.EMPTY.id, None, 15, -1)),
        _rec(6, "c", None),
        _rec(7, "d", TxnLogValue(8, 0, 60000, S.PREPARE_EPOCH_FENCE.id, None, 15, -1)),
        LoggedRecord(8, b"\x00\x01\x00\x01x", b""),  # unknown key version: skipped
    ], -1, -1, False)
    shard.on_loaded(100)
    assert set(shard.txns) == {"a", "b"} and shard.skipped_records == 2
    b = shard.txns["b"]
    assert b.last_producer_epoch == 3 and b.client_txn_version == 2  # derived: KIP-890 end
    assert shard.txns["a"].last_producer_epoch == -1
    jobs = {j.transactional_id: j for j in shard.pending_markers(100)}
    assert jobs["a"].commit and jobs["a"].partitions == {("t", 0), ("t", 1)}
    assert (jobs["b"].commit, jobs["b"].producer_epoch, jobs["b"].coordinator_epoch) == \
        (False, 4, 9)
    assert shard.next_deadline() == 100 + 10_000


def test_malformed_record_fails_the_load() -> None:
    shard = TxnShard(0)
    with pytest.raises(TxnRecordError):
        shard.replay([LoggedRecord(0, encode_txn_key("a"), b"\x00\x00\x01")], -1, -1, False)


def test_live_replay_checks_the_table() -> None:
    shard = TxnShard(0)
    shard.on_loaded(0)
    with pytest.raises(IllegalTxnTransition):
        shard.replay([_rec(0, "a", TxnLogValue(5, 0, 1, S.PREPARE_COMMIT.id, (), 1, 1))])


def _batches(d: TxnDriver, start: int) -> list[list[Record]]:
    data = d.log.read(start, 1 << 20, max_offset=d.log.log_end_offset)
    return [list(recs) for _, recs in iter_batches(data)]


def _records(d: TxnDriver, start: int) -> list[Record]:
    return [r for b in _batches(d, start) for r in b]


def test_transaction_version_0_writes_v0_and_replays(tmp_path: Path) -> None:
    d = TxnDriver(tmp_path, TxnConfig(transaction_version=0))
    r = d.init()
    pid = r.producer_id
    # KIP-360 retry works live (the last epoch is kept in memory while the epoch stays)
    assert d.init(pid=pid, epoch=0).producer_epoch == 1
    assert d.add(pid, 1).error is E.none
    values = [r.value for r in _records(d, 0)]
    assert values and all(v is not None and v[:2] == b"\x00\x00" for v in values)
    assert d.end(pid, 1, version=2).producer_epoch == 1  # no KIP-890 bump at version 0
    assert d.reloaded() == d.shard.txns
    d.markers()
    assert d.reloaded() == d.shard.txns
    assert d.meta().state is S.COMPLETE_COMMIT


def test_timer_batches_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard_mod, "MAX_RECORDS_PER_POLL", 3)
    d = TxnDriver(tmp_path, TxnConfig(transactional_id_expiration_ms=1000))
    ids = [f"id{i}" for i in range(7)]
    for i in ids:
        d.begin(i, timeout=1000)
    before = d.log.log_end_offset
    d.advance(10_000)
    assert all(d.meta(i).state is S.PREPARE_ABORT for i in ids)
    assert [len(b) for b in _batches(d, before)] == [3, 3, 1]
    d.markers()
    d.advance(3_600_000)
    assert d.shard.txns == {}
    assert d.reloaded() == {}
