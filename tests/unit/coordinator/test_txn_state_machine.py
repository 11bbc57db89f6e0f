"""Hypothesis drives transactional producers — several incarnations per transactional id,
KIP-360 retries, KIP-890 version-2 ends — through InitProducerId, AddPartitions,
EndTxn, marker jobs (delayed, lost and released, completed late), time passing
(timeouts, expiry) and coordinator restarts, checking after every step:

- one transaction per id: Empty holds no partitions, Ongoing/Prepare* hold some (but a
  version-2 abort with no transaction open, which prepares an abort of nothing), and
  the prepared index is exactly the ids in Prepare* with their record's offset;
- markers only after a durable Prepare record, with the Prepare's epoch and outcome —
  the outcome the client was told (EndTxn NONE) or an abort the coordinator decided;
- replay reproduces the state: a fresh shard loaded from the log equals the live one;
- epochs never decrease: per id, (producer id, epoch) only grows;
- fencing: an InitProducerId that is not a KIP-360 retry never hands out a
  (producer id, epoch) handed out before.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.txn import end
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.model import MarkerJob
from tidegate.coordinator.txn.states import TxnState

from .test_txn_ops import TxnDriver

E = ErrorCode
IDS = ["a", "b"]
CLIENTS = range(4)  # client i works on IDS[i % 2]
PARTS = [("t", 0), ("t", 1), ("u", 0)]
CONFIG = TxnConfig(transactional_id_expiration_ms=120_000, abort_timed_out_interval_ms=1000,
                   remove_expired_interval_ms=5000, two_phase_commit_enable=True)


class TxnMachine(RuleBasedStateMachine):
    config = CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="txn-sm-"))
        self.d = TxnDriver(self.dir, self.config)
        self.held: dict[int, tuple[int, int, int]] = {}  # client -> (pid, epoch, version)
        self.jobs: list[MarkerJob] = []  # handed out, not yet completed
        self.granted: set[tuple[int, int]] = set()
        self.high: dict[str, tuple[int, int]] = {}
        self.told: dict[tuple[str, int], bool] = {}  # (id, prepare offset) -> commit

    def teardown(self) -> None:
        self.d.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- rules ----------------------------------------------------------------------------

    @rule(client=st.sampled_from(CLIENTS), kip360=st.booleans(), version=st.sampled_from([0, 2]),
          timeout=st.sampled_from([2000, 60_000]),
          two_phase=st.sampled_from([(False, False), (True, False), (True, True)]))
    def init(self, client: int, kip360: bool, version: int, timeout: int,
             two_phase: tuple[bool, bool]) -> None:
        txn_id = IDS[client % 2]
        held = self.held.get(client)
        kw = {"enable_2pc": two_phase[0], "keep_prepared_txn": two_phase[1]}
        if kip360 and held is not None:
            r = self.d.init(txn_id, timeout, held[0], held[1], **kw)
        else:
            r = self.d.init(txn_id, timeout, **kw)
        if r.error is E.none:
            grant = (r.producer_id, r.producer_epoch)
            retry = kip360 and held is not None
            assert retry or grant not in self.granted, grant
            self.granted.add(grant)
            self.held[client] = (r.producer_id, r.producer_epoch, version)
        else:
            assert r.error in (E.concurrent_transactions, E.producer_fenced), r

    @rule(client=st.sampled_from(CLIENTS), parts=st.lists(st.sampled_from(PARTS), min_size=1,
                                                          max_size=2))
    def add(self, client: int, parts: list[tuple[str, int]]) -> None:
        if client not in self.held:
            return
        pid, epoch, _ = self.held[client]
        res = self.d.add(pid, epoch, *parts, txn_id=IDS[client % 2])
        assert res.error in (E.none, E.producer_fenced, E.invalid_producer_id_mapping,
                             E.concurrent_transactions), res
        if res.error is E.none:
            assert set(parts) <= self.d.meta(IDS[client % 2]).partitions

    @rule(client=st.sampled_from(CLIENTS), commit=st.booleans())
    def end_txn(self, client: int, commit: bool) -> None:
        if client not in self.held:
            return
        txn_id = IDS[client % 2]
        pid, epoch, version = self.held[client]
        before = self.d.shard.txns.get(txn_id)
        r = self.d.end(pid, epoch, commit, txn_id=txn_id, version=version)
        if r.error is E.none and before is not None and before.state is TxnState.ONGOING:
            m = self.d.meta(txn_id)
            assert m.state.is_prepare and self.d.shard.prepared[txn_id] == m.prepare_offset
            self.told[(txn_id, m.prepare_offset)] = commit
        if r.error is E.none and version == 2:
            self.held[client] = (r.producer_id, r.producer_epoch, version)

    @rule(lag=st.integers(0, 3))
    def hand_out_markers(self, lag: int) -> None:
        durable = max(0, self.d.log.log_end_offset - lag)
        jobs = self.d.shard.pending_markers(durable)
        for job in jobs:
            assert job.prepare_offset < durable
            m = self.d.meta(job.transactional_id)
            assert m.state.is_prepare and m.prepare_offset == job.prepare_offset
            assert (job.producer_id, job.producer_epoch) == (m.producer_id, m.producer_epoch)
            assert job.commit == (m.state is TxnState.PREPARE_COMMIT)
            told = self.told.get((job.transactional_id, job.prepare_offset))
            assert told is None or told == job.commit  # else an abort we decided
            assert job.partitions == m.partitions and (job.partitions or not job.commit)
        self.jobs += jobs

    @rule(data=st.data())
    def finish_marker_job(self, data: st.DataObject) -> None:
        if not self.jobs:
            return
        job = self.jobs.pop(data.draw(st.integers(0, len(self.jobs) - 1)))
        if data.draw(st.booleans()):
            self.d.shard.release_marker(job.transactional_id, job.prepare_offset)
            return
        before = self.d.shard.txns.get(job.transactional_id)
        done = self.d.run(lambda s, now: end.complete(
            s, job.transactional_id, job.producer_id, job.producer_epoch, job.commit, now,
            job.prepare_offset))
        if done:
            assert before is not None and before.prepare_offset == job.prepare_offset
            want = TxnState.COMPLETE_COMMIT if job.commit else TxnState.COMPLETE_ABORT
            assert self.d.meta(job.transactional_id).state is want

    @rule(ms=st.sampled_from([100, 1500, 61_000, 130_000]))
    def advance(self, ms: int) -> None:
        self.d.advance(ms)

    @rule()
    def restart(self) -> None:
        self.d.restart()
        self.jobs.clear()  # the old coordinator's writers are gone

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def structure(self) -> None:
        shard = self.d.shard
        for m in shard.txns.values():
            if m.state is TxnState.EMPTY:
                assert not m.partitions and m.txn_start_ms == -1
            if m.state is TxnState.ONGOING or m.state.is_prepare:
                empty_abort = m.state is TxnState.PREPARE_ABORT and m.client_txn_version >= 2
                assert (m.partitions or empty_abort) and m.txn_start_ms > 0
            assert m.state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)
        assert shard.prepared == {i: m.prepare_offset for i, m in shard.txns.items()
                                  if m.state.is_prepare}

    @invariant()
    def replay_reproduces_state(self) -> None:
        assert self.d.reloaded() == self.d.shard.txns

    @invariant()
    def epochs_never_decrease(self) -> None:
        for txn_id, m in self.d.shard.txns.items():
            now = (m.producer_id, m.producer_epoch)
            assert now >= self.high.get(txn_id, now), (txn_id, now, self.high[txn_id])
            self.high[txn_id] = now


TxnMachine.TestCase.settings = settings(
    max_examples=int(__import__("os").environ.get("TXN_SM_EXAMPLES", "60")),
    stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_txn_state_machine = TxnMachine.TestCase


class TxnMachineV0(TxnMachine):
    """transaction.version 0: TransactionLogValue v0, no KIP-890 bumps, no tags."""

    config = TxnConfig(transactional_id_expiration_ms=120_000, abort_timed_out_interval_ms=1000,
                       remove_expired_interval_ms=5000, two_phase_commit_enable=True,
                       transaction_version=0)


TxnMachineV0.TestCase.settings = TxnMachine.TestCase.settings
test_txn_state_machine_v0 = TxnMachineV0.TestCase
