"""One replica of a topic partition hosted by this broker: its log, role and epoch.

Handlers, the coordinators and the marker writer reach a partition's log only through
a `Partition` handed out by the replica manager (`server/replica_manager.py`), which
checks leadership first. A `Partition` knows:

- its `Log` and whether this broker leads it, at which leader epoch;
- how to append as the leader (`append`, `append_control`): the batches are stamped
  with the leader epoch in a cluster (the embedded broker leaves Kafka's "no epoch", -1,
  as it always has), and the high watermark rule is told about the new data;
- what "committed" means for it (`wait_committed`): on the embedded broker, fsynced
  (group commit) — the in-sync replicas are this node alone, so the high watermark is
  the durable offset; in a cluster, replicated to every in-sync replica.

Leadership is checked with `check_leader(current_leader_epoch)` the way Kafka's
`Partition` does for KIP-320: a request naming an older epoch is FENCED_LEADER_EPOCH, a
newer one UNKNOWN_LEADER_EPOCH, a follower NOT_LEADER_OR_FOLLOWER; -1 skips the epoch
check. Callers that await between the check and the append must check again right
before appending (leadership can move meanwhile).

Thread-safety: a `Partition` is used on the event loop only; its `Log` has its own lock
for the worker threads (flush, cleaner, retention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.storage.log import UNVERIFIED, AppendInfo, Log

if TYPE_CHECKING:
    from tidegate.server.leadership import Leadership
    from tidegate.server.replica_manager import ReplicaManager

NO_EPOCH = -1


class NotLeaderOrFollowerError(KafkaError):
    code = ErrorCode.not_leader_or_follower


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class Partition:
    __slots__ = ("_manager", "index", "is_leader", "leader_epoch", "leader_id", "leadership",
                 "log", "stamp_epoch", "topic")

    def __init__(
        self,
        topic: str,
        index: int,
        log: Log,
        manager: ReplicaManager,
        *,
        leader_epoch: int = 0,
        is_leader: bool = True,
        stamp_epoch: bool = False,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self.is_leader = is_leader
        self.leader_id = -1  # in a cluster: the leader this follower replicates from
        # in a cluster, while leading: HW over the ISR, acks=all, ISR changes
        self.leadership: Leadership | None = None
        # Embedded: batches keep partition_leader_epoch -1, as before cluster mode.
        self.stamp_epoch = stamp_epoch
        self._manager = manager

    @property
    def tp(self) -> tuple[str, int]:
        return self.topic, self.index

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else "follower"
        return f"Partition({self.topic}-{self.index}, {role}, epoch {self.leader_epoch})"

    # -- leadership -----------------------------------------------------------------

    def check_leader(self, current_leader_epoch: int = NO_EPOCH) -> None:
        """Raise unless this replica leads at `current_leader_epoch` (-1: any epoch)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"this broker is not the leader of {self.topic}-{self.index}")
        self.check_epoch(current_leader_epoch)

    def check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} is older "
                f"than the current {self.leader_epoch}")
        raise UnknownLeaderEpochError(
            f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} is newer "
            f"than the current {self.leader_epoch}")

    # -- writes as the leader --------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        single_batch: bool = False,
        verification_guard: object = UNVERIFIED,
    ) -> AppendInfo:
        """Append a client's batches (see `Log.append`) and tell the high-watermark rule
        (on the embedded broker under a relaxed flush policy the append itself moves
        the high watermark, in the same hold of the log's lock)."""
        if not self.is_leader:
            self.check_leader()  # raises
        manager = self._manager
        lg = self.log
        # on one node under a relaxed flush policy `after_append` would move the HW to
        # the new log end at once: the append does it under the lock it holds
        moves_hw = not lg.syncs_every_write and not manager.cluster
        info = lg.append(
            data,
            leader_epoch=self.leader_epoch if self.stamp_epoch else None,
            single_batch=single_batch,
            verification_guard=verification_guard,
            advance_hw=moves_hw,
        )
        if not info.duplicate and info.first_offset >= 0:
            manager.after_append(self, moved_hw=moves_hw)
        return info

    def append_control(self, data: bytes, *, coordinator_epoch: int | None = None) -> AppendInfo:
        """Append broker-built batches (markers, coordinator records)."""
        self.check_leader()
        info = self.log.append_control(
            data, coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch if self.stamp_epoch else None)
        if info.first_offset >= 0:
            self._manager.after_append(self)
        return info

    async def wait_committed(self, offset: int) -> None:
        """Return once everything below `offset` is committed (acks=all): fsynced on the
        embedded broker, in every in-sync replica in a cluster; and below the HW."""
        await self._manager.wait_committed(self, offset)
