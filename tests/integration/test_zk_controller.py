"""The controller against a real ZooKeeper: election and failover, first partition states,
leadership moving off a dead broker, topic deletion, and fencing of a deposed controller.

Brokers are in-process here (a `ZkClient` session + `BrokerRegistrar` each; the broker
wiring comes later); each test works under a chroot of its own on a shared server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from tests.integration.zkserver import ZooKeeperServer, expire_session

from tidegate.common.errors import InvalidReplicationFactorError, TopicAlreadyExistsError
from tidegate.replication.zk_ops import SetData
from tidegate.replication.znodes import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    BrokerEndpoint,
    BrokerInfo,
    ControllerRegistration,
    PartitionState,
    TopicAssignment,
    partition_state_path,
    topic_config_path,
    topic_path,
)
from tidegate.server.cluster.controller import Controller
from tidegate.server.cluster.errors import BadVersionError, ControllerMovedError
from tidegate.server.cluster.registration import BrokerRegistrar, ensure_persistent_paths
from tidegate.server.cluster.topic_admin import create_topic_in_zk, request_topic_deletion
from tidegate.server.cluster.zk import ZkClient

SESSION_MS = 2000


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


async def eventually(cond: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


class Member:
    """A broker as the cluster sees it: a session, a registration, a controller."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.broker_id = broker_id
        self.zk = ZkClient(connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=15000)
        info = BrokerInfo(broker_id, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),))
        self.registrar = BrokerRegistrar(self.zk, lambda: info)
        self.controller = Controller(self.zk, broker_id)

    async def start(self) -> Member:
        await self.zk.start()
        await ensure_persistent_paths(self.zk)
        await self.registrar.start()
        await self.controller.start()
        return self

    async def crash(self) -> None:
        """Session closed: registration and (if controller) /controller vanish at once."""
        await self.controller.abandon()
        await self.registrar.stop()
        await self.zk.close()

    async def stop(self) -> None:
        await self.controller.stop()
        await self.registrar.stop()
        await self.zk.close()


async def start_members(connect: str, ids: list[int]) -> list[Member]:
    return list(await asyncio.gather(*(Member(connect, b).start() for b in ids)))


async def stop_members(members: list[Member]) -> None:
    for m in members:
        await m.stop()


async def active(members: list[Member]) -> list[Member]:
    return [m for m in members if m.controller.active]


async def read_state(zk: ZkClient, topic: str, p: int) -> PartitionState | None:
    got = await zk.get_or_none(partition_state_path(topic, p))
    return None if got is None else PartitionState.decode(got[0])


async def controller_epoch(zk: ZkClient) -> int:
    data, _ = await zk.get(CONTROLLER_EPOCH)
    return int(data)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_one_controller_is_elected_and_another_takes_over_when_it_dies(
    zk_server: ZooKeeperServer,
) -> None:
    async def main() -> None:
        members = await start_members(zk_server.chroot_connect(), [1, 2, 3])
        try:
            await eventually(lambda: _count_active(members, 1))
            first = (await active(members))[0]
            data, _ = await first.zk.get(CONTROLLER)
            assert ControllerRegistration.decode(data).broker_id == first.broker_id
            assert json.loads(data)["version"] == 2
            epoch = await controller_epoch(first.zk)
            assert first.controller.epoch == epoch >= 1
            # the others learn who it is (each through its own watch on /controller,
            # which may fire after the winner is already active)
            async def all_know() -> bool:
                return {m.controller.controller_id for m in members} == {first.broker_id}

            await eventually(all_know)

            await first.crash()
            rest = [m for m in members if m is not first]
            await eventually(lambda: _count_active(rest, 1))
            second = (await active(rest))[0]
            assert second.controller.epoch == epoch + 1
            assert await controller_epoch(second.zk) == epoch + 1
            members = rest
        finally:
            await stop_members(members)

    run(main())


async def _count_active(members: list[Member], n: int) -> bool:
    return len(await active(members)) == n


def test_topic_creation_gets_partition_states_and_leadership_moves_off_a_dead_broker(
    zk_server: ZooKeeperServer,
) -> None:
    async def main() -> None:
        members = await start_members(zk_server.chroot_connect(), [1, 2, 3])
        admin = members[0].zk
        try:
            await eventually(lambda: _count_active(members, 1))
            created = await create_topic_in_zk(
                admin, "orders", partitions=6, replication_factor=3, configs={"a": "b"}
            )
            data, _ = await admin.get(topic_path("orders"))
            assert json.loads(data)["version"] == 3 and "topic_id" in json.loads(data)
            cfg, _ = await admin.get(topic_config_path("orders"))
            assert json.loads(cfg) == {"version": 1, "config": {"a": "b"}}

            async def all_states() -> bool:
                states = [await read_state(admin, "orders", p) for p in range(6)]
                return all(s is not None for s in states)

            await eventually(all_states)
            epoch = (await active(members))[0].controller.epoch
            for p, replicas in created.partitions.items():
                s = await read_state(admin, "orders", p)
                assert s == PartitionState(replicas[0], 0, replicas, epoch)

            # a broker dies: what it led moves to the next ISR member, epochs bump
            victim = next(m for m in members[1:] if not m.controller.active)
            dead = victim.broker_id
            await victim.crash()
            members = [m for m in members if m is not victim]

            async def moved() -> bool:
                for p in range(6):
                    s = await read_state(admin, "orders", p)
                    if s is None or s.leader == dead or dead in s.isr:
                        return False
                return True

            await eventually(moved)
            for p, replicas in created.partitions.items():
                s = await read_state(admin, "orders", p)
                assert s is not None
                assert s.leader_epoch == 1  # every partition had the dead broker in its ISR
                assert s.isr == tuple(r for r in replicas if r != dead)
                assert s.leader == next(r for r in replicas if r != dead)
        finally:
            await stop_members(members)

    run(main())


def test_partition_without_live_isr_goes_offline_and_comes_back(
    zk_server: ZooKeeperServer,
) -> None:
    async def main() -> None:
        connect = zk_server.chroot_connect()
        members = await start_members(connect, [1, 2])
        try:
            await eventually(lambda: _count_active(members, 1))
            ctl = (await active(members))[0]
            other = next(m for m in members if m is not ctl)
            await create_topic_in_zk(ctl.zk, "solo", assignment={0: [other.broker_id]}, configs={})
            await eventually(lambda: _has_state(ctl.zk, "solo", 0))
            await other.crash()
            members = [ctl]

            async def offline() -> bool:
                s = await read_state(ctl.zk, "solo", 0)
                return s is not None and s.leader == -1

            await eventually(offline)
            s = await read_state(ctl.zk, "solo", 0)
            assert s == PartitionState(-1, 1, (other.broker_id,), ctl.controller.epoch)

            back = await Member(connect, other.broker_id).start()
            members.append(back)

            async def online() -> bool:
                s = await read_state(ctl.zk, "solo", 0)
                return s is not None and s.leader == other.broker_id

            await eventually(online)
            s = await read_state(ctl.zk, "solo", 0)
            assert s is not None and s.leader_epoch == 2 and s.isr == (other.broker_id,)
        finally:
            await stop_members(members)

    run(main())


async def _has_state(zk: ZkClient, topic: str, p: int) -> bool:
    return await read_state(zk, topic, p) is not None


def test_a_deposed_controller_cannot_overwrite_a_newer_decision(
    zk_server: ZooKeeperServer,
) -> None:
    async def main() -> None:
        members = await start_members(zk_server.chroot_connect(), [1, 2, 3])
        try:
            await eventually(lambda: _count_active(members, 1))
            old = (await active(members))[0]
            await create_topic_in_zk(old.zk, "t", assignment={0: [1, 2, 3]}, configs={})
            await eventually(lambda: _has_state(old.zk, "t", 0))
            old_epoch = old.controller.epoch
            # "SIGSTOP": the old controller stops processing events but keeps its view
            await old.controller.abandon()
            stale_ctx = old.controller.ctx
            assert stale_ctx is not None
            # ... long enough for its session to expire
            session = old.zk._client.client_id
            expire_session(zk_server, *session)
            rest = [m for m in members if m is not old]
            await eventually(lambda: _count_active(rest, 1), timeout=15)
            new = (await active(rest))[0]
            assert new.controller.epoch == old_epoch + 1
            # the new controller decides something: a broker dies and leaves the ISR
            dying = next(m for m in rest if m is not new)
            await dying.crash()
            rest = [m for m in rest if m is not dying]

            async def shrunk() -> bool:
                s = await read_state(new.zk, "t", 0)
                return s is not None and dying.broker_id not in s.isr

            await eventually(shrunk)
            decided = await read_state(new.zk, "t", 0)
            assert decided is not None and decided.controller_epoch == new.controller.epoch

            # "SIGCONT": the old controller acts on its stale view. Every write is refused.
            assert await old.zk.wait_connected(10)
            old.controller.ctx = stale_ctx
            with pytest.raises(ControllerMovedError):
                await old.controller.write_state(
                    ("t", 0),
                    lambda cur: PartitionState(
                        dying.broker_id, cur.leader_epoch + 1, (dying.broker_id,), old_epoch
                    ),
                )
            stale = PartitionState(dying.broker_id, 99, (dying.broker_id,), old_epoch)
            with pytest.raises(BadVersionError) as refused:
                await old.zk.transaction(
                    stale_ctx.fenced([SetData(partition_state_path("t", 0), stale.encode())])
                )
            assert refused.value.op_index == 0  # the /controller_epoch check
            assert await read_state(new.zk, "t", 0) == decided
            members = [old, *rest]
        finally:
            await stop_members(members)

    run(main())


def test_session_expiry_makes_the_controller_resign_and_another_win(
    zk_server: ZooKeeperServer,
) -> None:
    async def main() -> None:
        members = await start_members(zk_server.chroot_connect(), [1, 2])
        try:
            await eventually(lambda: _count_active(members, 1))
            old = (await active(members))[0]
            epoch = old.controller.epoch
            expire_session(zk_server, *old.zk._client.client_id)

            async def handed_over() -> bool:
                now = await active(members)
                return len(now) == 1 and now[0].controller.epoch > epoch

            await eventually(handed_over, timeout=15)
            assert (await active(members))[0].controller.epoch == epoch + 1
        finally:
            await stop_members(members)

    run(main())


def test_topic_admin_errors_and_deletion(zk_server: ZooKeeperServer) -> None:
    async def main() -> None:
        members = await start_members(zk_server.chroot_connect(), [1, 2])
        zk = members[0].zk
        try:
            await eventually(lambda: _count_active(members, 1))
            with pytest.raises(InvalidReplicationFactorError) as e:
                await create_topic_in_zk(zk, "big", partitions=1, replication_factor=3)
            assert str(e.value) == "Replication factor: 3 larger than available brokers: 2."
            await create_topic_in_zk(zk, "gone", partitions=2, replication_factor=2)
            with pytest.raises(TopicAlreadyExistsError, match=r"Topic 'gone' already exists\."):
                await create_topic_in_zk(zk, "gone", partitions=2, replication_factor=2)
            await eventually(lambda: _has_state(zk, "gone", 1))
            # a partition added to the assignment (CreatePartitions) gets its state too
            data, stat = await zk.get(topic_path("gone"))
            grown = TopicAssignment.decode("gone", data)
            grown = TopicAssignment("gone", {**grown.partitions, 2: (2, 1)}, grown.topic_id)
            await zk.set(topic_path("gone"), grown.encode(), stat.version)
            await eventually(lambda: _has_state(zk, "gone", 2))
            assert (await read_state(zk, "gone", 2)) == PartitionState(
                2, 0, (2, 1), (await active(members))[0].controller.epoch
            )

            await request_topic_deletion(zk, "gone")

            async def deleted() -> bool:
                return (
                    await zk.exists(topic_path("gone")) is None
                    and await zk.exists(topic_config_path("gone")) is None
                    and await zk.exists("/admin/delete_topics/gone") is None
                )

            await eventually(deleted)
            # the name is free again
            await create_topic_in_zk(zk, "gone", partitions=1, replication_factor=1)
            await eventually(lambda: _has_state(zk, "gone", 0))
        finally:
            await stop_members(members)

    run(main())
