"""The transaction coordinator's operations, one behaviour and one error at a time, on a
real `__transaction_state` log through the coordinator runtime (`TxnDriver`, also used
by the other test_txn_* modules)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.errors import ErrorCode
from tidegate.coordinator.runtime import CoordinatorRuntime, Result
from tidegate.coordinator.txn import end, ops
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.messages import (
    AddPartitionsResponse,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from tidegate.coordinator.txn.model import MarkerJob, TxnMetadata
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import TxnState
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

R = TypeVar("R")
E = ErrorCode
TIMEOUT = 60_000
TX = "tx"


class TxnDriver:
    """Plays the shell: runs operations through the runtime (append + replay), writes
    "markers" by completing the jobs the shard hands out, polls timers, and restarts
    by replaying the log into a fresh shard (with the next coordinator epoch)."""

    def __init__(self, directory: Path, config: TxnConfig | None = None,
                 clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.config = config or TxnConfig()
        self.log = Log.open(directory / "__transaction_state-0",
                            LogConfig.from_props({"cleanup.policy": "compact"}), self.clock)
        self.coordinator_epoch = 0
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            "__transaction_state", 1,
            lambda p: TxnShard(p, self.config, self.coordinator_epoch), self.clock)
        self.pids = itertools.count(1000)
        self.restart()

    def restart(self) -> None:
        self.coordinator_epoch += 1
        shard, _ = self.runtime.load(0, self.log)
        self.runtime.publish(0, self.log, shard)

    @property
    def shard(self) -> TxnShard:
        return self.runtime.shard(0)

    def meta(self, txn_id: str = TX) -> TxnMetadata:
        return self.shard.txns[txn_id]

    def run(self, op: Callable[[TxnShard, int], Result[R]]) -> Any:
        return self.runtime.execute(0, op).result.response

    # -- requests -------------------------------------------------------------------------

    def init(self, txn_id: str = TX, timeout: int = TIMEOUT, pid: int = -1, epoch: int = -1,
             **kw: bool) -> InitProducerIdResponse:
        req = InitProducerIdRequest(txn_id, timeout, pid, epoch, **kw)
        new_pid = next(self.pids)
        return self.run(lambda s, now: ops.init_producer_id(s, req, now, new_pid))  # type: ignore[no-any-return]

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], txn_id: str = TX,
            verify_only: bool = False) -> AddPartitionsResponse:
        parts = tps or (("t", 0),)
        return self.run(  # type: ignore[no-any-return]
            lambda s, now: ops.add_partitions(s, txn_id, pid, epoch, parts, now, verify_only))

    def end(self, pid: int, epoch: int, commit: bool = True, txn_id: str = TX,
            version: int = 0) -> EndTxnResponse:
        new_pid = next(self.pids)
        return self.run(  # type: ignore[no-any-return]
            lambda s, now: end.end_txn(s, txn_id, pid, epoch, commit, now, version, new_pid))

    def markers(self, durable: int | None = None) -> list[MarkerJob]:
        """Hand out the due marker jobs and complete each ("markers written")."""
        jobs = self.shard.pending_markers(self.log.log_end_offset if durable is None
                                          else durable)
        for job in jobs:
            self.complete(job)
        return jobs

    def complete(self, j: MarkerJob) -> bool:
        return self.run(lambda s, now: end.complete(  # type: ignore[no-any-return]
            s, j.transactional_id, j.producer_id, j.producer_epoch, j.commit, now,
            j.prepare_offset))

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        while self.runtime.poll(0) is not None:
            pass

    def reloaded(self) -> dict[str, TxnMetadata]:
        """The state a fresh shard replaying the log has (without replacing ours)."""
        shard, _ = self.runtime.load(0, self.log)
        return shard.txns

    def begin(self, txn_id: str = TX, tps: Iterable[tuple[str, int]] = (("t", 0),),
              **kw: Any) -> tuple[int, int]:
        r = self.init(txn_id, **kw)
        assert r.error is E.none, r
        assert self.add(r.producer_id, r.producer_epoch, *tps, txn_id=txn_id).error is E.none
        return r.producer_id, r.producer_epoch


@pytest.fixture
def d(tmp_path: Path) -> TxnDriver:
    return TxnDriver(tmp_path)


# -- InitProducerId ------------------------------------------------------------------------


def test_new_id_gets_fresh_pid_epoch_0(d: TxnDriver) -> None:
    r = d.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 0)
    m = d.meta()
    assert m.state is TxnState.EMPTY and m.timeout_ms == TIMEOUT and m.partitions == frozenset()


def test_reinit_bumps_epoch_and_keeps_pid(d: TxnDriver) -> None:
    d.init()
    r = d.init()
    assert (r.producer_id, r.producer_epoch) == (1000, 1)
    assert d.meta().last_producer_epoch == -1


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_invalid_timeout(d: TxnDriver, timeout: int) -> None:
    assert d.init(timeout=timeout).error is E.invalid_transaction_timeout
    assert TX not in d.shard.txns


def test_empty_id_and_half_given_pid_are_invalid(d: TxnDriver) -> None:
    assert d.init("").error is E.invalid_request
    assert d.init(pid=5).error is E.invalid_request
    assert d.init(epoch=5).error is E.invalid_request


def test_init_while_ongoing_fences_and_aborts(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    r = d.init()
    assert r.error is E.concurrent_transactions
    m = d.meta()
    assert m.state is TxnState.PREPARE_ABORT and m.producer_epoch == epoch + 1
    assert m.last_producer_epoch == -1 and m.partitions == {("t", 0)}
    # the fenced producer is out (its EndTxn waits for the markers, as on Kafka 4)
    assert d.end(pid, epoch).error is E.concurrent_transactions
    assert d.add(pid, epoch).error is E.producer_fenced
    # while the markers are in flight the client keeps retrying
    assert d.init().error is E.concurrent_transactions
    jobs = d.markers()
    assert [(j.commit, j.producer_epoch) for j in jobs] == [(False, epoch + 1)]
    assert d.meta().state is TxnState.COMPLETE_ABORT
    assert d.end(pid, epoch).error is E.producer_fenced
    r = d.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch + 2)


def test_exhausted_epoch_rotates_pid(d: TxnDriver) -> None:
    d.init()
    # a log written with epoch 32765: the next bump gives 32766, then a new id
    m = dataclasses.replace(d.meta(), producer_epoch=32765)
    d.run(lambda s, now: Result(None, [m.to_record(1)]))
    assert d.init().producer_epoch == 32766
    r = d.init()
    assert (r.producer_id, r.producer_epoch) == (1002, 0)
    assert d.meta().previous_producer_id == 1000


def test_kip360_bump_and_retry(d: TxnDriver) -> None:
    r0 = d.init()
    r1 = d.init(pid=r0.producer_id, epoch=r0.producer_epoch)
    assert (r1.error, r1.producer_epoch) == (E.none, 1)
    # the response was lost: the same request gets the same answer
    r2 = d.init(pid=r0.producer_id, epoch=r0.producer_epoch)
    assert (r2.error, r2.producer_id, r2.producer_epoch) == (E.none, 1000, 1)
    # ... also after a failover (the last epoch is in the record)
    d.restart()
    r3 = d.init(pid=r0.producer_id, epoch=r0.producer_epoch)
    assert (r3.error, r3.producer_epoch) == (E.none, 1)


def test_kip360_fenced_cases(d: TxnDriver) -> None:
    d.init()
    d.init()  # another producer took over: last epoch cleared
    assert d.init(pid=1000, epoch=0).error is E.producer_fenced
    assert d.init(pid=77, epoch=1).error is E.producer_fenced  # unknown producer id
    assert d.init(pid=1000, epoch=1).producer_epoch == 2


def test_kip360_unknown_id_accepts_any_pid(d: TxnDriver) -> None:
    r = d.init(pid=55, epoch=3)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 0)


def test_init_in_prepare_commit_is_concurrent(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    assert d.end(pid, epoch).error is E.none
    assert d.init().error is E.concurrent_transactions
    assert d.meta().state is TxnState.PREPARE_COMMIT


def test_2pc_requires_the_broker_switch(tmp_path: Path) -> None:
    # on by default in Tidegate (off in Kafka); an operator can turn it off
    assert TxnConfig().two_phase_commit_enable
    d = TxnDriver(tmp_path, TxnConfig(two_phase_commit_enable=False))
    assert d.init(enable_2pc=True).error is E.transactional_id_authorization_failed


def test_keep_prepared_txn(tmp_path: Path) -> None:
    d = TxnDriver(tmp_path, TxnConfig(two_phase_commit_enable=True))
    pid, epoch = d.begin(enable_2pc=True)
    assert d.meta().two_phase
    d.advance(10 * 24 * 3600 * 1000)  # no timeout for prepared transactions
    assert d.meta().state is TxnState.ONGOING
    r = d.init(enable_2pc=True, keep_prepared_txn=True)
    assert r.error is E.none
    assert (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (pid, epoch)
    assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1)
    assert d.meta().state is TxnState.ONGOING and d.meta().partitions == {("t", 0)}
    assert d.add(pid, epoch).error is E.producer_fenced  # the old incarnation
    assert d.end(pid, epoch + 1, commit=True).error is E.none
    assert [j.commit for j in d.markers()] == [True]
    assert d.meta().state is TxnState.COMPLETE_COMMIT


def test_a_takeover_of_a_takeover_reports_the_prepared_epoch(tmp_path: Path) -> None:
    """A recovering process that dies before completing: the next one must still learn
    the epoch the transaction was prepared with (not the first recovery's), also after
    the coordinator reloads; a new transaction forgets it."""
    d = TxnDriver(tmp_path, TxnConfig(two_phase_commit_enable=True))
    pid, epoch = d.begin(enable_2pc=True)
    first = d.init(enable_2pc=True, keep_prepared_txn=True)
    assert (first.ongoing_txn_producer_id, first.ongoing_txn_producer_epoch) == (pid, epoch)
    d.restart()
    second = d.init(enable_2pc=True, keep_prepared_txn=True)
    assert (second.ongoing_txn_producer_id, second.ongoing_txn_producer_epoch) == (pid, epoch)
    assert second.producer_epoch == epoch + 2
    assert d.end(pid, epoch + 2, commit=True).error is E.none
    for j in d.markers():
        d.complete(j)
    assert d.add(pid, epoch + 2, ("t", 1)).error is E.none  # the next transaction
    third = d.init(enable_2pc=True, keep_prepared_txn=True)
    assert third.ongoing_txn_producer_epoch == epoch + 2


def test_2pc_without_keep_aborts_the_prepared_txn(tmp_path: Path) -> None:
    d = TxnDriver(tmp_path, TxnConfig(two_phase_commit_enable=True))
    d.begin(enable_2pc=True)
    assert d.init(enable_2pc=True).error is E.concurrent_transactions
    assert d.meta().state is TxnState.PREPARE_ABORT


# -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------


def test_add_starts_transaction_then_adds(d: TxnDriver) -> None:
    r = d.init()
    pid, epoch = r.producer_id, r.producer_epoch
    d.clock.advance(5)
    start = d.clock.now_ms()
    assert d.add(pid, epoch, ("t", 0), ("t", 1)).errors == {("t", 0): E.none, ("t", 1): E.none}
    assert d.meta().state is TxnState.ONGOING and d.meta().txn_start_ms == start
    end_offset = d.log.log_end_offset
    d.clock.advance(5)
    assert d.add(pid, epoch, ("t", 1)).error is E.none
    assert d.log.log_end_offset == end_offset  # already present: no record
    assert d.add(pid, epoch, ("u", 3)).error is E.none
    assert d.meta().partitions == {("t", 0), ("t", 1), ("u", 3)}
    assert d.meta().txn_start_ms == start


def test_add_errors(d: TxnDriver) -> None:
    assert d.add(1, 0).errors == {("t", 0): E.invalid_producer_id_mapping}
    r = d.init()
    assert d.add(r.producer_id + 1, 0).error is E.invalid_producer_id_mapping
    assert d.add(r.producer_id, 5).error is E.producer_fenced
    assert d.add(r.producer_id, 0, txn_id="").error is E.invalid_request
    assert d.add(r.producer_id, 0).error is E.none
    d.end(r.producer_id, 0, commit=False)
    errs = d.add(r.producer_id, 0, ("t", 0), ("t", 9)).errors
    assert errs == {("t", 0): E.concurrent_transactions, ("t", 9): E.concurrent_transactions}


def test_verify_only(d: TxnDriver) -> None:
    pid, epoch = d.begin()
    before = d.log.log_end_offset
    res = d.add(pid, epoch, ("t", 0), ("t", 1), verify_only=True)
    assert res.errors == {("t", 0): E.none, ("t", 1): E.transaction_abortable}
    assert d.add(pid, epoch + 1, verify_only=True).error is E.producer_fenced
    assert d.log.log_end_offset == before


def test_add_offsets(d: TxnDriver) -> None:
    r = d.init()
    err = d.run(lambda s, now: ops.add_offsets(s, TX, r.producer_id, 0, 7, now))
    assert err is E.none
    assert d.meta().partitions == {("__consumer_offsets", 7)}
    err = d.run(lambda s, now: ops.add_offsets(s, TX, r.producer_id, 3, 7, now))
    assert err is E.producer_fenced


def test_kip360_rotation_and_its_retry(d: TxnDriver) -> None:
    d.init()
    m = dataclasses.replace(d.meta(), producer_epoch=32766)
    d.run(lambda s, now: Result(None, [m.to_record(1)]))
    r = d.init(pid=1000, epoch=32766)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1001, 0)
    # the response was lost: a retry with the old id and exhausted epoch gets the same
    again = d.init(pid=1000, epoch=32766)
    assert (again.error, again.producer_id, again.producer_epoch) == (E.none, 1001, 0)
    # an old id with an epoch that is not exhausted is fenced
    assert d.init(pid=1000, epoch=5).error is E.producer_fenced
