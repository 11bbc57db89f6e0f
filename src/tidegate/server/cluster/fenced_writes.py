"""The controller's writes, each one fenced: a transaction opening with a check of
/controller_epoch at the version this controller wrote when elected, so that a deposed
controller's write fails (ControllerMovedError) instead of overwriting a newer decision.

- `update_state`: read a partition's state, decide, write it conditional on the version
  read; if the leader changed the ISR in between (BadVersion on the state), re-read and
  decide again (Kafka's controller also re-reads states before electing);
- `create_states`: a new topic's (or new partitions') first states, with the missing
  `partitions` parents, in one transaction;
- `delete_topic`: a topic's znodes (tree, config, deletion request) in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidegate.replication.controller_logic import (
    ControllerContext,
    VersionedState,
    delete_topic_ops,
    initial_state,
)
from tidegate.replication.zk_ops import Create, ZkOp
from tidegate.replication.znodes import (
    CONTROLLER_EPOCH,
    PartitionState,
    TopicPartition,
    delete_topic_path,
    partition_path,
    partition_state_path,
    partitions_path,
    topic_config_path,
    topic_path,
)
from tidegate.server.cluster.errors import (
    BadVersionError,
    ControllerMovedError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZkError,
)
from tidegate.server.cluster.reads import ClusterReader
from tidegate.server.cluster.zk import ZkClient

__all__ = ["FencedWriter"]

log = logging.getLogger(__name__)

_RETRIES = 5


def _fenced_out(e: ZkError) -> None:
    """A failure of the transaction's first operation (the /controller_epoch check)
    means another controller was elected since."""
    if e.op_index == 0:
        raise ControllerMovedError(str(e), path=CONTROLLER_EPOCH) from None


class FencedWriter:
    def __init__(self, zk: ZkClient, reads: ClusterReader) -> None:
        self.zk = zk
        self.reads = reads

    async def update_state(
        self,
        ctx: ControllerContext,
        tp: TopicPartition,
        decide: Callable[[PartitionState], PartitionState | None],
    ) -> PartitionState | None:
        """Read the partition's state, decide, and write conditionally (fenced by the
        controller epoch, conditional on the state's version); on a concurrent change
        re-read and decide again. Returns what was written (None: nothing)."""
        for _ in range(_RETRIES):
            vs = await self.reads.state(tp)
            if vs is None:
                ctx.states.pop(tp, None)
                return None
            new = decide(vs.state)
            if new is None or new == vs.state:
                ctx.states[tp] = vs
                return None
            try:
                results = await self.zk.transaction(ctx.state_write(tp, new, vs.zk_version))
            except BadVersionError as e:
                _fenced_out(e)
                continue  # the leader changed the ISR meanwhile: decide again
            except NoNodeError as e:
                _fenced_out(e)
                ctx.states.pop(tp, None)
                return None
            ctx.states[tp] = VersionedState(new, results[-1].version)  # type: ignore[union-attr]
            old = vs.state
            log.info(
                "%s-%d: leader %d -> %d, leader epoch %d, isr %s -> %s (controller epoch %d)",
                tp[0],
                tp[1],
                old.leader,
                new.leader,
                new.leader_epoch,
                list(old.isr),
                list(new.isr),
                ctx.epoch,
            )
            return new
        log.warning("%s-%d: state kept changing under the controller; later", *tp)
        return None

    async def create_states(self, ctx: ControllerContext, topic: str, parts: list[int]) -> None:
        """First states of a topic's new partitions, in one fenced transaction (with the
        `partitions` parents that are missing)."""
        for _ in range(_RETRIES):
            try:
                existing_parts = await self.zk.get_children(partitions_path(topic))
                existing = {partitions_path(topic)}
            except NoNodeError:
                existing_parts, existing = [], set()
            existing |= {f"{partitions_path(topic)}/{p}" for p in existing_parts}
            ops: list[ZkOp] = []
            planned: dict[int, PartitionState] = {}
            for p in parts:
                if f"{partitions_path(topic)}/{p}" in existing:
                    vs = await self.reads.state((topic, p))
                    if vs is not None:
                        ctx.states[(topic, p)] = vs
                        continue
                new = initial_state(ctx.assignment((topic, p)), ctx.live_ids(), ctx.epoch)
                if new is None:
                    self.reads.say_once(
                        ("offline-new", topic, p, tuple(sorted(ctx.live_brokers))),
                        "%s-%d: none of its replicas %s is live; no leader until one is",
                        topic,
                        p,
                        list(ctx.assignment((topic, p))),
                    )
                    continue
                planned[p] = new
                for path in (partitions_path(topic), partition_path(topic, p)):
                    if path not in existing:
                        ops.append(Create(path))
                        existing.add(path)
                ops.append(Create(partition_state_path(topic, p), new.encode()))
            if not planned:
                return
            try:
                await self.zk.transaction(ctx.fenced(ops))
            except (BadVersionError, NoNodeError) as e:
                _fenced_out(e)
                if isinstance(e, NoNodeError) and await self.zk.exists(topic_path(topic)) is None:
                    return  # the topic was deleted meanwhile
                continue
            except NodeExistsError:
                continue  # raced with another writer: look again
            for p, new in planned.items():
                ctx.states[(topic, p)] = VersionedState(new, 0)
            log.info(
                "%s: created %d partition states (partitions %s)",
                topic,
                len(planned),
                sorted(planned),
            )
            return

    async def delete_topic(self, ctx: ControllerContext, name: str, *, remove_topic: bool) -> bool:
        """Delete topic `name`'s znodes and its /admin/delete_topics request (only the
        request if `remove_topic` is false: delete.topic.enable=false). True if the
        topic's znodes were deleted."""
        for _ in range(_RETRIES):
            existing = [delete_topic_path(name)]
            if remove_topic:
                existing += await self.reads.tree(topic_path(name))
                if await self.zk.exists(topic_config_path(name)) is not None:
                    existing.append(topic_config_path(name))
            try:
                await self.zk.transaction(delete_topic_ops(ctx, name, existing))
            except (BadVersionError, NoNodeError, NotEmptyError) as e:
                _fenced_out(e)
                continue  # the tree changed while we listed it
            return remove_topic and len(existing) > 1
        log.warning("topic %s: could not delete its znodes (they kept changing); later", name)
        return False
