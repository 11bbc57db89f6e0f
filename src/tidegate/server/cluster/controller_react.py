"""`ControllerReactions`: what the active controller does with what ZooKeeper says —
reading everything into the `ControllerContext` on election or reconnection (re-arming
every watch), and turning broker, topic and deletion changes into partition state
writes (`write_state`, fenced by the controller epoch; decisions from
`replication/controller_logic.py`). A base of `Controller` (`controller.py` has the
election and the event loop that calls these), whose state it shares.

Every method here runs in the controller's one event task; `_ctx` raises
ControllerMovedError once this broker is no longer controller, which that task turns
into a resignation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import TYPE_CHECKING, TypeVar

from tidegate.replication.controller_logic import ControllerContext, broker_change_decision
from tidegate.replication.znodes import (
    DELETE_TOPICS,
    NO_LEADER,
    TOPICS,
    PartitionState,
    TopicAssignment,
    TopicPartition,
)
from tidegate.server.cluster.controller_calls import ControllerCalls
from tidegate.server.cluster.errors import ControllerMovedError
from tidegate.server.cluster.fenced_writes import FencedWriter
from tidegate.server.cluster.reads import ClusterReader
from tidegate.server.cluster.registration import ensure_persistent_paths
from tidegate.server.cluster.zk import Watch, ZkClient

__all__ = ["ControllerReactions"]

# the controller's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.server.cluster.controller")

T = TypeVar("T")


class ControllerReactions(ControllerCalls):
    zk: ZkClient
    reads: ClusterReader
    writer: FencedWriter
    unclean_default: bool
    delete_topic_enable: bool

    if TYPE_CHECKING:

        def _watch(self, tag: Hashable) -> Watch: ...

    # -- reading ZooKeeper into the context ----------------------------------------------

    async def _load_and_reconcile(self) -> None:
        """On election (or reconnection): read everything, re-arm every watch, then fix
        what changed while nobody was watching."""
        ctx = self._ctx()
        await ensure_persistent_paths(self.zk)
        ctx.live_brokers, ctx.broker_epochs = await self.reads.brokers(self._watch("brokers"))
        names = await self.zk.get_children(TOPICS, self._watch("topics"))
        ctx.topics = {}
        ctx.states = {}
        for name, assignment in zip(names, await self._read_topics(names)):
            if assignment is not None:
                ctx.topics[name] = assignment
        tps = ctx.partitions()
        ctx.states = await self.reads.states(tps)
        log.info(
            "controller %d loaded %d live brokers %s, %d topics, %d partition states",
            self.broker_id,
            len(ctx.live_brokers),
            sorted(ctx.live_brokers),
            len(ctx.topics),
            len(ctx.states),
        )
        await self._reelect([tp for tp in tps if tp in ctx.states])
        await self._create_missing_states(ctx.topics)
        await self._on_topic_deletions()
        await self.reassign.resume(ctx)  # reassignments a previous controller started

    async def _read_topics(self, names: list[str]) -> list[TopicAssignment | None]:
        """The topics' assignments, (re-)arming each topic znode's data watch."""
        return await self._gather(self.reads.topic(n, self._watch(("topic", n))) for n in names)

    async def _unclean(self, topic: str) -> bool:
        """unclean.leader.election.enable for `topic`: its override, else the default."""
        value = (await self.reads.topic_config(topic)).get("unclean.leader.election.enable")
        return self.unclean_default if value is None else value.strip().lower() == "true"

    # -- reacting --------------------------------------------------------------------------

    async def _on_brokers_change(self) -> None:
        ctx = self._ctx()
        before = ctx.broker_epochs
        ctx.live_brokers, ctx.broker_epochs = await self.reads.brokers(self._watch("brokers"))
        dead = set(before) - set(ctx.broker_epochs)
        born = set(ctx.broker_epochs) - set(before)
        bounced = {
            b for b in set(before) & set(ctx.broker_epochs) if before[b] != ctx.broker_epochs[b]
        }
        ctx.shutting_down -= dead | bounced  # gone, or back as a new incarnation
        if not (dead or born or bounced):
            return
        log.info(
            "controller %d: brokers dead %s, new %s, restarted %s; live now %s",
            self.broker_id,
            sorted(dead),
            sorted(born),
            sorted(bounced),
            sorted(ctx.live_brokers),
        )
        if bounced:
            # A restarted broker lost its in-memory replica state: treat it as dead then
            # back (Kafka does), so it does not stay leader on a possibly shorter log.
            saved = ctx.live_brokers
            ctx.live_brokers = {b: i for b, i in saved.items() if b not in bounced}
            await self._reelect(ctx.partitions_on(bounced))
            ctx.live_brokers = saved
        touched = ctx.partitions_on(dead | born | bounced)
        offline = [tp for tp, vs in ctx.states.items() if vs.state.leader == NO_LEADER]
        await self._reelect(sorted(set(touched) | set(offline)))
        await self._create_missing_states(ctx.topics)

    async def _reelect(self, tps: Iterable[TopicPartition]) -> None:
        ctx = self._ctx()
        live = ctx.live_ids()  # a broker in controlled shutdown is not elected again
        todo = [tp for tp in tps if tp in ctx.states]
        # unclean.leader.election.enable only matters where the leader is gone; reading a
        # topic's config costs a round trip, so only those topics pay it.
        leaderless = {tp[0] for tp in todo if ctx.states[tp].state.leader not in live}
        unclean = {t: await self._unclean(t) for t in sorted(leaderless)}

        def decide(tp: TopicPartition) -> Callable[[PartitionState], PartitionState | None]:
            return lambda cur: broker_change_decision(
                ctx.assignment(tp), cur, live, unclean.get(tp[0], False), ctx.epoch
            )

        await self._gather(self.write_state(tp, decide(tp)) for tp in todo)

    async def write_state(
        self, tp: TopicPartition, decide: Callable[[PartitionState], PartitionState | None]
    ) -> PartitionState | None:
        """Decide `tp`'s next state from its current one and write it, fenced and
        conditional (see `FencedWriter.update_state`). For elections the lead's admin
        paths (preferred leader, controlled shutdown) ask for, too."""
        return await self.writer.update_state(self._ctx(), tp, decide)

    async def _on_topics_change(self, changed: set[str]) -> None:
        ctx = self._ctx()
        names = set(await self.zk.get_children(TOPICS, self._watch("topics")))
        for gone in set(ctx.topics) - names:
            self._forget_topic(gone)
        fresh = sorted((names - set(ctx.topics)) | (changed & names))
        updated: dict[str, TopicAssignment] = {}
        for name, a in zip(fresh, await self._read_topics(fresh)):
            if a is None:
                self._forget_topic(name)
            else:
                ctx.topics[name] = updated[name] = a
        await self._create_missing_states(updated)
        # a reassignment written to a topic znode (by a tool, or by us) goes on from here
        await self.reassign.resume(ctx, [tp for tp in ctx.partitions() if tp[0] in updated])

    def _forget_topic(self, name: str) -> None:
        ctx = self._ctx()
        ctx.topics.pop(name, None)
        for tp in [tp for tp in ctx.states if tp[0] == name]:
            del ctx.states[tp]

    async def _create_missing_states(self, topics: dict[str, TopicAssignment]) -> None:
        ctx = self._ctx()
        pending = {
            name: [p for p in sorted(a.partitions) if (name, p) not in ctx.states]
            for name, a in topics.items()
        }
        await self._gather(
            self.writer.create_states(ctx, name, parts) for name, parts in pending.items() if parts
        )

    async def _on_topic_deletions(self) -> None:
        ctx = self._ctx()
        names = await self.zk.get_children(DELETE_TOPICS, self._watch("delete_topics"))
        for name in names:
            if not self.delete_topic_enable:
                self.reads.say_once(
                    ("delete-disabled", name),
                    "ignoring the request to delete topic %s: delete.topic.enable is false",
                    name,
                )
            if await self.writer.delete_topic(ctx, name, remove_topic=self.delete_topic_enable):
                self._forget_topic(name)
                log.info("deleted topic %s", name)

    # -- helpers --------------------------------------------------------------------------

    def _ctx(self) -> ControllerContext:
        if self.ctx is None:
            raise ControllerMovedError("not the controller")
        return self.ctx

    async def _gather(self, aws: Iterable[Awaitable[T]]) -> list[T]:
        return list(await asyncio.gather(*aws))
