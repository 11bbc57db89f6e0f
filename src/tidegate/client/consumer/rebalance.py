"""The rebalance steps of `group.ConsumerCoordinator` (`RebalanceSteps`, its base class).

Classic protocol: as in Kafka, a rebalance advances only inside `poll()`: poll runs
the *prepare* step (auto-commit, then revoke — everything with eager assignors, only
unsubscribed topics with cooperative-sticky — or report partitions lost if the member
was reset), starts the JoinGroup/SyncGroup task (in the background, so a poll's timeout
never cuts a JoinGroup short, and still-owned partitions keep being consumed meanwhile)
and, in the poll that finds it finished, runs the *complete* step: revoke what moved
(cooperative; auto-committing it first), assign, call the listener, and rejoin at once
if anything was revoked (KIP-429's second round). Listener callbacks therefore run
inside poll/close/unsubscribe, never while the application processes records. Before
that, `_check_topics` asks for a rejoin when a pattern subscription matches other
topics or a subscribed topic's partition count changed.

``group.protocol=consumer`` (KIP-848): `consumer_protocol.ConsumerProtocolMember`
reconciles and calls the `_revoke`, `_lose` and `_assign` steps here.

Newly assigned partitions wait (``blocked``, no position) until their committed offsets
are fetched with OffsetFetch (`_refresh_committed`); without a committed offset they
start where ``auto.offset.reset`` says. A `seek()` in ``on_partitions_assigned`` wins.

The state these steps use is the coordinator's, created by
`ConsumerCoordinator.__init__`; it is declared here for the type checker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from tidegate.assignors import PartitionAssignor
from tidegate.assignors.registry import RebalanceProtocol
from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.commits import GroupCommits
from tidegate.client.consumer.coordinator_link import CoordinatorLink
from tidegate.client.consumer.group_offsets import FencedInstanceIdError
from tidegate.client.consumer.heartbeat import HeartbeatTask
from tidegate.client.consumer.join import JoinOutcome, join_and_sync
from tidegate.client.consumer.listener import invoke
from tidegate.client.consumer.membership import Membership, MemberState, diff, join_protocols
from tidegate.client.consumer.state import Assignment
from tidegate.client.consumer.subscription import SubscriptionState
from tidegate.client.metadata import MetadataClient
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError

__all__ = ["RebalanceSteps"]

log = logging.getLogger("tidegate.client.consumer.group")


class RebalanceSteps:
    """See the module docstring."""

    config: ConsumerConfig
    group_id: str
    metadata: MetadataClient
    assignment: Assignment
    link: CoordinatorLink
    membership: Membership
    subscription: SubscriptionState
    assignors: list[PartitionAssignor]
    protocol: RebalanceProtocol
    listener: object | None
    wakeup: asyncio.Event  # set when poll() has rebalance work to do
    heartbeat: HeartbeatTask
    commits: GroupCommits
    _apply: Callable[[Iterable[TopicPartition]], None]
    _wake_fetcher: Callable[[], None]
    _join: asyncio.Task[JoinOutcome] | None
    _fatal: BaseException | None
    _callback_error: BaseException | None
    _awaiting: set[TopicPartition]  # need their committed offsets
    _last_assigned: list[TopicPartition]  # for sticky's user data
    _last_generation: int
    _counts: dict[str, int]  # partition counts at the last assignment
    _next_topic_scan: float

    def _set_fatal(self, exc: BaseException) -> None:
        """A fatal group error: raised from every poll from now on."""
        log.error("group %s: fatal: %s", self.group_id, exc)
        self._fatal = exc
        self.wakeup.set()

    async def _check_topics(self, deadline: float) -> None:
        """Pattern subscriptions: rescan the cluster's topics every
        ``metadata.max.age.ms``. Everyone: rejoin when the partition count of a
        subscribed topic changed since the last assignment."""
        now = time.monotonic()
        if self.subscription.has_patterns and now >= self._next_topic_scan:
            try:
                async with asyncio.timeout(max(0.1, deadline - now)):  # not wait_for: 3.11
                    meta = await self.metadata.fetch_all()
            except (KafkaError, TimeoutError) as e:
                log.debug("group %s: topic scan failed: %s", self.group_id, e)
            else:
                self._next_topic_scan = now + self.config.metadata_max_age_ms / 1000
                self.subscription.resolve(meta.topics)
                self.metadata.tracked |= self.subscription.topics
        if self.subscription.changed():
            self.membership.request_rejoin("subscribed topics changed")
        cache = self.metadata.cache
        for topic, count in self._counts.items():
            now_count = cache.partition_count(topic)
            if now_count is not None and now_count != count:
                self._counts = {}
                self.membership.request_rejoin(
                    f"topic {topic} now has {now_count} partitions (had {count})")
                break

    async def _rebalance(self) -> None:
        m = self.membership
        if self._join is None and (m.rejoin_needed or m.state is not MemberState.STABLE):
            await self._prepare()
            if not self.subscription.topics:
                return  # a pattern that matches nothing yet: nothing to join with
            self.metadata.tracked |= self.subscription.topics
            self._join = asyncio.get_running_loop().create_task(join_and_sync(
                self.config, self.link, m, self.subscription.topics, self._protocols,
                self._partition_counts))
            self._join.add_done_callback(lambda _: self.wakeup.set())
        # Do not wait for the join here: the consumer's poll loop waits for records or
        # `wakeup` (set when the task ends), so partitions still owned (cooperative)
        # keep being consumed while the group rebalances.
        if self._join is None or not self._join.done():
            return
        task, self._join = self._join, None
        self.heartbeat.kick()
        try:
            outcome = task.result()
        except asyncio.CancelledError:
            return
        except FencedInstanceIdError as e:
            self._set_fatal(e)  # another instance took our place: never rejoin
            raise
        # Other errors are raised once; the next poll joins again (we are not STABLE).
        await self._complete(outcome)

    def _protocols(self) -> list[dict[str, object]]:
        m = self.membership
        owned = [] if m.partitions_lost else sorted(self.assignment.partitions)
        return join_protocols(self.assignors, self.subscription.topics, self.protocol,
                              owned, m.generation.generation_id, self._last_assigned,
                              self._last_generation, self.config.client_rack)

    async def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        """For the leader's assignment: partition counts of every member's topics."""
        if topics:
            try:
                await self.metadata.refresh(topics)
            except KafkaError as e:
                log.warning("group %s: metadata refresh for the assignment failed: %s",
                            self.group_id, e)
        counts: dict[str, int] = {}
        for topic in topics:
            n = self.metadata.cache.partition_count(topic)
            if n:
                counts[topic] = n
        return counts

    async def _prepare(self) -> None:
        """Before (re)joining: commit, then revoke or report lost (see the module
        docstring)."""
        owned = set(self.assignment.partitions)
        m = self.membership
        if m.partitions_lost:
            m.partitions_lost = False
            if owned:
                await self._release(owned, "on_partitions_lost")
            return
        if owned and self.config.enable_auto_commit and m.generation.valid:
            await self.commits.commit_quietly(self.commits.consumed(owned),
                                              "before rejoining")
        if self.protocol is RebalanceProtocol.EAGER:
            gone = owned
        else:
            gone = {tp for tp in owned if tp.topic not in self.subscription.topics}
        if gone:
            await self._release(gone, "on_partitions_revoked")

    async def _release(self, partitions: set[TopicPartition], callback: str) -> None:
        """Call the listener for `partitions`, then drop them."""
        log.info("group %s: %s %s", self.group_id, callback.removeprefix("on_partitions_"),
                 _names(partitions))
        self._note(await invoke(self.listener, callback, partitions))
        self._apply([tp for tp in self.assignment.partitions if tp not in partitions])
        self._awaiting -= partitions

    async def _complete(self, outcome: JoinOutcome) -> None:
        m = self.membership
        if m.generation != outcome.generation or m.state is not MemberState.STABLE:
            # Reset (by a heartbeat or a commit) after this rebalance finished: its
            # assignment is void; the next poll reports what we own lost and rejoins.
            log.info("group %s: generation %d ended before it was applied", self.group_id,
                     outcome.generation.generation_id)
            return
        self.subscription.joined = outcome.topics
        new = {TopicPartition(t, p) for t, p in outcome.assignment.partitions}
        strays = {tp for tp in new if tp.topic not in self.subscription.topics}
        if strays:
            log.warning("group %s: assigned %s outside the subscription; rejoining",
                        self.group_id, _names(strays))
            m.request_rejoin("assignment does not match the subscription")
            new -= strays
        self._last_assigned = sorted(new)
        self._last_generation = outcome.generation.generation_id
        if m.partitions_lost:  # reset during the join: what we had is gone, all of it
            m.partitions_lost = False
            if self.assignment.partitions:
                await self._release(set(self.assignment.partitions), "on_partitions_lost")
        revoked, added = diff(self.assignment.partitions, new)
        if revoked:
            await self._revoke(revoked)
        self._take(new, added)
        log.info("group %s: generation %d (%s, %s): assigned %s%s", self.group_id,
                 outcome.generation.generation_id, outcome.generation.protocol,
                 "leader" if outcome.leader else "follower", _names(new),
                 f" (added {_names(added)})" if added != new else "")
        self._note(await invoke(self.listener, "on_partitions_assigned", added))
        if revoked and self.protocol is RebalanceProtocol.COOPERATIVE:
            m.request_rejoin("partitions were revoked; they can be reassigned now")
            self.wakeup.set()
        self._counts = {t: n for t in self.subscription.topics
                        if (n := self.metadata.cache.partition_count(t) or 0)}
        self.commits.next_auto_commit = (
            time.monotonic() + self.config.auto_commit_interval_ms / 1000)

    # -- group.protocol=consumer: the reconciliation steps (consumer_protocol.py) -------

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        if self.config.enable_auto_commit:
            await self.commits.commit_quietly(self.commits.consumed(partitions),
                                              "before revoking")
        await self._release(partitions, "on_partitions_revoked")

    async def _lose(self, partitions: set[TopicPartition]) -> None:
        self.membership.partitions_lost = False
        await self._release(partitions, "on_partitions_lost")

    async def _assign(self, new: set[TopicPartition], added: set[TopicPartition]) -> None:
        self._take(new, added)
        log.info("group %s: epoch %d: assigned %s", self.group_id,
                 self.membership.generation.generation_id, _names(new))
        self._note(await invoke(self.listener, "on_partitions_assigned", added))
        self.commits.next_auto_commit = (
            time.monotonic() + self.config.auto_commit_interval_ms / 1000)

    def _take(self, new: set[TopicPartition], added: set[TopicPartition]) -> None:
        """Make `new` the assignment; an added partition without a position waits for its
        committed offset before it is fetched."""
        self._apply(sorted(new))
        for tp in added:
            st = self.assignment.partitions[tp]
            if st.position is None:
                st.blocked = True
                self._awaiting.add(tp)

    def _note(self, error: BaseException | None) -> None:
        if error is not None and self._callback_error is None:
            self._callback_error = error

    # -- committed offsets for new partitions ------------------------------------------

    async def _refresh_committed(self, deadline: float) -> None:
        pending = {tp for tp in self._awaiting
                   if (st := self.assignment.partitions.get(tp)) is not None
                   and st.blocked and st.position is None}
        self._awaiting = set(pending)
        if not pending:
            return
        try:
            found = await self.commits.fetch(
                pending, max(deadline, time.monotonic() + 0.5), partial=True)
        except KafkaError as e:
            log.debug("group %s: fetching committed offsets failed: %s", self.group_id, e)
            return
        for tp in pending:
            st = self.assignment.partitions.get(tp)
            if tp not in found or st is None or not st.blocked or st.position is not None:
                continue
            committed = found[tp]
            if committed is not None:
                st.position = committed.offset
            st.blocked = False  # no committed offset: auto.offset.reset decides
            self._awaiting.discard(tp)
        self._wake_fetcher()

    async def ensure_positions(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch committed offsets now for those of `partitions` still waiting."""
        if self._awaiting & set(partitions):
            await self._refresh_committed(
                time.monotonic() + self.config.default_api_timeout_ms / 1000)


def _names(tps: Iterable[TopicPartition]) -> str:
    items = sorted(tps)
    if not items:
        return "nothing"
    text = ", ".join(f"{t}-{p}" for t, p in items[:20])
    return text + (f" and {len(items) - 20} more" if len(items) > 20 else "")
