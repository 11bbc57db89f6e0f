"""The controller's operations against a real ZooKeeper, brokers in-process (sessions,
registrations and controllers only): controlled shutdown and its refusals, elections
and their per-partition errors, and NOT_CONTROLLER from a broker that is not the
controller. The end-to-end behaviour with real broker processes is in
test_cluster_ops.py."""

from __future__ import annotations

import pytest
from tests.integration.test_zk_controller import (
    Member,
    _count_active,
    active,
    eventually,
    read_state,
    run,
    start_members,
    stop_members,
)
from tests.integration.zkserver import ZooKeeperServer

from tidegate.common.errors import ErrorCode
from tidegate.replication.zk_ops import SetData
from tidegate.replication.znodes import PartitionState, partition_state_path
from tidegate.server.cluster.controller_calls import NotControllerError
from tidegate.server.cluster.topic_admin import create_topic_in_zk

PREFERRED, UNCLEAN = 0, 1


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> ZooKeeperServer:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server  # type: ignore[misc]


async def _setup(zk_server: ZooKeeperServer) -> tuple[list[Member], Member, Member]:
    members = await start_members(zk_server.chroot_connect(), [1, 2, 3])
    await eventually(lambda: _count_active(members, 1))
    ctl = (await active(members))[0]
    other = next(m for m in members if m is not ctl)
    return members, ctl, other


async def _wait_states(m: Member, topic: str, n: int) -> None:
    async def ready() -> bool:
        return all([await read_state(m.zk, topic, p) is not None for p in range(n)])
    await eventually(ready)


def test_controlled_shutdown_moves_leaders_and_refuses_what_kafka_refuses(
        zk_server: ZooKeeperServer) -> None:
    async def main() -> None:
        members, ctl, other = await _setup(zk_server)
        try:
            await create_topic_in_zk(ctl.zk, "cs", partitions=3, replication_factor=3,
                                     configs={})
            await create_topic_in_zk(ctl.zk, "single", partitions=1, replication_factor=1,
                                     configs={})
            await _wait_states(ctl, "cs", 3)
            await _wait_states(ctl, "single", 1)
            going = other.broker_id
            epoch = ctl.controller.ctx.broker_epochs[going]  # type: ignore[union-attr]
            # a stale broker epoch (an earlier incarnation) and an unknown broker
            stale = await ctl.controller.controlled_shutdown(going, epoch - 1)
            assert stale.error == ErrorCode.stale_broker_epoch
            unknown = await ctl.controller.controlled_shutdown(42, -1)
            assert unknown.error == ErrorCode.broker_not_available
            # only the controller does it
            with pytest.raises(NotControllerError):
                await other.controller.controlled_shutdown(going, epoch)

            single = await read_state(ctl.zk, "single", 0)
            assert single is not None
            result = await ctl.controller.controlled_shutdown(going, epoch)
            assert result.error == ErrorCode.none and result.remaining == ()
            for p in range(3):
                s = await read_state(ctl.zk, "cs", p)
                assert s is not None and s.leader != going and going not in s.isr
            # one replica: nobody to move to, left as it was (not "remaining" either)
            assert await read_state(ctl.zk, "single", 0) == single
            # while it shuts down, it is elected nowhere: not even as preferred leader
            led_by_it = [p for p in range(3)
                         if ctl.controller.ctx.assignment(("cs", p))[0] == going]  # type: ignore[union-attr]
            got = await ctl.controller.elect_leaders(PREFERRED, [("cs", p) for p in led_by_it])
            assert {r.error for r in got.values()} <= {ErrorCode.preferred_leader_not_available}
        finally:
            await stop_members(members)

    run(main())


def test_elections_and_their_errors(zk_server: ZooKeeperServer) -> None:
    async def main() -> None:
        members, ctl, other = await _setup(zk_server)
        try:
            created = await create_topic_in_zk(ctl.zk, "el", partitions=2, replication_factor=2,
                                               configs={})
            await _wait_states(ctl, "el", 2)
            replicas = created.partitions[0]
            preferred, second = replicas
            # move leadership off the preferred replica by hand (as a failover would)
            ctx = ctl.controller.ctx
            assert ctx is not None
            path = partition_state_path("el", 0)
            _, stat = await ctl.zk.get(path)
            moved = PartitionState(second, 1, (second, preferred), ctx.epoch)
            await ctl.zk.transaction(ctx.fenced([SetData(path, moved.encode(), stat.version)]))

            got = await ctl.controller.elect_leaders(PREFERRED, [("el", 0), ("el", 1),
                                                                 ("el", 9), ("nosuch", 0)])
            assert got[("el", 0)].error == ErrorCode.none and got[("el", 0)].leader == preferred
            assert got[("el", 1)].error == ErrorCode.election_not_needed
            assert got[("el", 9)].error == ErrorCode.unknown_topic_or_partition
            assert got[("nosuch", 0)].message == "The partition does not exist."
            s = await read_state(ctl.zk, "el", 0)
            assert s == PartitionState(preferred, 2, (second, preferred), ctx.epoch)

            # unclean: nothing to do while every leader is alive
            assert {r.error for r in (await ctl.controller.elect_leaders(UNCLEAN, None)
                                      ).values()} == {ErrorCode.election_not_needed}
            # the preferred replica out of sync: not available
            _, stat = await ctl.zk.get(path)
            out_of_sync = PartitionState(second, 3, (second,), ctx.epoch)
            await ctl.zk.transaction(ctx.fenced([SetData(path, out_of_sync.encode(),
                                                         stat.version)]))
            got = await ctl.controller.elect_leaders(PREFERRED, [("el", 0)])
            assert got[("el", 0)].error == ErrorCode.preferred_leader_not_available
            with pytest.raises(NotControllerError):
                await other.controller.elect_leaders(PREFERRED, None)
        finally:
            await stop_members(members)

    run(main())
