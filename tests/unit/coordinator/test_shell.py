"""The asyncio shell (server/coordinator.py) on a real in-process broker: durability
before answers, parked requests, timers, restart by replay, reload after a failed
write, offsets of deleted topics."""

from __future__ import annotations

import asyncio
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
)
from tidegate.coordinator.runtime import PartitionState
from tidegate.server.broker import Broker
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
