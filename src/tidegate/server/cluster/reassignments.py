"""Partition reassignment, I/O side: the controller's driver of Kafka's ZooKeeper-mode
algorithm (the steps are in replication/reassignment.py).

Everything runs in the controller's event task. The reassignment in flight lives in the
topic znode itself (`adding_replicas`/`removing_replicas`), so a controller elected
later resumes it (`resume`), and ListPartitionReassignments reads it from the
controller's context.

- `alter`: validate each request (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS,
  UNKNOWN_TOPIC_OR_PARTITION, as Kafka orders them), then start it: replicas an updated
  target no longer holds leave the ISR (and the leadership, if one led), the new
  assignment is written, and the leader epoch is bumped so the leader accepts the new
  replicas' fetches. Brokers open the replicas added to them (node.py) and fetch.
- the partition's state znode is watched (tag `("reassign", topic, partition)`); each
  change (`on_isr_change`) re-checks whether every target replica is in the ISR, and if
  so completes: leadership into the target if needed, the final assignment, and a last
  epoch bump with the ISR shrunk to the target. Removed replicas delete their data when
  they see the assignment without them.

Every write is fenced by the controller epoch; the topic znode is written conditionally
on its version (a concurrent CreatePartitions makes us re-read and write again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.controller_logic import ControllerContext
from tidegate.replication.reassignment import (
    ReplicaAssignment,
    assignment_of,
    completion_state,
    is_complete,
    new_reassignment,
    replace_partition,
    stop_replicas_state,
    validate_target,
)
from tidegate.replication.zk_ops import SetData
from tidegate.replication.znodes import (
    MalformedZnodeError,
    PartitionState,
    TopicAssignment,
    TopicPartition,
    topic_path,
)
from tidegate.server.cluster.errors import BadVersionError, ControllerMovedError, NoNodeError
from tidegate.server.cluster.fenced_writes import FencedWriter
from tidegate.server.cluster.reads import ClusterReader
from tidegate.server.cluster.zk import Watch, ZkClient

__all__ = ["Reassignments"]

log = logging.getLogger(__name__)

_RETRIES = 5
Outcome = tuple[ErrorCode, str | None]


class Reassignments:
    def __init__(self, zk: ZkClient, reads: ClusterReader, writer: FencedWriter,
                 watch: Callable[[Hashable], Watch]) -> None:
        self.zk = zk
        self.reads = reads
        self.writer = writer
        self.watch = watch

    # -- what is in flight ---------------------------------------------------------------

    @staticmethod
    def in_progress(ctx: ControllerContext,
                    tps: Iterable[TopicPartition] | None = None
                    ) -> dict[TopicPartition, ReplicaAssignment]:
        wanted = ctx.partitions() if tps is None else tps
        out: dict[TopicPartition, ReplicaAssignment] = {}
        for t, p in wanted:
            topic = ctx.topics.get(t)
            ra = None if topic is None else assignment_of(topic, p)
            if ra is not None and ra.being_reassigned:
                out[(t, p)] = ra
        return out

    # -- AlterPartitionReassignments -----------------------------------------------------

    async def alter(self, ctx: ControllerContext,
                    requests: Mapping[TopicPartition, Sequence[int] | None]
                    ) -> dict[TopicPartition, Outcome]:
        out: dict[TopicPartition, Outcome] = {}
        for tp, target in requests.items():
            topic = ctx.topics.get(tp[0])
            known = None if topic is None else assignment_of(topic, tp[1])
            current = known or ReplicaAssignment(())
            if target is not None:
                bad = validate_target(target, current, ctx.live_ids())
                if bad is not None:
                    out[tp] = bad
                    continue
            new = new_reassignment(current, target)
            if new is None:
                out[tp] = (ErrorCode.no_reassignment_in_progress, None)
            elif known is None:
                out[tp] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
            else:
                try:
                    await self._start(ctx, tp, current, new)
                    out[tp] = (ErrorCode.none, None)
                except KafkaError as e:
                    out[tp] = (e.code, str(e))
        return out

    async def _start(self, ctx: ControllerContext, tp: TopicPartition,
                     current: ReplicaAssignment, new: ReplicaAssignment) -> None:
        log.info("%s-%d: reassigning from %s to %s (replicas now %s, adding %s, removing %s)",
                 tp[0], tp[1], list(current.origin), list(new.target), list(new.replicas),
                 list(new.adding), list(new.removing))
        unneeded = set(current.replicas) - set(new.replicas)
        if unneeded:  # a changed target drops replicas an earlier one was adding
            live = ctx.live_ids()
            await self.writer.update_state(ctx, tp, lambda cur: stop_replicas_state(
                unneeded, new.replicas, cur, live, ctx.epoch))
        if new != current:
            await self._write_assignment(ctx, tp, new)
        if not new.being_reassigned:
            if new != current:  # cancelled: back on the origin, at a new leader epoch
                live = ctx.live_ids()
                await self.writer.update_state(ctx, tp, lambda cur: completion_state(
                    new.replicas, cur, live, ctx.epoch))
            return
        vs = await self.reads.state(tp, self.watch(("reassign", *tp)))
        if vs is not None and is_complete(new, vs.state.isr):
            await self._complete(ctx, tp)
        else:
            # a new leader epoch: the leader rebuilds its view of the replicas (now with
            # the adding ones, whose fetches it would refuse otherwise)
            await self.writer.update_state(ctx, tp, lambda cur: _bumped(cur, ctx.epoch))

    # -- progress ------------------------------------------------------------------------

    async def resume(self, ctx: ControllerContext,
                     tps: Iterable[TopicPartition] | None = None) -> None:
        """After an election or a topic change: watch each reassigning partition's state
        and complete those whose targets are all in sync already."""
        for tp in self.in_progress(ctx, tps):
            await self.on_isr_change(ctx, tp)

    async def on_isr_change(self, ctx: ControllerContext, tp: TopicPartition) -> None:
        topic = ctx.topics.get(tp[0])
        ra = None if topic is None else assignment_of(topic, tp[1])
        if ra is None or not ra.being_reassigned:
            return  # finished (or gone): let the watch lapse
        vs = await self.reads.state(tp, self.watch(("reassign", *tp)))
        if vs is not None and is_complete(ra, vs.state.isr):
            await self._complete(ctx, tp)

    async def _complete(self, ctx: ControllerContext, tp: TopicPartition) -> None:
        topic = ctx.topics.get(tp[0])
        ra = None if topic is None else assignment_of(topic, tp[1])
        if ra is None or not ra.being_reassigned:
            return
        target, live = ra.target, ctx.live_ids()
        log.info("%s-%d: target replicas %s are all in sync; completing the reassignment",
                 tp[0], tp[1], list(target))

        def move_leader(cur: PartitionState) -> PartitionState | None:
            if cur.leader in target and cur.leader in live:
                return None  # the leader stays: the last step shrinks the ISR
            return completion_state(target, cur, live, ctx.epoch)

        await self.writer.update_state(ctx, tp, move_leader)
        vs = ctx.states.get(tp)
        if vs is None or vs.state.leader not in target:
            log.warning("%s-%d: no replica of %s can lead yet; the reassignment completes "
                        "when one can", tp[0], tp[1], list(target))
            await self.reads.state(tp, self.watch(("reassign", *tp)))
            return
        await self._write_assignment(ctx, tp, ReplicaAssignment(target))
        # the leader forgets the removed replicas at a new epoch; the ISR is the target's
        await self.writer.update_state(
            ctx, tp, lambda cur: completion_state(target, cur, live, ctx.epoch))
        log.info("%s-%d: reassignment to %s complete", tp[0], tp[1], list(target))

    # -- the topic znode -----------------------------------------------------------------

    async def _write_assignment(self, ctx: ControllerContext, tp: TopicPartition,
                                ra: ReplicaAssignment) -> None:
        path = topic_path(tp[0])
        for _ in range(_RETRIES):
            try:
                data, stat = await self.zk.get(path)
                topic = TopicAssignment.decode(tp[0], data)
            except NoNodeError:
                raise KafkaError(f"topic {tp[0]} was deleted",
                                 code=ErrorCode.unknown_topic_or_partition) from None
            except MalformedZnodeError as e:
                raise KafkaError(str(e), code=ErrorCode.unknown_server_error) from None
            new = replace_partition(topic, tp[1], ra)
            try:
                await self.zk.transaction(ctx.fenced([SetData(path, new.encode(),
                                                              stat.version)]))
            except BadVersionError as e:
                if e.op_index == 0:
                    raise ControllerMovedError(str(e)) from None
                continue  # the topic changed meanwhile (CreatePartitions): again
            ctx.topics[tp[0]] = new
            return
        raise KafkaError(f"topic {tp[0]} kept changing; try again",
                         code=ErrorCode.unknown_server_error)


def _bumped(cur: PartitionState, controller_epoch: int) -> PartitionState:
    return PartitionState(cur.leader, cur.leader_epoch + 1, cur.isr, controller_epoch,
                          cur.leader_recovery_state)
