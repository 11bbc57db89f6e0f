"""Example-based tests of the producer-state rules, one Kafka rule per test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tidegate.records.batch import BatchHeader
from tidegate.records.control import ControlType
from tidegate.storage.producer_snapshot import list_snapshots
from tidegate.storage.producer_state import (
    CompletedTxn,
    DuplicateBatch,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    Verdict,
    classify,
)

from ._support import INT32_MAX, at, header, marker

DAY = 86_400_000


class Broker:
    """validate -> assign offsets -> update, as the log will do."""

    def __init__(self, psm: ProducerStateManager | None = None) -> None:
        self.psm = psm if psm is not None else ProducerStateManager()
        self.end = 0
        self.now = 1_000_000

    def send(
        self, h: BatchHeader, *, is_from_client: bool = True
    ) -> DuplicateBatch | tuple[int, int]:
        dup = self.psm.validate(h, is_from_client=is_from_client)
        if dup is not None:
            return dup
        placed = at(h, self.end)
        self.psm.update(placed, self.now)
        self.end = placed.next_offset
        return placed.base_offset, placed.last_offset


def test_in_sequence_batches_are_accepted_and_offsets_recorded() -> None:
    b = Broker()
    assert b.send(header(7, 0, 0, 3)) == (0, 2)
    assert b.send(header(7, 0, 3, 2)) == (3, 4)
    entry = b.psm.last_entry(7)
    assert entry is not None and entry.last_seq == 4 and entry.last_offset == 4
    assert b.psm.map_end_offset == 5


def test_duplicate_of_any_of_the_last_five_returns_original_offsets() -> None:
    b = Broker()
    sent = [b.send(header(1, 0, seq, 1)) for seq in range(7)]
    for seq in range(2, 7):
        dup = b.send(header(1, 0, seq, 1))
        assert isinstance(dup, DuplicateBatch)
        assert (dup.first_offset, dup.last_offset) == sent[seq]
    assert b.psm.map_end_offset == 7  # nothing written again
    # Older than the cached five: written already, offsets unknown (Kafka: out of order).
    with pytest.raises(DuplicateSequenceError) as exc:
        b.send(header(1, 0, 1, 1))
    assert exc.value.code.value == 46
    assert b.psm.map_end_offset == 7


def test_only_batches_just_behind_the_cache_count_as_old_retries() -> None:
    b = Broker()
    b.send(header(1, 0, INT32_MAX - 2, 3))  # INT32_MAX-2 .. INT32_MAX
    b.send(header(1, 0, 0, 4))  # wraps: 0 .. 3
    for seq in range(4, 4 + 10 * 4, 4):
        b.send(header(1, 0, seq, 4))
    entry = b.psm.last_entry(1)
    assert entry is not None and entry.batches[0].first_seq == 24
    with pytest.raises(DuplicateSequenceError):  # behind, across the wrap
        b.send(header(1, 0, INT32_MAX - 2, 3))
    with pytest.raises(DuplicateSequenceError):
        b.send(header(1, 0, 20, 4))
    with pytest.raises(OutOfOrderSequenceError):  # a gap ahead stays out of order
        b.send(header(1, 0, 50, 1))
    with pytest.raises(OutOfOrderSequenceError):  # overlapping the cache
        b.send(header(1, 0, 22, 4))
    with pytest.raises(OutOfOrderSequenceError):  # "behind" by more than 2**30: ahead
        b.send(header(1, 0, 24 + (1 << 30), 1))


def test_gap_and_overlap_are_out_of_order() -> None:
    b = Broker()
    b.send(header(1, 0, 0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        b.send(header(1, 0, 4, 1))
    with pytest.raises(OutOfOrderSequenceError):  # overlaps but is not the same batch
        b.send(header(1, 0, 1, 3))
    assert b.send(header(1, 0, 3, 1)) == (3, 3)


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    b = Broker()
    b.send(header(1, 0, INT32_MAX - 1, 1))
    last = b.send(header(1, 0, INT32_MAX, 2))  # INT32_MAX, 0
    entry = b.psm.last_entry(1)
    assert entry is not None and entry.last_seq == 0
    assert b.send(header(1, 0, 1, 1)) == (3, 3)
    assert isinstance(b.send(header(1, 0, INT32_MAX, 2)), DuplicateBatch)
    assert last == (1, 2)
    with pytest.raises(OutOfOrderSequenceError):
        b.send(header(1, 0, 0, 1))  # 0 after 1 is not next


def test_old_epoch_is_invalid_producer_epoch_even_for_transactional() -> None:
    b = Broker()
    b.send(header(1, 3, 0))
    for txn in (False, True):
        with pytest.raises(InvalidProducerEpochError) as exc:
            b.send(header(1, 2, 1, transactional=txn))
        assert exc.value.code.value == 47


def test_bumped_epoch_must_start_at_zero() -> None:
    b = Broker()
    b.send(header(1, 0, 0, 5))
    with pytest.raises(OutOfOrderSequenceError):
        b.send(header(1, 1, 5))
    assert b.send(header(1, 1, 0)) == (5, 5)
    entry = b.psm.last_entry(1)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1
    with pytest.raises(InvalidProducerEpochError):  # the old epoch is fenced now
        b.send(header(1, 0, 5))


def test_unknown_producer_accepted_at_any_sequence_by_default() -> None:
    b = Broker()
    assert b.send(header(9, 4, 1234)) == (0, 0)
    strict = Broker(ProducerStateManager(strict_unknown_producer=True))
    with pytest.raises(UnknownProducerIdError):
        strict.send(header(9, 4, 1234))
    assert strict.send(header(9, 4, 0)) == (0, 0)


def test_batches_without_sequence_get_only_the_epoch_check() -> None:
    b = Broker()
    b.send(header(1, 2, 0, 2))
    assert b.send(header(1, 2, -1)) == (2, 2)
    with pytest.raises(InvalidProducerEpochError):
        b.send(header(1, 1, -1))
    # not from a client (coordinator origin): any sequence, epoch still checked
    assert b.send(header(1, 2, 77), is_from_client=False) == (3, 3)
    with pytest.raises(InvalidProducerEpochError):
        b.send(header(1, 1, 78), is_from_client=False)


def test_non_idempotent_batches_only_advance_the_map_end() -> None:
    b = Broker()
    assert b.send(header(-1, -1, -1, 4)) == (0, 3)
    assert not b.psm.producers and b.psm.map_end_offset == 4


def test_update_refuses_headers_without_assigned_offsets() -> None:
    b = Broker()
    b.send(header(1, 0, 0, 3))
    with pytest.raises(ValueError):
        b.psm.update(header(1, 0, 3), b.now)  # base_offset 0 < map end 3


def test_transactions_open_close_and_txn_state_check() -> None:
    b = Broker()
    b.send(header(5, 1, 0, 2, transactional=True))
    assert b.psm.first_undecided_offset() == 0
    with pytest.raises(InvalidTxnStateError):
        b.send(header(5, 1, 2))
    b.send(header(5, 1, 2, transactional=True))
    m = at(marker(5, 1), b.end)
    b.psm.validate(m, coordinator_epoch=3)
    with pytest.raises(ValueError):  # a marker's type is required
        b.psm.update(m, b.now, coordinator_epoch=3)
    done = b.psm.update(m, b.now, coordinator_epoch=3, control_type=ControlType.ABORT)
    assert done == CompletedTxn(5, 0, 3, is_aborted=True)
    b.end = m.next_offset
    assert b.psm.first_undecided_offset() is None
    entry = b.psm.last_entry(5)
    assert entry is not None and entry.coordinator_epoch == 3
    assert entry.current_txn_first_offset is None
    with pytest.raises(TransactionCoordinatorFencedError):
        b.psm.validate(marker(5, 1), coordinator_epoch=2)
    with pytest.raises(InvalidProducerEpochError):
        b.psm.validate(marker(5, 0), coordinator_epoch=3)
    b.send(header(5, 1, 3))  # non-transactional is fine again after the marker


def test_replay_rebuilds_the_same_state_and_skips_already_applied() -> None:
    b = Broker()
    log = []
    for seq in range(0, 12, 2):
        h = header(3, 0, seq, 2)
        b.send(h)
        log.append(at(h, b.end - 2))
    fresh = ProducerStateManager()
    for h in log + log[:2]:  # replaying twice is harmless
        fresh.replay(h, b.now)
    a, c = b.psm.last_entry(3), fresh.last_entry(3)
    assert a is not None and c is not None and a.batches == c.batches
    assert fresh.map_end_offset == b.psm.map_end_offset


def test_expiry_uses_now_ms_and_spares_open_transactions() -> None:
    b = Broker(ProducerStateManager(producer_id_expiration_ms=DAY))
    b.now = 0
    b.send(header(1, 0, 0))
    b.send(header(2, 0, 0, transactional=True))
    b.now = 1000
    b.send(header(3, 0, 0))
    assert b.psm.remove_expired(DAY - 1) == 0
    assert b.psm.remove_expired(DAY) == 1  # producer 1: idle exactly the expiration
    assert set(b.psm.producers) == {2, 3}
    assert b.psm.remove_expired(10 * DAY) == 1
    assert set(b.psm.producers) == {2}  # open transaction never expires


def test_expiry_ignores_client_timestamps() -> None:
    b = Broker(ProducerStateManager(producer_id_expiration_ms=DAY))
    b.now = 5 * DAY
    b.send(header(1, 0, 0, timestamp=0))  # CreateTime from 1970
    assert b.psm.remove_expired(5 * DAY + 1) == 0


@pytest.mark.parametrize("control", [ControlType.ABORT, ControlType.COMMIT])
def test_described_last_timestamp_is_the_markers_after_a_marker(control: ControlType) -> None:
    """Kafka's ProducerStateEntry.lastTimestamp: the last data batch's max timestamp,
    then the marker's (kafka-transactions describe-producers); expiry still goes by the
    broker's append time."""
    b = Broker(ProducerStateManager(producer_id_expiration_ms=DAY))
    b.now = 5 * DAY
    b.send(header(5, 1, 0, 2, transactional=True, timestamp=7_000))
    assert [p.last_timestamp for p in b.psm.describe()] == [7_000]
    m = at(dataclasses.replace(marker(5, 1), base_timestamp=9_000, max_timestamp=9_000),
           b.end)
    b.psm.validate(m, coordinator_epoch=0)
    b.psm.update(m, b.now, coordinator_epoch=0, control_type=control)
    b.end = m.next_offset
    assert [p.last_timestamp for p in b.psm.describe()] == [9_000]
    assert b.psm.remove_expired(6 * DAY - 1) == 0  # idle since 5 * DAY by the broker
    assert b.psm.remove_expired(6 * DAY) == 1
    b = Broker()
    b.send(header(5, 1, 0, 1, timestamp=7_000))
    b.send(header(5, 1, 1, 1, timestamp=6_000))  # the last batch's, not the highest
    assert [p.last_timestamp for p in b.psm.describe()] == [6_000]


def test_truncate_head_keeps_producers_and_keeps_a_snapshot(tmp_path: Path) -> None:
    b = Broker()
    b.send(header(1, 0, 0, 3))
    b.psm.take_snapshot(tmp_path)
    b.send(header(1, 0, 3, 3))
    b.psm.truncate_head(6, tmp_path)  # DeleteRecords up to the end
    entry = b.psm.last_entry(1)
    assert entry is not None and entry.last_seq == 5  # still de-duplicates
    assert isinstance(b.send(header(1, 0, 3, 3)), DuplicateBatch)
    assert [off for off, _ in list_snapshots(tmp_path)] == [6]
    fresh = ProducerStateManager()
    assert fresh.truncate_tail(tmp_path, 6, log_start_offset=6) == 6
    assert fresh.last_entry(1) is not None


@pytest.mark.parametrize(
    ("epoch", "h", "verdict"),
    [
        (None, header(1, 0, 0), Verdict.FIRST_WRITE),
        (None, header(1, 0, 9), Verdict.FIRST_WRITE),
        (2, header(1, 2, 2), Verdict.IN_SEQUENCE),
        (2, header(1, 2, 0, 2), Verdict.DUPLICATE),
        (2, header(1, 2, 3), Verdict.GAP),
        (2, header(1, 1, 2), Verdict.OLD_EPOCH),
        (2, header(1, 3, 0), Verdict.NEW_EPOCH_AT_ZERO),
        (2, header(1, 3, 2), Verdict.NEW_EPOCH_NOT_AT_ZERO),
        (2, header(1, 2, -1), Verdict.UNCHECKED),
    ],
)
def test_classify_table(epoch: int | None, h: BatchHeader, verdict: Verdict) -> None:
    """State: producer 1 at `epoch` wrote sequences 0..1 in one batch (or nothing)."""
    psm = ProducerStateManager()
    if epoch is not None:
        psm.update(header(1, epoch, 0, 2), 0)
    assert classify(psm.last_entry(1), h) is verdict


def _txn_then_marker(b: Broker, control: ControlType, start: int = 0) -> None:
    """Producer 4 epoch 0: a transaction writes sequences start..+1 and +2..+3, a marker
    ends it."""
    b.send(header(4, 0, start, 2, transactional=True))
    b.send(header(4, 0, start + 2, 2, transactional=True))
    m = at(marker(4, 0), b.end)
    b.psm.validate(m, coordinator_epoch=0)
    b.psm.update(m, b.now, coordinator_epoch=0, control_type=control)
    b.end = m.next_offset


@pytest.mark.parametrize("control", [ControlType.ABORT, ControlType.COMMIT])
def test_sequences_a_marker_ended_are_not_a_retry(control: ControlType) -> None:
    """librdkafka, after losing the answer to a written batch and aborting, sends the next
    transaction's batch with the same epoch and sequences: not a duplicate (Kafka says it
    is, and the next transaction would commit records never written)."""
    b = Broker()
    _txn_then_marker(b, control)
    with pytest.raises(OutOfOrderSequenceError, match="marker already ended"):
        b.send(header(4, 0, 2, 2, transactional=True))
    assert classify(b.psm.last_entry(4), header(4, 0, 0, 2, transactional=True)) is (
        Verdict.REUSED_AFTER_MARKER
    )
    assert b.psm.first_undecided_offset() is None  # nothing was opened by the refusal
    # the epoch bump that follows starts cleanly
    assert b.send(header(4, 1, 0, 2, transactional=True)) == (b.end - 2, b.end - 1)


def test_a_retry_inside_the_open_transaction_is_still_a_duplicate() -> None:
    b = Broker()
    _txn_then_marker(b, ControlType.COMMIT)
    first = b.send(header(4, 0, 4, 2, transactional=True))  # the next transaction
    b.send(header(4, 0, 6, 1, transactional=True))
    dup = b.send(header(4, 0, 4, 2, transactional=True))
    assert isinstance(dup, DuplicateBatch) and (dup.first_offset, dup.last_offset) == first
    # a batch of the ended transaction, still cached, is refused inside the new one too
    with pytest.raises(OutOfOrderSequenceError):
        b.send(header(4, 0, 2, 2, transactional=True))


def test_reuse_behind_the_cache_is_refused_once_a_marker_ended_it() -> None:
    b = Broker(ProducerStateManager(max_batches=2))
    b.send(header(4, 0, 0, 1, transactional=True))
    _txn_then_marker(b, ControlType.ABORT, start=1)  # the cache holds 1..2 and 3..4 only
    entry = b.psm.last_entry(4)
    assert entry is not None and entry.batches[0].first_seq == 1
    assert classify(entry, header(4, 0, 0, 1, transactional=True)) is (
        Verdict.REUSED_AFTER_MARKER
    )
    # while the transaction is open the same batch is an old retry, as before
    open_txn = Broker(ProducerStateManager(max_batches=2))
    for seq in range(3):
        open_txn.send(header(4, 0, seq, 1, transactional=True))
    with pytest.raises(DuplicateSequenceError):
        open_txn.send(header(4, 0, 0, 1, transactional=True))


def test_the_rule_holds_after_a_snapshot_load(tmp_path: Path) -> None:
    b = Broker()
    _txn_then_marker(b, ControlType.ABORT)
    b.psm.take_snapshot(tmp_path)
    fresh = ProducerStateManager()
    fresh.load_latest_snapshot(tmp_path, b.end)
    with pytest.raises(OutOfOrderSequenceError):
        fresh.validate(header(4, 0, 2, 2, transactional=True))
    # an idempotent (non-transactional) producer's retry stays a duplicate
    b2 = Broker()
    b2.send(header(9, 0, 0, 2))
    (tmp_path / "b2").mkdir()
    b2.psm.take_snapshot(tmp_path / "b2")
    fresh2 = ProducerStateManager()
    fresh2.load_latest_snapshot(tmp_path / "b2", b2.end)
    assert isinstance(fresh2.validate(header(9, 0, 0, 2)), DuplicateBatch)
