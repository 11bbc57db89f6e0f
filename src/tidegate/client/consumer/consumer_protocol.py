"""`group.protocol=consumer` (KIP-848): the heartbeat loop and reconciliation of a member.

Under the consumer protocol the broker computes assignments; the member only
heartbeats (ConsumerGroupHeartbeat) and *reconciles*: it applies the assignment the
broker sends, revoking before it takes new partitions, and reports what it owns.

The heartbeat loop (`_run`, its own task) sends a heartbeat every interval the broker
asks for (``group.consumer.heartbeat.interval.ms``), and at once after a change:

- the first heartbeat (epoch 0) and the one after a subscription change carry the full
  member: subscribed topic names, the regex (patterns are sent to the broker, which
  resolves them: ``SubscribedTopicRegex``, internal topics included, which the member
  leaves unfetched under ``exclude.internal.topics``), ``max.poll.interval.ms`` as the rebalance
  timeout, ``group.instance.id``, ``client.rack``, ``group.remote.assignor``, and the
  owned partitions; later heartbeats send only the epoch, plus the owned partitions
  when they changed (the acknowledgement of a reconciliation);
- a new assignment in a response is handed to `poll()` (`reconcile`), which — as the
  classic protocol's rebalance steps — runs only inside poll: commit (auto-commit) and
  revoke what is no longer assigned (``on_partitions_revoked``), then assign the rest
  (``on_partitions_assigned`` for the new ones), then the loop acknowledges;
- FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the member's partitions are *lost*; poll
  calls ``on_partitions_lost`` and the member rejoins with epoch 0 (same member id);
- coordinator errors look the coordinator up again; other non-retriable errors
  (UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, UNRELEASED_INSTANCE_ID, a
  classic group's GROUP_ID_NOT_FOUND, authorization) are fatal, raised by poll;
- if the application does not poll for ``max.poll.interval.ms`` the member leaves
  (epoch -1) and its partitions are lost; the next poll rejoins;
- `leave` (close, unsubscribe) sends epoch -1, or -2 for a static member (its
  partitions wait for it until the broker's session timeout).

Commits carry the member epoch as their generation (`Membership.generation`), so
OffsetCommit and KIP-447's TxnOffsetCommit are fenced by the broker when stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.coordinator_link import CONSUMER_GROUP_HEARTBEAT, CoordinatorLink
from tidegate.client.consumer.group_offsets import COORDINATOR_ERRORS, group_error
from tidegate.client.consumer.membership import Generation, Membership, MemberState
from tidegate.client.consumer.subscription import SubscriptionState
from tidegate.client.metadata import MetadataClient
from tidegate.client.tasks import cancel_and_wait
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError

__all__ = ["ConsumerProtocolMember", "Phase", "subscription_regex"]

log = logging.getLogger("tidegate.client.consumer.group")

LEAVE, STATIC_LEAVE = -1, -2
Owned = dict[uuid.UUID, frozenset[int]]


class Phase(enum.Enum):
    IDLE = "idle"  # not subscribed, or left
    JOINING = "joining"  # epoch 0 to send
    MEMBER = "member"  # has an epoch
    LOST = "lost"  # fenced or timed out: poll reports the partitions lost, then rejoins


def subscription_regex(sub: SubscriptionState) -> str | None:
    """The subscription's patterns as one regex for the broker (which matches whole
    names): a compiled pattern matches whole names already; a ``^``-string is a search,
    as in librdkafka, so it may be followed by anything."""
    parts = [p.pattern if whole else f".*(?:{p.pattern}).*" for p, whole in sub.patterns]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "|".join(f"(?:{p})" for p in parts)


class ConsumerProtocolMember:
    """See the module docstring. The hooks come from `group.ConsumerCoordinator`:
    `revoke(partitions)` commits and revokes, `lose(partitions)` reports them lost,
    `assign(all, added)` applies the assignment and calls the listener."""

    def __init__(self, config: ConsumerConfig, link: CoordinatorLink, membership: Membership,
                 subscription: SubscriptionState, metadata: MetadataClient,
                 owned: Callable[[], set[TopicPartition]], *,
                 revoke: Callable[[set[TopicPartition]], Awaitable[None]],
                 lose: Callable[[set[TopicPartition]], Awaitable[None]],
                 assign: Callable[[set[TopicPartition], set[TopicPartition]], Awaitable[None]],
                 last_poll: Callable[[], float | None],
                 on_fatal: Callable[[BaseException], None],
                 wake_poll: Callable[[], None]) -> None:
        self.config = config
        self.link = link
        self.membership = membership
        self.subscription = subscription
        self.metadata = metadata
        self._owned = owned
        self._revoke, self._lose, self._assign = revoke, lose, assign
        self._last_poll = last_poll
        self._on_fatal = on_fatal
        self._wake_poll = wake_poll
        self.phase = Phase.IDLE
        self.epoch = 0
        self.interval = config.heartbeat_interval_ms / 1000  # until the broker says
        self.target: Owned | None = None  # received, not reconciled yet
        self.acked: Owned | None = None  # owned partitions to report (None: unchanged)
        self._full = True  # send every field next time
        self._regex_sent = False  # the broker holds a regex of ours
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def joining(self) -> bool:
        return self.phase is Phase.JOINING

    def start(self) -> None:
        if self.phase is Phase.IDLE:
            self._join("joining")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def subscription_changed(self) -> None:
        self._full = True
        if self.phase is Phase.IDLE:
            self._join("subscribed")
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    def _join(self, why: str) -> None:
        log.info("group %s: %s (consumer protocol)", self.membership.group_id, why)
        self.phase, self.epoch, self._full = Phase.JOINING, 0, True
        self.target, self.acked = None, {}
        m = self.membership
        if not m.at(MemberState.PREPARING_REBALANCE):
            if not m.at(MemberState.UNJOINED):
                m.left(keep_member_id=True)
            m.begin_join()
        self._wake.set()

    async def leave(self, reason: str) -> None:
        """Leave the group (epoch -1; -2 for a static member), then forget the epoch."""
        if self.phase in (Phase.MEMBER, Phase.JOINING) and self.membership.member_id:
            static = self.membership.group_instance_id is not None
            try:
                await self._send(STATIC_LEAVE if static else LEAVE, full=False,
                                 timeout_ms=self.config.request_timeout_ms)
                log.info("group %s: member %s left: %s", self.membership.group_id,
                         self.membership.member_id, reason)
            except KafkaError as e:
                log.debug("group %s: leaving failed: %s", self.membership.group_id, e)
        self.phase, self.epoch, self.target = Phase.IDLE, 0, None
        if not self.membership.at(MemberState.UNJOINED):
            self.membership.left(keep_member_id=True)

    # -- poll: reconciliation ----------------------------------------------------------

    async def reconcile(self) -> None:
        """Apply what the heartbeat loop received (see the module docstring)."""
        if self.phase is Phase.LOST:
            owned = self._owned()
            if owned:
                await self._lose(owned)
            self._join("rejoining after losing the partitions")
            return
        if self.target is None or self.phase is not Phase.MEMBER:
            return
        target = self.target
        names = self.metadata.cache.names_by_id
        if any(tid not in names for tid in target):
            try:
                await self.metadata.fetch_all()
            except KafkaError as e:
                log.debug("group %s: metadata for the assignment: %s",
                          self.membership.group_id, e)
            if any(tid not in names for tid in target):
                return  # unknown topic ids: try again at the next poll
        # the broker's regex matches internal topics too (as Kafka's); with
        # exclude.internal.topics the member leaves them unfetched, and still
        # acknowledges the whole assignment (`target`), as the broker expects
        new = {TopicPartition(names[tid], p) for tid, ps in target.items() for p in ps
               if not self.subscription.excludes(names[tid])}
        self.metadata.tracked |= {tp.topic for tp in new}
        if self.subscription.has_patterns:
            self.subscription.resolve({tp.topic for tp in new})
        owned = self._owned()
        revoked = owned - new
        if revoked:
            await self._revoke(revoked)
        if self.target is not target or self.phase is not Phase.MEMBER:
            return  # fenced or a newer assignment while the listener ran
        await self._assign(new, new - owned)
        self.target, self.acked = None, target
        self._wake.set()  # acknowledge now

    # -- the heartbeat loop ------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            try:
                delay = await self._once(backoff)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug: report it rather than stop heartbeating
                log.exception("consumer-protocol heartbeat failed")
                self._on_fatal(e)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, delay))
            self._wake.clear()

    async def _once(self, backoff: float) -> float:
        if self.phase in (Phase.IDLE, Phase.LOST):
            return self.interval
        last_poll = self._last_poll()
        if last_poll is not None and (time.monotonic() - last_poll
                                      > self.config.max_poll_interval_ms / 1000):
            log.warning(
                "group %s: consumer poll timeout has expired: poll() was not called for "
                "max.poll.interval.ms=%d; leaving the group so its partitions can be "
                "reassigned", self.membership.group_id, self.config.max_poll_interval_ms)
            await self.leave("consumer poll timeout has expired")
            self.phase = Phase.LOST
            self._wake_poll()
            return self.interval
        epoch = self.epoch
        try:
            resp = await self._send(epoch, full=self._full or epoch == 0)
        except KafkaError as e:
            if not e.retriable:
                self._on_fatal(e)
                return 3600.0
            log.debug("group %s: heartbeat failed: %s", self.membership.group_id, e)
            return backoff
        self.sent += 1
        if self.epoch != epoch or self.phase in (Phase.IDLE, Phase.LOST):
            return 0.0  # left or rejoined meanwhile
        return self._handle(resp, backoff)

    async def _send(self, epoch: int, *, full: bool, timeout_ms: int | None = None) -> Any:
        m, cfg, sub = self.membership, self.config, self.subscription
        acked = {} if epoch == 0 else self.acked
        regex = subscription_regex(sub)
        if regex is None and self._regex_sent and epoch != 0:
            regex = ""  # the subscription no longer has patterns: clear the broker's
        data: dict[str, Any] = {
            "group_id": m.group_id, "member_id": m.member_id, "member_epoch": epoch,
            "instance_id": m.group_instance_id if full or epoch < 0 else None,
            "rack_id": (cfg.client_rack or None) if full else None,
            "rebalance_timeout": cfg.max_poll_interval_ms if full else -1,
            "subscribed_topic_names": sorted(sub.literal) if full else None,
            "subscribed_topic_regex": regex if full else None,
            "server_assignor": cfg.group_remote_assignor if full else None,
            "topic_partitions": None if acked is None or epoch < 0 else [
                {"topic_id": tid, "partitions": sorted(ps)}
                for tid, ps in sorted(acked.items()) if ps],
        }
        kwargs: dict[str, Any] = {"timeout_ms": timeout_ms}
        if timeout_ms is None:
            kwargs = {"deadline": time.monotonic() + max(self.interval, 1.0)}
        resp = await self.link.request(CONSUMER_GROUP_HEARTBEAT, data, **kwargs)
        if full and resp.error_code == ErrorCode.none:
            self._full, self._regex_sent = False, bool(regex)
        if acked is not None and resp.error_code == ErrorCode.none and epoch >= 0:
            self.acked = None  # reported
        return resp

    def _handle(self, resp: Any, backoff: float) -> float:
        m = self.membership
        code = resp.error_code
        if code == ErrorCode.none:
            self.interval = max(int(_ms(resp.heartbeat_interval)), 1) / 1000
            if resp.member_id:
                m.member_id = str(resp.member_id)
            self.epoch = int(resp.member_epoch)
            if self.phase is Phase.JOINING:
                self.phase = Phase.MEMBER
                m.joined(Generation(self.epoch, m.member_id, "consumer"))
                m.synced()
            m.generation = Generation(self.epoch, m.member_id, "consumer")
            if resp.assignment is not None:
                self.target = {uuid.UUID(str(t.topic_id)): frozenset(int(p) for p in t.partitions)
                               for t in resp.assignment.topic_partitions}
                self._wake_poll()
            return self.interval
        if code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            log.info("group %s: member %s %s at epoch %d; its partitions are lost",
                     m.group_id, m.member_id, code.name.upper(), self.epoch)
            self.phase, self.target = Phase.LOST, None
            m.reset(f"heartbeat: {code.name.upper()}", keep_member_id=True)
            self._wake_poll()
            return self.interval
        if code in COORDINATOR_ERRORS:
            self.link.mark_unknown(f"heartbeat: {code.name.upper()}")
            return backoff
        if code == ErrorCode.coordinator_load_in_progress:
            return backoff
        err = group_error(code, f"ConsumerGroupHeartbeat of group {m.group_id!r}"
                          + (f" ({resp.error_message})" if resp.error_message else ""))
        if err.retriable:
            return backoff
        self._on_fatal(err)
        return 3600.0


def _ms(value: Any) -> float:
    """A kio i32Timedelta (or a plain int) in milliseconds."""
    total = getattr(value, "total_seconds", None)
    return total() * 1000 if total is not None else float(value)
