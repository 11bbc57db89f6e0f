"""EndTxn, marker jobs and completion, timeouts, id expiry, List/DescribeTransactions,
and replay: every record an operation writes, loaded by a fresh shard, gives the
state the live shard has."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.runtime import Result
from tidegate.coordinator.txn import admin, end
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.states import TxnState

from .test_txn_ops import TIMEOUT, TX, TxnDriver

E = ErrorCode


@pytest.fixture
def d(tmp_path: Path) -> TxnDriver:
    return TxnDriver(tmp_path)


def test_commit_two_phases(d: TxnDriver) -> None:
    pid, epoch = d.begin(tps=[("t", 0), ("u", 1)])
    r = d.end(pid, epoch, commit=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch)
    m = d.meta()
    assert m.state is TxnState.PREPARE_COMMIT and m.prepare_offset == d.log.log_end_offset - 1
    # while markers are in flight every EndTxn waits, whatever its outcome (Kafka 4)
    assert d.end(pid, epoch, commit=True).error is E.concurrent_transactions
    assert d.end(pid, epoch, commit=False).error is E.concurrent_transactions
    [job] = d.markers()
    assert job.commit and job.partitions == {("t", 0), ("u", 1)}
    assert (job.producer_id, job.producer_epoch, job.coordinator_epoch) == (pid, epoch, 1)
    m = d.meta()
    assert m.state is TxnState.COMPLETE_COMMIT and m.partitions == frozenset()
    # a retry after completion succeeds, the other outcome does not
    assert d.end(pid, epoch, commit=True).error is E.none
    assert d.end(pid, epoch, commit=False).error is E.invalid_txn_state
    # next transaction
    assert d.add(pid, epoch, ("v", 2)).error is E.none
    assert d.meta().partitions == {("v", 2)}


def test_abort(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    assert d.end(pid, epoch, commit=False).error is E.none
    assert [j.commit for j in d.markers()] == [False]
    assert d.meta().state is TxnState.COMPLETE_ABORT
    assert d.end(pid, epoch, commit=False).error is E.none
    assert d.end(pid, epoch, commit=True).error is E.invalid_txn_state


def test_end_errors(d: TxnDriver) -> None:
    assert d.end(1, 0).error is E.invalid_producer_id_mapping
    r = d.init()
    assert d.end(r.producer_id, 0).error is E.invalid_txn_state  # Empty
    assert d.end(r.producer_id + 1, 0).error is E.invalid_producer_id_mapping
    assert d.end(r.producer_id, 1).error is E.producer_fenced
    assert d.end(r.producer_id, 0, txn_id="").error is E.invalid_request


def test_v2_end_bumps_epoch(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    r = d.end(pid, epoch, commit=True, version=2)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch + 1)
    # retry of the same EndTxn (old epoch) while markers are pending, and after
    assert d.end(pid, epoch, commit=True, version=2).error is E.concurrent_transactions
    [job] = d.markers()
    assert job.producer_epoch == epoch + 1  # markers carry the bumped epoch
    retry = d.end(pid, epoch, commit=True, version=2)
    assert (retry.error, retry.producer_epoch) == (E.none, epoch + 1)
    # the stale epoch cannot start the next transaction; the new one can
    assert d.add(pid, epoch).error is E.producer_fenced
    assert d.add(pid, epoch + 1).error is E.none
    r2 = d.end(pid, epoch + 1, commit=False, version=2)
    assert r2.producer_epoch == epoch + 2
    d.markers()
    # the retry window is one transaction wide
    assert d.end(pid, epoch, commit=True, version=2).error is E.producer_fenced


def test_v2_abort_with_no_transaction_open_bumps_the_epoch(d: TxnDriver) -> None:
    """KIP-890 part 2, as Kafka 4: a version-2 abort from Empty or after a completed
    transaction goes through PrepareAbort with no partitions (no markers) to
    CompleteAbort, bumping the epoch; a version-1 abort there stays INVALID_TXN_STATE."""
    r = d.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert d.end(pid, epoch, commit=False).error is E.invalid_txn_state  # version 1
    assert d.end(pid, epoch, commit=True, version=2).error is E.invalid_txn_state
    a = d.end(pid, epoch, commit=False, version=2)
    assert (a.error, a.producer_id, a.producer_epoch) == (E.none, pid, epoch + 1)
    assert d.meta().state is TxnState.PREPARE_ABORT and d.meta().partitions == frozenset()
    # a retry while it completes, then after
    assert d.end(pid, epoch, commit=False, version=2).error is E.concurrent_transactions
    [job] = d.markers()
    assert not job.commit and job.partitions == frozenset()
    assert d.meta().state is TxnState.COMPLETE_ABORT
    retry = d.end(pid, epoch, commit=False, version=2)
    assert (retry.error, retry.producer_epoch) == (E.none, epoch + 1)
    # after a completed transaction too; the old epoch is fenced
    assert d.add(pid, epoch + 1).error is E.none
    assert d.end(pid, epoch + 1, commit=True, version=2).producer_epoch == epoch + 2
    d.markers()
    again = d.end(pid, epoch + 2, commit=False, version=2)
    assert (again.error, again.producer_epoch) == (E.none, epoch + 3)
    d.markers()
    assert d.end(pid, epoch + 1, commit=False, version=2).error is E.producer_fenced


def test_v2_empty_abort_right_after_a_commit_waits_for_the_markers(d: TxnDriver) -> None:
    """KAFKA-18464 (seen with franz-go's TestTxnEtl): a version-2 client commits at e,
    gets e + 1, then aborts an empty transaction at e + 1 before the commit's markers
    are written. It must get CONCURRENT_TRANSACTIONS (retry), not PRODUCER_FENCED,
    and the retry after completion aborts with the epoch bumped again."""
    pid, epoch = d.begin()
    c = d.end(pid, epoch, commit=True, version=2)
    assert (c.error, c.producer_epoch) == (E.none, epoch + 1)
    assert d.meta().state is TxnState.PREPARE_COMMIT
    assert d.end(pid, epoch + 1, commit=False, version=2).error is E.concurrent_transactions
    assert d.end(pid, epoch + 2, commit=False, version=2).error is E.concurrent_transactions
    [job] = d.markers()
    assert job.commit and d.meta().state is TxnState.COMPLETE_COMMIT
    a = d.end(pid, epoch + 1, commit=False, version=2)
    assert (a.error, a.producer_id, a.producer_epoch) == (E.none, pid, epoch + 2)
    [abort_job] = d.markers()
    assert not abort_job.commit and abort_job.partitions == frozenset()
    # a wrong epoch is still fenced once nothing is in flight
    assert d.end(pid, epoch + 4, commit=False, version=2).error is E.producer_fenced


def test_v2_end_on_v1_broker_does_not_bump(tmp_path: Path) -> None:
    d = TxnDriver(tmp_path, TxnConfig(transaction_version=1))
    pid, epoch = d.begin()
    assert d.end(pid, epoch, version=2).producer_epoch == epoch


def test_v2_overflow_rotates_at_completion(d: TxnDriver) -> None:
    pid, _ = d.begin()
    m = dataclasses.replace(d.meta(), producer_epoch=32766)
    d.run(lambda s, now: Result(None, [m.to_record(1)]))
    r = d.end(pid, 32766, commit=True, version=2)
    new_pid = r.producer_id
    assert r.error is E.none and new_pid != pid and r.producer_epoch == 0
    assert d.meta().producer_epoch == 32767 and d.meta().next_producer_id == new_pid
    [job] = d.markers()
    assert (job.producer_id, job.producer_epoch) == (pid, 32767)
    m = d.meta()
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (new_pid, 0, pid)
    retry = d.end(pid, 32766, commit=True, version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, new_pid, 0)
    assert d.add(new_pid, 0).error is E.none


def test_markers_wait_for_durability_and_go_out_once(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    d.end(pid, epoch)
    prepare = d.meta().prepare_offset
    assert d.shard.pending_markers(prepare) == []  # the Prepare record is not durable
    [job] = d.shard.pending_markers(prepare + 1)
    assert d.shard.pending_markers(prepare + 1) == []  # handed out once
    d.shard.release_marker(TX, job.prepare_offset)  # the writer gave up
    [again] = d.shard.pending_markers(prepare + 1)
    assert again == job
    # completing with a stale job is ignored
    stale = d.run(lambda s, now: end.complete(s, TX, pid, epoch + 5, True, now))
    assert stale is False and d.meta().state is TxnState.PREPARE_COMMIT
    assert d.run(lambda s, now: end.complete(s, TX, pid, epoch, False, now)) is False
    assert d.run(lambda s, now: end.complete(s, TX, pid, epoch, True, now)) is True
    assert d.run(lambda s, now: end.complete(s, TX, pid, epoch, True, now)) is False
    assert d.shard.pending_markers(1 << 40) == []


def test_reload_resends_markers(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    d.end(pid, epoch)
    assert len(d.shard.pending_markers(d.log.log_end_offset)) == 1
    d.restart()
    [job] = d.shard.pending_markers(d.log.log_end_offset)
    assert job.coordinator_epoch == 2 and job.commit
    d.run(lambda s, now: end.complete(s, TX, pid, epoch, True, now))
    d.restart()
    assert d.shard.pending_markers(d.log.log_end_offset) == []
    assert d.meta().state is TxnState.COMPLETE_COMMIT


def test_timeout_aborts_with_fence(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    d.advance(TIMEOUT)  # the abort timer runs every 10 s; not yet past the timeout
    assert d.meta().state is TxnState.ONGOING
    d.advance(10_000)
    m = d.meta()
    assert m.state is TxnState.PREPARE_ABORT and m.producer_epoch == epoch + 1
    # the abort's markers are in flight: the fenced producer waits (as on Kafka 4),
    # then is fenced
    assert d.end(pid, epoch, commit=True).error is E.concurrent_transactions
    d.markers()
    assert d.meta().state is TxnState.COMPLETE_ABORT
    assert d.end(pid, epoch, commit=True).error is E.producer_fenced
    assert d.end(pid, epoch, commit=False, version=2).error is E.producer_fenced
    assert d.add(pid, epoch).error is E.producer_fenced


def test_expiry(tmp_path: Path) -> None:
    d = TxnDriver(tmp_path, TxnConfig(transactional_id_expiration_ms=3_600_000))
    d.clock.advance(1000)
    d.init("idle")
    pid, _ = d.begin("busy", timeout=900_000)
    d.advance(3_600_000 - 1000)
    assert set(d.shard.txns) == {"idle", "busy"}  # expiry runs hourly, timeout first
    d.advance(3_600_000)
    assert "idle" not in d.shard.txns  # tombstoned
    assert "busy" in d.shard.txns  # aborted by timeout, then Complete only once markers
    assert "idle" not in d.reloaded()
    r = d.init("idle")
    assert (r.error, r.producer_epoch) == (E.none, 0) and r.producer_id != pid


def test_list_and_describe(d: TxnDriver) -> None:
    d.init("a")
    pid, epoch = d.begin("b", tps=[("t", 1), ("t", 0), ("u", 0)])
    now = d.clock.now_ms()
    res = admin.list_transactions(d.shard, now=now).response
    assert {(t.transactional_id, t.state) for t in res.transactions} == {  # type: ignore[union-attr]
        ("a", "Empty"), ("b", "Ongoing")}
    res = admin.list_transactions(d.shard, ["Ongoing", "Bogus"], now=now).response
    assert [t.transactional_id for t in res.transactions] == ["b"]  # type: ignore[union-attr]
    assert res.unknown_state_filters == ("Bogus",)  # type: ignore[union-attr]
    res = admin.list_transactions(d.shard, producer_ids=[pid], duration_filter_ms=0,
                                  now=now + 1).response
    assert [t.transactional_id for t in res.transactions] == ["b"]  # type: ignore[union-attr]
    res = admin.list_transactions(d.shard, duration_filter_ms=10, now=now + 5).response
    # as in Kafka, an id without a transaction (start -1) passes the duration filter
    assert [t.transactional_id for t in res.transactions] == ["a"]  # type: ignore[union-attr]
    [b, x, e] = admin.describe_transactions(d.shard, ["b", "x", ""]).response  # type: ignore[misc]
    assert (b.error, b.state, b.producer_id, b.producer_epoch) == (E.none, "Ongoing", pid, epoch)
    assert b.topics == {"t": [0, 1], "u": [0]} and b.timeout_ms == TIMEOUT
    assert x.error is E.transactional_id_not_found and e.error is E.invalid_request


def test_every_op_replays_to_the_same_state(tmp_path: Path) -> None:
    """After each step, a fresh shard loaded from the log equals the live one."""
    d = TxnDriver(tmp_path, TxnConfig(two_phase_commit_enable=True))

    def same() -> None:
        assert d.reloaded() == d.shard.txns

    r = d.init()
    same()
    pid, epoch = r.producer_id, r.producer_epoch
    for step in (
        lambda: d.init(pid=pid, epoch=epoch),
        lambda: d.add(pid, epoch + 1, ("t", 0)),
        lambda: d.add(pid, epoch + 1, ("t", 1), ("u", 0)),
        lambda: d.end(pid, epoch + 1, version=2),
        lambda: d.markers(),
        lambda: d.add(pid, epoch + 2),
        lambda: d.init(),  # fence
        lambda: d.markers(),
        lambda: d.init(enable_2pc=True),
        lambda: d.add(pid, epoch + 4),
        lambda: d.init(enable_2pc=True, keep_prepared_txn=True),
        lambda: d.end(pid, epoch + 5, commit=False),
        lambda: d.markers(),
        lambda: d.advance(8 * 24 * 3600 * 1000),  # expiry
    ):
        step()
        same()
    assert TX not in d.shard.txns
