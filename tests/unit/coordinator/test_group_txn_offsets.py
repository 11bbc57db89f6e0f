"""TxnOffsetCommit: offsets pending on a transaction, markers, require_stable, reload,
member checks and producer-epoch fencing, on a real `__consumer_offsets` log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.group import offsets
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.messages import (
    LeaveMember,
    OffsetFetchRequest,
    TxnCommitPartition,
    TxnOffsetCommitRequest,
)
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import PartitionState
from tidegate.records.record import iter_batches

from .harness import Harness, sync_all

OK = ErrorCode.none
UNSTABLE = ErrorCode.unstable_offset_commit
PID = 4000
T0, T1 = ("t", 0), ("t", 1)
MINUTE = 60_000


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path, GroupConfig(initial_rebalance_delay_ms=3000,
                                         offsets_retention_ms=10 * MINUTE))


def txn_commit(h: Harness, group: str, offs: dict[tuple[str, int], int], *, pid: int = PID,
               epoch: int = 0, generation: int = -1, member: str = "",
               instance: str | None = None, metadata: str = "") -> dict[Any, ErrorCode]:
    req = TxnOffsetCommitRequest("tx", group, pid, epoch, generation, member, instance, tuple(
        TxnCommitPartition(t, p, o, -1, metadata) for (t, p), o in offs.items()))
    return dict(h.run(lambda s, now, _t: offsets.txn_commit(s, req, now))[1])


def marker(h: Harness, commit: bool, *, pid: int = PID, epoch: int = 0,
           coordinator_epoch: int = 0) -> None:
    out = h.runtime.execute_marker(0, pid, epoch, coordinator_epoch, commit)
    assert out.appended == 1 and out.end_offset == h.log.log_end_offset


def fetch(h: Harness, group: str, partitions: list[tuple[str, int]] | None, *,
          stable: bool) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    req = OffsetFetchRequest(group, None if partitions is None else tuple(partitions), stable)
    resp = h.run(lambda s, now, _t: offsets.fetch(s, req, now))[1]
    return {(f.topic, f.partition): (f.offset, f.error) for f in resp.partitions}


def state(h: Harness) -> tuple[dict[Any, Any], list[Any]]:
    """Committed offsets of every group and every pending offset, for comparisons."""
    committed = {gid: dict(g.offsets) for gid, g in h.shard.groups.items()}
    pending = sorted(
        (pid, gid, tp, h.shard.pending.get(pid, gid, tp))
        for pid in h.shard.pending.producers()
        for gid in h.shard.groups
        for tp in h.shard.pending.partitions(gid)
        if h.shard.pending.get(pid, gid, tp) is not None)
    return committed, pending


def test_pending_offsets_are_invisible_until_the_commit_marker(h: Harness) -> None:
    assert h.commit("g", {T0: 5}) == {T0: OK}
    assert txn_commit(h, "g", {T0: 10, T1: 11}) == {T0: OK, T1: OK}
    # written as one transactional batch of the producer, no sequence
    batches = list(iter_batches(h.log.read(0, 1 << 20)))
    header = batches[-1][0]
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, 0, -1)
    assert h.fetch("g") == {T0: 5}
    assert fetch(h, "g", [T0, T1], stable=False) == {T0: (5, OK), T1: (-1, OK)}
    assert fetch(h, "g", [T0, T1, ("u", 0)], stable=True) == {
        T0: (-1, UNSTABLE), T1: (-1, UNSTABLE), ("u", 0): (-1, OK)}
    assert fetch(h, "g", None, stable=True) == {T0: (-1, UNSTABLE)}
    assert h.shard.pending.has_producer(PID)
    marker(h, commit=True)
    assert h.fetch("g") == {T0: 10, T1: 11}
    assert fetch(h, "g", [T0, T1], stable=True) == {T0: (10, OK), T1: (11, OK)}
    assert not h.shard.pending
    h.restart()
    assert h.fetch("g") == {T0: 10, T1: 11} and not h.shard.pending


def test_abort_drops_pending_offsets(h: Harness) -> None:
    h.commit("g", {T0: 5})
    txn_commit(h, "g", {T0: 10, T1: 11})
    marker(h, commit=False)
    assert h.fetch("g") == {T0: 5}
    assert fetch(h, "g", [T0, T1], stable=True) == {T0: (5, OK), T1: (-1, OK)}
    assert not h.shard.pending
    h.restart()
    assert h.fetch("g") == {T0: 5} and not h.shard.pending


def test_a_transaction_only_group_vanishes_when_aborted(h: Harness) -> None:
    txn_commit(h, "only", {T0: 1})
    assert "only" in h.shard.groups and h.fetch("only") == {}
    marker(h, commit=False)
    assert "only" not in h.shard.groups


def test_the_later_record_wins_when_plain_and_transactional_commits_mix(h: Harness) -> None:
    txn_commit(h, "g", {T0: 10})
    h.commit("g", {T0: 20})  # committed after the transactional record was written
    marker(h, commit=True)
    assert h.fetch("g") == {T0: 20}
    h.commit("g", {T1: 30})
    txn_commit(h, "g", {T1: 3})  # written after the plain commit: it wins on COMMIT
    marker(h, commit=True)
    assert h.fetch("g") == {T0: 20, T1: 3}
    h.restart()
    assert h.fetch("g") == {T0: 20, T1: 3}


def test_markers_only_complete_their_own_producer(h: Harness) -> None:
    txn_commit(h, "g", {T0: 1}, pid=1)
    txn_commit(h, "g", {T1: 2}, pid=2)
    txn_commit(h, "g", {T0: 3}, pid=1)  # a second commit of the same transaction
    marker(h, commit=True, pid=2)
    assert h.fetch("g") == {T1: 2}
    assert fetch(h, "g", [T0, T1], stable=True) == {T0: (-1, UNSTABLE), T1: (2, OK)}
    marker(h, commit=True, pid=1)
    assert h.fetch("g") == {T0: 3, T1: 2}


@pytest.mark.parametrize("commit", [True, False])
def test_reload_restores_pending_offsets_exactly(h: Harness, commit: bool) -> None:
    h.commit("g", {T0: 5})
    txn_commit(h, "g", {T0: 10, T1: 11}, metadata="m")
    txn_commit(h, "h", {T0: 7}, pid=PID + 1)
    before = state(h)
    assert before[1]  # something is pending
    h.restart()  # the markers are not in the log yet
    assert state(h) == before
    assert fetch(h, "g", [T0], stable=True) == {T0: (-1, UNSTABLE)}
    assert h.fetch("g") == {T0: 5}
    marker(h, commit=commit)  # the marker arrives after the reload
    after = state(h)
    h.restart()
    assert state(h) == after
    assert h.fetch("g") == ({T0: 10, T1: 11} if commit else {T0: 5})
    assert h.fetch("h") == {}
    assert fetch(h, "h", [T0], stable=True) == {T0: (-1, UNSTABLE)}


def test_member_checks(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    sync_all(h, "g", joined)
    a = joined["a"]
    gen = a.generation_id
    assert txn_commit(h, "g", {T0: 1}, generation=gen, member=a.member_id) == {T0: OK}
    assert txn_commit(h, "g", {T0: 1}, generation=gen + 1, member=a.member_id) == {
        T0: ErrorCode.illegal_generation}
    assert txn_commit(h, "g", {T0: 1}, generation=gen, member="nobody") == {
        T0: ErrorCode.unknown_member_id}
    assert txn_commit(h, "g", {T0: 1}, generation=-1, member="nobody") == {
        T0: ErrorCode.unknown_member_id}  # a member id names a member even without a generation
    # without member fields (TxnOffsetCommit v0-v2) a non-empty group still accepts
    assert txn_commit(h, "g", {T0: 1}) == {T0: OK}
    # a group that does not exist: a generation means a stale member
    assert txn_commit(h, "gone", {T0: 1}, generation=3, member="m") == {
        T0: ErrorCode.illegal_generation}
    assert txn_commit(h, "simple", {T0: 1}) == {T0: OK}
    too_big = "x" * (h.config.offset_metadata_max_bytes + 1)
    assert txn_commit(h, "g", {T0: 1}, metadata=too_big) == {
        T0: ErrorCode.offset_metadata_too_large}


def test_static_member_checks(h: Harness) -> None:
    joined = h.form("s", ["a"], static=True)
    sync_all(h, "s", joined)
    a = joined["a"]
    gen = a.generation_id
    assert txn_commit(h, "s", {T0: 1}, generation=gen, member=a.member_id,
                      instance="i-a") == {T0: OK}
    assert txn_commit(h, "s", {T0: 1}, generation=gen, member="old",
                      instance="i-a") == {T0: ErrorCode.fenced_instance_id}
    assert txn_commit(h, "s", {T0: 1}, generation=gen, member=a.member_id,
                      instance="i-unknown") == {T0: ErrorCode.unknown_member_id}


def test_an_older_producer_epoch_is_fenced_without_failing_the_partition(h: Harness) -> None:
    assert txn_commit(h, "g", {T0: 1}, epoch=3) == {T0: OK}
    end = h.log.log_end_offset
    with pytest.raises(KafkaError) as e:
        txn_commit(h, "g", {T0: 2}, epoch=2)
    assert e.value.code == ErrorCode.invalid_producer_epoch
    assert h.runtime.state(0) is PartitionState.ACTIVE and h.log.log_end_offset == end
    assert h.shard.pending.get(PID, "g", T0) is not None
    assert h.shard.pending.get(PID, "g", T0).offset == 1  # type: ignore[union-attr]
    # the same epoch again is fine: no sequence numbers, so no false duplicate
    assert txn_commit(h, "g", {T0: 3}, epoch=3) == {T0: OK}
    with pytest.raises(KafkaError) as e:  # a marker of an older epoch too
        h.runtime.execute_marker(0, PID, 2, 0, True)
    assert e.value.code == ErrorCode.invalid_producer_epoch
    assert h.runtime.state(0) is PartitionState.ACTIVE
    marker(h, commit=True, epoch=3)
    assert h.fetch("g") == {T0: 3}


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(h: Harness) -> None:
    txn_commit(h, "g", {T0: 1})
    marker(h, commit=True, coordinator_epoch=5)
    txn_commit(h, "g", {T0: 2})
    with pytest.raises(KafkaError) as e:
        h.runtime.execute_marker(0, PID, 0, 4, False)
    assert e.value.code == ErrorCode.transaction_coordinator_fenced
    assert h.runtime.state(0) is PartitionState.ACTIVE
    assert fetch(h, "g", [T0], stable=True) == {T0: (-1, UNSTABLE)}  # still pending
    marker(h, commit=True, coordinator_epoch=5)
    assert h.fetch("g") == {T0: 2}


def test_expiry_keeps_partitions_and_groups_with_pending_offsets(h: Harness) -> None:
    h.commit("g", {T0: 5, T1: 6})
    txn_commit(h, "g", {T0: 10})
    txn_commit(h, "p", {T0: 1}, pid=PID + 1)
    h.clock.advance(11 * MINUTE)
    assert h.expire() == 1  # T1 only: T0 is about to be replaced by the transaction
    assert h.fetch("g") == {T0: 5} and "p" in h.shard.groups
    marker(h, commit=True)
    assert h.fetch("g") == {T0: 10}
    marker(h, commit=True, pid=PID + 1)
    assert h.fetch("p") == {T0: 1}


def test_offset_delete_and_delete_groups_tombstone_pending_offsets(h: Harness) -> None:
    h.commit("g", {T0: 5})
    txn_commit(h, "g", {T0: 10, T1: 11})
    code, errors = h.run(lambda s, now, _t: offsets.delete_offsets(s, "g", [T1], now))[1]
    assert code == OK and errors == [(T1, OK)]
    assert fetch(h, "g", [T0, T1], stable=True) == {T0: (-1, UNSTABLE), T1: (-1, OK)}
    assert h.delete_groups("g") == {"g": OK}
    assert "g" not in h.shard.groups and not h.shard.pending
    marker(h, commit=True)  # nothing left to apply
    assert h.fetch("g") == {}
    h.restart()
    assert h.fetch("g") == {} and not h.shard.pending


def test_deleted_topics_take_their_pending_offsets(h: Harness) -> None:
    txn_commit(h, "g", {T0: 10, ("u", 0): 3})
    removed = h.run(lambda s, now, _t: offsets.remove_topics(s, frozenset({"t"}), now))[1]
    assert removed == 1
    marker(h, commit=True)
    assert h.fetch("g") == {("u", 0): 3}


def test_an_empty_group_holding_only_pending_offsets_is_not_removed(h: Harness) -> None:
    joined = h.form("g", ["a"])
    sync_all(h, "g", joined)
    a = joined["a"]
    txn_commit(h, "g", {T0: 10}, generation=a.generation_id, member=a.member_id)
    h.leave("g", LeaveMember(a.member_id))
    assert h.shard.groups["g"].state is GroupState.EMPTY
    h.clock.advance(11 * MINUTE)
    assert h.expire() == 0
    assert "g" in h.shard.groups and h.shard.groups["g"].stored is not None
    marker(h, commit=True)
    assert h.fetch("g") == {T0: 10}
    h.restart()
    assert h.fetch("g") == {T0: 10}
