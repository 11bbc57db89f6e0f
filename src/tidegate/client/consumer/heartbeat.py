"""The heartbeat task: keeps the member alive independently of `poll()`.

While the member is COMPLETING_REBALANCE or STABLE, it sends Heartbeat every
``heartbeat.interval.ms`` on the coordinator connection (``retry.backoff.ms`` after a
failure). It is also the watchdog for ``max.poll.interval.ms``: if the application
has not called `poll()` for that long (time spent inside `poll()` does not count), the
member leaves the group so its partitions go to someone who is polling, as Kafka's
consumer does; the next `poll()` reports them lost and rejoins.

Responses: REBALANCE_IN_PROGRESS -> ask `poll()` to rejoin; ILLEGAL_GENERATION and
UNKNOWN_MEMBER_ID -> reset the member (partitions lost) and rejoin; NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, timeouts and broken connections -> find the coordinator
again; no successful heartbeat for ``session.timeout.ms`` -> likewise (the coordinator
has probably expired us already); FENCED_INSTANCE_ID and other non-retriable errors
-> fatal, raised by the next `poll()`. A response for a generation that has since
changed is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.coordinator_link import HEARTBEAT, CoordinatorLink
from tidegate.client.consumer.group_offsets import COORDINATOR_ERRORS, group_error
from tidegate.client.consumer.membership import Membership, MemberState
from tidegate.client.tasks import cancel_and_wait
from tidegate.common.errors import KafkaError

__all__ = ["HeartbeatTask"]

log = logging.getLogger("tidegate.client.consumer.group")

_ACTIVE = (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)


class HeartbeatTask:
    """See the module docstring."""

    def __init__(self, config: ConsumerConfig, link: CoordinatorLink, membership: Membership,
                 *, last_poll: Callable[[], float | None],
                 on_poll_timeout: Callable[[], Awaitable[None]],
                 on_fatal: Callable[[BaseException], None],
                 wake_poll: Callable[[], None]) -> None:
        self.config = config
        self.link = link
        self.membership = membership
        self._last_poll = last_poll
        self._on_poll_timeout = on_poll_timeout
        self._on_fatal = on_fatal
        self._wake_poll = wake_poll
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_ok = time.monotonic()
        self.sent = 0  # heartbeats sent (for tests and metrics)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def kick(self) -> None:
        """Check the state now (after a join, a reset, a poll)."""
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(0.0, seconds))
        self._wake.clear()

    async def _run(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            delay = interval
            try:
                delay = await self._once(interval, backoff)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug: report it rather than stop heartbeating
                log.exception("heartbeat task failed")
                self._on_fatal(e)
                return
            await self._sleep(delay)

    async def _once(self, interval: float, backoff: float) -> float:
        """Do what is due now; return how long to sleep."""
        m = self.membership
        now = time.monotonic()
        if m.state not in _ACTIVE:
            self._last_ok = now
            return interval
        last_poll = self._last_poll()
        if last_poll is not None and now - last_poll > self.config.max_poll_interval_ms / 1000:
            log.warning(
                "group %s: consumer poll timeout has expired: poll() was not called for "
                "max.poll.interval.ms=%d; leaving the group so its partitions can be "
                "reassigned. Process fewer records per poll (max.poll.records) or raise "
                "max.poll.interval.ms", m.group_id, self.config.max_poll_interval_ms)
            await self._on_poll_timeout()
            return interval
        if now - self._last_ok > self.config.session_timeout_ms / 1000:
            self.link.mark_unknown("no successful heartbeat within session.timeout.ms")
            self._last_ok = now
        generation = m.generation
        try:
            resp = await self.link.request(HEARTBEAT, {
                "group_id": m.group_id, "generation_id": generation.generation_id,
                "member_id": generation.member_id,
                "group_instance_id": m.group_instance_id,
            }, deadline=now + interval)
        except KafkaError as e:
            if not e.retriable:
                self._on_fatal(e)
                return 3600.0
            log.debug("group %s: heartbeat failed: %s", m.group_id, e)
            return backoff
        self.sent += 1
        code = resp.error_code
        if m.generation != generation:
            return interval  # a rebalance changed the generation meanwhile
        if code in (ErrorCode.none, ErrorCode.rebalance_in_progress):
            self._last_ok = time.monotonic()
        if code == ErrorCode.none:
            return interval
        if code == ErrorCode.rebalance_in_progress:
            if m.state is MemberState.STABLE:
                m.request_rejoin("the group is rebalancing (heartbeat)")
                self._wake_poll()
            return interval
        if code in (ErrorCode.illegal_generation, ErrorCode.unknown_member_id):
            m.reset(f"heartbeat: {code.name.upper()}")
            self._wake_poll()
            return interval
        if code in COORDINATOR_ERRORS:
            self.link.mark_unknown(f"heartbeat: {code.name.upper()}")
            return backoff
        if code == ErrorCode.coordinator_load_in_progress:
            return backoff
        err = group_error(code, f"heartbeat for group {m.group_id!r}")
        if err.retriable:
            return backoff
        self._on_fatal(err)
        return 3600.0
