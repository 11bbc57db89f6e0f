"""The asyncio shell (server/coordinator.py) on a real in-process broker: durability
before answers, parked requests, timers, restart by replay, reload after a failed
write, offsets of deleted topics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.group.messages import (
    CommitPartition,
    HeartbeatRequest,
    JoinRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncRequest,
    TxnCommitPartition,
    TxnOffsetCommitRequest,
)
from tidegate.coordinator.runtime import CoordinatorRuntime, PartitionState, ReplayRecord, Result
from tidegate.coordinator.timers import DeadlineQueue
from tidegate.server.broker import Broker
from tidegate.server.coordinator import CoordinatorShell
from tidegate.server.group_coordinator import OFFSETS_TOPIC

from .harness import sub


def _broker(tmp_path: Path, **extra: str) -> Broker:
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path), "offsets.topic.num.partitions": "3",
                             "group.initial.rebalance.delay.ms": "0", **extra}))
    b.load()
    return b


def _join(group: str, member_id: str = "") -> JoinRequest:
    return JoinRequest(group, member_id, None, "consumer", (("range", sub()),), 6000, 6000,
                       "c", "/127.0.0.1")


async def _stable_member(b: Broker, group: str) -> str:
    gc = b.group_coordinator
    first = await gc.join(_join(group))
    assert first.error == ErrorCode.member_id_required
    joined = await gc.join(_join(group, first.member_id))
    assert joined.error == ErrorCode.none and joined.generation_id == 1
    synced = await gc.sync(SyncRequest(group, 1, joined.member_id,
                                       assignments=((joined.member_id, b"A"),)))
    assert synced.assignment == b"A"
    return joined.member_id


def test_answers_follow_durable_records_and_survive_restart(tmp_path: Path) -> None:
    async def first_life() -> str:
        b = _broker(tmp_path)
        await b.group_coordinator.start()
        assert len(b.logs.topics[OFFSETS_TOPIC].configs) and \
            b.logs.topics[OFFSETS_TOPIC].configs["cleanup.policy"] == "compact"
        member = await _stable_member(b, "g")
        res = await b.group_coordinator.commit(OffsetCommitRequest(
            "g", 1, member, partitions=(CommitPartition("t", 0, 42),)))
        assert res == [(("t", 0), ErrorCode.none)]
        lg = b.get_log(OFFSETS_TOPIC, b.group_coordinator.partition_for("g"))
        assert lg is not None and lg.recovery_point == lg.log_end_offset > 0  # fsynced
        await b.group_coordinator.stop()
        b.close()
        return member

    async def second_life(member: str) -> None:
        b = _broker(tmp_path)
        await b.group_coordinator.start()
        gc = b.group_coordinator
        got = await gc.fetch(OffsetFetchRequest("g", (("t", 0),)))
        assert got.partitions[0].offset == 42
        # the loaded member is still in generation 1: no rebalance after a restart
        assert await gc.heartbeat(HeartbeatRequest("g", 1, member)) == ErrorCode.none
        described = await gc.describe(["g"])
        assert described[0].state == "Stable"
        await gc.stop()
        b.close()

    member = asyncio.run(first_life())
    asyncio.run(second_life(member))


def test_session_timer_runs_from_the_tick(tmp_path: Path) -> None:
    async def main() -> None:
        b = _broker(tmp_path, **{"group.min.session.timeout.ms": "100"})
        await b.group_coordinator.start()
        gc = b.group_coordinator
        first = await gc.join(JoinRequest("g", "", None, "consumer", (("range", sub()),),
                                          300, 300, "c", "/h"))
        joined = await gc.join(JoinRequest("g", first.member_id, None, "consumer",
                                           (("range", sub()),), 300, 300, "c", "/h"))
        assert joined.error == ErrorCode.none
        assert (await gc.describe(["g"]))[0].state == "CompletingRebalance"
        for _ in range(100):  # no heartbeat: the member expires, the group empties
            d = await gc.describe(["g"])
            if d[0].state == "Empty":
                break
            await asyncio.sleep(0.05)
        assert d[0].state == "Empty" and not d[0].members
        await gc.stop()
        b.close()

    asyncio.run(main())


def test_a_failed_write_reloads_the_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    async def main() -> None:
        b = _broker(tmp_path)
        await b.group_coordinator.start()
        gc = b.group_coordinator
        p = gc.partition_for("g")
        lg = b.get_log(OFFSETS_TOPIC, p)
        assert lg is not None
        real = lg.append

        def broken(*a: object, **kw: object) -> object:
            raise OSError("disk on fire")

        monkeypatch.setattr(lg, "append", broken)
        req = OffsetCommitRequest("g", -1, "", partitions=(CommitPartition("t", 0, 1),))
        with pytest.raises(KafkaError) as e:
            await gc.commit(req)
        assert e.value.code == ErrorCode.coordinator_not_available
        monkeypatch.setattr(lg, "append", real)
        for _ in range(100):
            if gc.runtime.state(p) is PartitionState.ACTIVE:
                break
            await asyncio.sleep(0.01)
        assert await gc.commit(req) == [(("t", 0), ErrorCode.none)]
        await gc.stop()
        b.close()

    asyncio.run(main())


def test_deleting_a_topic_deletes_its_offsets(tmp_path: Path) -> None:
    async def main() -> None:
        b = _broker(tmp_path)
        await b.group_coordinator.start()
        gc = b.group_coordinator
        b.create_topic("t", 1, {})
        await gc.commit(OffsetCommitRequest("g", -1, "", partitions=(
            CommitPartition("t", 0, 5), CommitPartition("u", 0, 6))))
        b.delete_topic("t")
        for _ in range(100):
            got = await gc.fetch(OffsetFetchRequest("g", None))
            if [f.topic for f in got.partitions] == ["u"]:
                break
            await asyncio.sleep(0.01)
        assert [f.topic for f in got.partitions] == ["u"]
        await gc.stop()
        b.close()

    asyncio.run(main())


class TimerShard:
    """A shard that only has deadlines, and remembers when each one ran."""

    def __init__(self, partition: int) -> None:
        self.timers = DeadlineQueue()
        self.fired: list[tuple[int, int]] = []  # (due, ran at)

    def replay(self, records: Sequence[ReplayRecord], producer_id: int, producer_epoch: int,
               transactional: bool) -> None:
        pass

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        pass

    def set_time(self, now_ms: int) -> None:
        pass

    def on_loaded(self, now_ms: int) -> None:
        pass

    def poll(self, now_ms: int) -> Result[None]:
        for due in self.timers.pop_due(now_ms):
            assert isinstance(due, int)
            self.fired.append((due, now_ms))
        return Result(None)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()


def test_deadlines_fire_at_their_due_time(tmp_path: Path) -> None:
    """No polling tick: the timer task sleeps until the earliest deadline, and an
    operation scheduling an earlier one wakes it (it was sleeping for up to 1 s)."""
    async def main() -> None:
        b = _broker(tmp_path)
        rt: CoordinatorRuntime[TimerShard] = CoordinatorRuntime(
            "coordinator-timers", 1, TimerShard, b.clock)
        shell = CoordinatorShell(b, rt, {})
        await shell.start()
        await asyncio.sleep(0.05)  # the timer task now sleeps: nothing is due

        def schedule(due: int) -> Callable[[TimerShard, int, int], Result[None]]:
            def op(s: TimerShard, _now: int, _t: int) -> Result[None]:
                s.timers.schedule(due, due)
                return Result(None)
            return op

        dues = []
        for delay in (250, 60, 400, 120):
            due = b.clock.now_ms() + delay
            dues.append(due)
            await shell.run(0, schedule(due))
        await asyncio.sleep(0.55)
        shard = rt.shard(0)
        assert sorted(d for d, _ in shard.fired) == sorted(dues)
        for due, ran in shard.fired:
            assert due <= ran <= due + 30, (due, ran)
        await shell.stop()
        b.close()

    asyncio.run(main())


def test_transactional_offsets_and_markers_through_the_coordinator(tmp_path: Path) -> None:
    """Under a relaxed flush policy too, a marker returns only once fsynced; the
    on_durable hook follows the partition's durable end."""
    async def main() -> None:
        b = _broker(tmp_path, **{"log.flush.interval.messages": "100000"})
        gc = b.group_coordinator
        seen: dict[int, list[int]] = {}
        gc.shell.on_durable = lambda p, end: seen.setdefault(p, []).append(end)
        await gc.start()
        p = gc.partition_for("g")
        lg = b.get_log(OFFSETS_TOPIC, p)
        assert lg is not None

        def req(offset: int, epoch: int) -> TxnOffsetCommitRequest:
            return TxnOffsetCommitRequest("tx", "g", 9, epoch,
                                          partitions=(TxnCommitPartition("t", 0, offset),))

        assert await gc.txn_commit(req(42, 0)) == [(("t", 0), ErrorCode.none)]
        assert gc.has_pending(p, 9)
        assert seen[p][-1] == 1  # after the load's 0, if that came first
        got = await gc.fetch(OffsetFetchRequest("g", (("t", 0),), require_stable=True))
        assert got.partitions[0].error == ErrorCode.unstable_offset_commit
        await gc.write_marker(p, 9, 1, 0, True)  # the coordinator bumped the epoch
        assert lg.recovery_point == lg.log_end_offset == 2
        assert seen[p][-2:] == [1, 2] and seen[p] == sorted(set(seen[p]))
        assert not gc.has_pending(p, 9)
        got = await gc.fetch(OffsetFetchRequest("g", (("t", 0),), require_stable=True))
        assert (got.partitions[0].offset, got.partitions[0].error) == (42, ErrorCode.none)
        # epoch 0 is fenced now: per partition for TxnOffsetCommit, raised for a marker
        assert await gc.txn_commit(req(50, 0)) == [(("t", 0), ErrorCode.invalid_producer_epoch)]
        with pytest.raises(KafkaError) as e:
            await gc.write_marker(p, 9, 0, 0, False)
        assert e.value.code == ErrorCode.invalid_producer_epoch
        assert gc.runtime.state(p) is PartitionState.ACTIVE
        await gc.stop()
        b.close()

    asyncio.run(main())
