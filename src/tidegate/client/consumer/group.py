"""`ConsumerCoordinator`: the consumer's side of a consumer group.

With ``group.protocol=consumer`` (KIP-848) the broker assigns and
`consumer_protocol.ConsumerProtocolMember` heartbeats and reconciles (inside poll, with
the listener, commits and committed-offset fetches below); otherwise the classic
protocol, as follows.

The consumer owns one when ``group.id`` is set. It finds the group coordinator
(`coordinator_link`), joins and syncs (`join`), heartbeats (`heartbeat`), applies
assignments, calls the rebalance listener (`listener`), and commits and fetches
offsets (`commits`). `membership` holds the state machine.

As in Kafka, a rebalance advances only inside `poll()`, and listener callbacks run
inside poll/close/unsubscribe, never while the application processes records; the
steps (prepare, join, complete; KIP-848's revoke/lose/assign; fetching the committed
offsets of new partitions) are `rebalance.RebalanceSteps`, this class's base.
Heartbeats run on their own task whatever the application does. This module keeps
the coordinator's state, the subscription, `poll()`, commits and leaving.

``enable.auto.commit`` commits every position every ``auto.commit.interval.ms`` from
poll, before every rejoin, before cooperative revocations and on close (see `commits`
for `commit()`, `commit_async()` and `committed()`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from tidegate.assignors import lookup, rebalance_protocol
from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.commits import CommitCallback, GroupCommits, Offsets
from tidegate.client.consumer.consumer_protocol import ConsumerProtocolMember
from tidegate.client.consumer.coordinator_link import LEAVE_GROUP, CoordinatorLink
from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.client.consumer.heartbeat import HeartbeatTask
from tidegate.client.consumer.join import JoinOutcome
from tidegate.client.consumer.membership import Membership
from tidegate.client.consumer.rebalance import RebalanceSteps
from tidegate.client.consumer.state import Assignment
from tidegate.client.consumer.subscription import SubscriptionState
from tidegate.client.metadata import MetadataClient
from tidegate.client.net import NetworkClient
from tidegate.client.tasks import cancel_and_wait
from tidegate.client.types import ConsumerGroupMetadata, TopicPartition
from tidegate.common.errors import KafkaError

__all__ = ["CommitCallback", "ConsumerCoordinator", "ConsumerGroupMetadata"]

log = logging.getLogger("tidegate.client.consumer.group")


class ConsumerCoordinator(RebalanceSteps):
    """See the module docstring. `apply_assignment` replaces the consumer's partitions
    (dropping buffered data of removed ones); `wake_fetcher` nudges the fetcher."""

    def __init__(self, config: ConsumerConfig, net: NetworkClient, metadata: MetadataClient,
                 assignment: Assignment, *,
                 apply_assignment: Callable[[Iterable[TopicPartition]], None],
                 wake_fetcher: Callable[[], None]) -> None:
        assert config.group_id, "a ConsumerCoordinator needs group.id"
        self.config = config
        self.group_id = config.group_id
        self.metadata = metadata
        self.assignment = assignment
        self._apply = apply_assignment
        self._wake_fetcher = wake_fetcher
        self.link = CoordinatorLink(config, net, self.group_id)
        self.membership = Membership(self.group_id, config.group_instance_id)
        self.subscription = SubscriptionState(config.exclude_internal_topics)
        self.assignors = [lookup(n) for n in config.partition_assignment_strategy]
        self.protocol = rebalance_protocol(self.assignors)
        self.listener: object | None = None
        self.wakeup = asyncio.Event()  # set when poll() has rebalance work to do
        self.heartbeat = HeartbeatTask(
            config, self.link, self.membership, last_poll=self._poll_clock,
            on_poll_timeout=self._poll_timeout, on_fatal=self._set_fatal,
            wake_poll=self.wakeup.set)
        self._join: asyncio.Task[JoinOutcome] | None = None
        self._fatal: BaseException | None = None
        self._callback_error: BaseException | None = None
        self._awaiting: set[TopicPartition] = set()  # need their committed offsets
        self._last_assigned: list[TopicPartition] = []  # for sticky's user data
        self._last_generation = -1
        self._counts: dict[str, int] = {}  # partition counts at the last assignment
        self._last_poll = time.monotonic()
        self._polling = 0
        self._next_topic_scan = 0.0
        self._closed = False
        self.kip848 = ConsumerProtocolMember(
            config, self.link, self.membership, self.subscription, metadata,
            lambda: set(self.assignment.partitions), revoke=self._revoke,
            lose=self._lose, assign=self._assign, last_poll=self._poll_clock,
            on_fatal=self._set_fatal, wake_poll=self.wakeup.set,
        ) if config.group_protocol == "consumer" else None
        self.commits = GroupCommits(
            config, self.link, self.membership, assignment,
            subscribed=lambda: self.subscription.active,
            joining=lambda: self._join is not None or bool(self.kip848 and self.kip848.joining),
            on_fatal=self._set_fatal, wake_poll=self.wakeup.set)

    # -- subscription ------------------------------------------------------------------

    def subscribe(self, topics: Any, listener: object | None = None) -> None:
        """Set the subscription (see `SubscriptionState.subscribe`); the join happens
        in the next poll."""
        self.subscription.subscribe(topics)
        self.listener = listener
        self.metadata.tracked |= self.subscription.literal
        self._next_topic_scan = 0.0
        self.membership.request_rejoin("subscription changed")
        if self.kip848 is not None:
            self.kip848.subscription_changed()
        self.wakeup.set()

    async def unsubscribe(self) -> None:
        """Give up every partition (committing and revoking first) and leave."""
        if self._join is not None:
            self._join.cancel()
            self._join = None
        await self._release_all("unsubscribing")
        await self._leave("the consumer unsubscribed")
        self.subscription.unsubscribe()

    # -- poll --------------------------------------------------------------------------

    def _poll_clock(self) -> float | None:
        return None if self._polling else self._last_poll

    def poll_started(self) -> None:
        self._polling += 1
        self._last_poll = time.monotonic()

    def poll_finished(self) -> None:
        self._polling -= 1
        self._last_poll = time.monotonic()

    def polled(self) -> None:
        """The application polled without the loop (the blocking consumer's staged
        poll, `staging`): one float store, safe from the application's thread."""
        self._last_poll = time.monotonic()

    def timed_work_at(self) -> float:
        """When a poll next has timed group work to do (the auto-commit, a pattern
        subscription's topic scan), as of the last poll; inf if none."""
        at = self.commits.next_auto_commit if self.config.enable_auto_commit else math.inf
        if self.subscription.active and self.subscription.has_patterns:
            at = min(at, self._next_topic_scan)
        return at

    async def poll(self, deadline: float) -> None:
        """Advance group membership; see the module docstring. Raises fatal group
        errors and exceptions from listener callbacks."""
        self.wakeup.clear()
        if self._fatal is not None:
            raise self._fatal
        if self.subscription.active and self.kip848 is not None:
            self.kip848.start()
            await self.kip848.reconcile()
            await self._refresh_committed(deadline)
        elif self.subscription.active:
            self.heartbeat.start()
            await self._check_topics(deadline)
            await self._rebalance()
            await self._refresh_committed(deadline)
        self.commits.auto_commit()
        if self._callback_error is not None:
            err, self._callback_error = self._callback_error, None
            raise err

    async def _poll_timeout(self) -> None:
        if self._join is not None:
            self._join.cancel()
            self._join = None
        await self._leave("consumer poll timeout has expired (max.poll.interval.ms)")
        # Someone else may own our partitions by now: the next poll reports them lost.
        self.membership.partitions_lost = bool(self.assignment.partitions)
        self.membership.request_rejoin("consumer poll timeout has expired")
        self.wakeup.set()

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout_ms: int | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.commits.committed(partitions, timeout_ms)

    # -- commits (see commits.GroupCommits) -----------------------------------------

    async def commit(self, offsets: Offsets | None = None, timeout_ms: int | None = None
                     ) -> None:
        await self.commits.commit(offsets, timeout_ms)

    def commit_async(self, offsets: Offsets | None = None,
                     callback: CommitCallback | None = None) -> asyncio.Task[None]:
        return self.commits.commit_async(offsets, callback)

    # -- leaving -----------------------------------------------------------------------

    async def _release_all(self, why: str) -> None:
        owned = set(self.assignment.partitions)
        if not owned or not self.subscription.active:
            return
        if self.membership.partitions_lost or not self.membership.generation.valid:
            self.membership.partitions_lost = False
            await self._release(owned, "on_partitions_lost")
            return
        if self.config.enable_auto_commit:
            await self.commits.commit_quietly(self.commits.consumed(owned), why)
        await self._release(owned, "on_partitions_revoked")

    async def _leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only: a static member's partitions wait for it
        until ``session.timeout.ms``), then forget the membership."""
        m = self.membership
        if self.kip848 is not None:
            await self.kip848.leave(reason)
            return
        if m.group_instance_id is None and m.member_id and self.link.known:
            try:
                await self.link.request(LEAVE_GROUP, {
                    "group_id": self.group_id, "member_id": m.member_id,
                    "members": [{"member_id": m.member_id, "group_instance_id": None,
                                 "reason": reason}],
                }, timeout_ms=self.config.request_timeout_ms)
                log.info("group %s: member %s left: %s", self.group_id, m.member_id, reason)
            except KafkaError as e:
                log.debug("group %s: LeaveGroup failed: %s", self.group_id, e)
        m.left(keep_member_id=m.group_instance_id is not None)

    async def close(self) -> None:
        """Commit (auto-commit), revoke, wait for async commits, leave; all bounded by
        ``request.timeout.ms``."""
        if self._closed:
            return
        self._closed = True
        if self._join is not None:
            await cancel_and_wait(self._join, self.config.request_timeout_ms / 1000)
            self._join = None
        try:
            if self.subscription.active:
                await self._release_all("on close")
            elif self.config.enable_auto_commit:
                await self.commits.commit_quietly(self.commits.consumed(), "on close")
            await self.commits.wait_pending(self.config.request_timeout_ms / 1000)
            if self.subscription.active:
                await self._leave("the consumer is closing")
        finally:
            await self.heartbeat.stop()
            if self.kip848 is not None:
                await self.kip848.stop()
            await self.link.close()
            if self._callback_error is not None:
                log.error("group %s: rebalance listener failed while closing: %r",
                          self.group_id, self._callback_error)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The current generation and member id (KIP-447): a transactional offset
        commit carrying them is refused (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) once
        this member has been rebalanced away, which fences a zombie processor."""
        g = self.membership.generation
        return ConsumerGroupMetadata(self.group_id, g.generation_id, g.member_id,
                                     self.membership.group_instance_id)
