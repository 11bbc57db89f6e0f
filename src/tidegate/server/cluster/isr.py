"""A leader's ISR changes, written to ZooKeeper the way Kafka did before 2.7.

The leader proposes (server/leadership.py: a follower caught up, or fell behind for
`replica.lag.time.max.ms`); this writes the partition's state znode with the new ISR and
the same leader and leader epoch, conditional on the znode version the leader last read
(`SetData(..., version)`). If anyone else wrote the znode since (the controller elected
another leader, or changed the ISR when a broker died), the write fails with BadVersion,
the proposal is dropped, and the metadata watcher brings the newer state: a paused or
deposed leader can never overwrite a newer decision.
"""

from __future__ import annotations

import asyncio
import logging

from tidegate.replication.znodes import PartitionState, partition_state_path
from tidegate.server.cluster.errors import BadVersionError, NoNodeError, ZkError
from tidegate.server.cluster.zk import ZkClient
from tidegate.server.partition import Partition
from tidegate.server.replica_manager import ReplicaManager

__all__ = ["IsrWriter"]

log = logging.getLogger(__name__)


class IsrWriter:
    def __init__(self, zk: ZkClient, replicas: ReplicaManager) -> None:
        self.zk = zk
        self.replicas = replicas
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, part: Partition, isr: tuple[int, ...]) -> None:
        task = asyncio.create_task(self._write(part, isr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, part: Partition, isr: tuple[int, ...]) -> None:
        lead = part.leadership
        if lead is None:
            return
        st = lead.state
        expected = st.pending.expected_zk_version if st.pending else st.zk_version
        new = PartitionState(leader=st.leader_id, leader_epoch=st.leader_epoch, isr=isr,
                             controller_epoch=lead.controller_epoch)
        path = partition_state_path(part.topic, part.index)
        version: int | None = None
        try:
            version = (await self.zk.set(path, new.encode(), expected)).version
            log.info("%s-%d: ISR now %s (leader epoch %d, znode version %d)", part.topic,
                     part.index, list(isr), st.leader_epoch, version)
        except (BadVersionError, NoNodeError):
            log.info("%s-%d: ISR change to %s lost to a newer state; re-reading", part.topic,
                     part.index, list(isr))
        except ZkError as e:
            log.warning("%s-%d: cannot write the ISR change to %s: %s", part.topic,
                        part.index, list(isr), e)
        self.replicas.isr_written(part, isr, version)
