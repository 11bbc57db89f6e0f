"""Committing and fetching a group's offsets (OffsetCommit / OffsetFetch).

`GroupCommits` is the commit half of `group.ConsumerCoordinator`:

- `commit()` commits (by default every assigned partition's position) and retries
  retriable errors until ``default.api.timeout.ms``; `commit_async()` sends once and
  reports to a callback; `auto_commit()` does the periodic ``enable.auto.commit``.
- Subscribed consumers commit with their generation and member id; a commit while not
  in the group fails with CommitFailedError (the partitions may be someone else's),
  or RebalanceInProgressError while a rebalance is running. A consumer with
  ``group.id`` that assigns partitions by hand commits with generation -1, as Kafka's
  "simple" consumer groups do.
- Error side effects: coordinator errors make the coordinator be looked up again;
  ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / GROUP_ID_NOT_FOUND (OffsetCommit v9+: the
  group is gone) / FENCED_MEMBER_EPOCH reset the member (for the generation the
  commit was sent in); REBALANCE_IN_PROGRESS asks for a rejoin; FENCED_INSTANCE_ID is
  fatal.
- `fetch()` reads committed offsets, optionally accepting partial answers (partitions
  with UNSTABLE_OFFSET_COMMIT are left out and asked again later).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.coordinator_link import (
    OFFSET_COMMIT,
    OFFSET_FETCH,
    CoordinatorLink,
)
from tidegate.client.consumer.group_offsets import (
    COORDINATOR_ERRORS,
    CommitFailedError,
    OffsetAndMetadata,
    RebalanceInProgressError,
    commit_request,
    commit_result,
    fetch_request,
    fetch_result,
)
from tidegate.client.consumer.membership import Membership, MemberState
from tidegate.client.consumer.state import Assignment
from tidegate.client.errors import KafkaTimeoutError
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError

__all__ = ["CommitCallback", "GroupCommits", "Offsets"]

log = logging.getLogger("tidegate.client.consumer.group")

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]
Offsets = Mapping[TopicPartition, int | OffsetAndMetadata]


class GroupCommits:
    """See the module docstring. `subscribed()` and `joining()` tell whether the
    consumer is group-managed and whether a rebalance task is running."""

    def __init__(self, config: ConsumerConfig, link: CoordinatorLink, membership: Membership,
                 assignment: Assignment, *, subscribed: Callable[[], bool],
                 joining: Callable[[], bool], on_fatal: Callable[[BaseException], None],
                 wake_poll: Callable[[], None]) -> None:
        self.config = config
        self.link = link
        self.membership = membership
        self.assignment = assignment
        self.group_id = membership.group_id
        self._subscribed = subscribed
        self._joining = joining
        self._on_fatal = on_fatal
        self._wake_poll = wake_poll
        self._auto: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000

    def consumed(self, partitions: Iterable[TopicPartition] | None = None
                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The positions of `partitions` (default: all assigned) that have one: the
        records handed to the application (`Assignment.consumed`)."""
        assignment = self.assignment
        tps = assignment.partitions if partitions is None else partitions
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in tps:
            st = assignment.partitions.get(tp)
            if st is not None and (position := assignment.consumed(tp, st)) is not None:
                out[tp] = OffsetAndMetadata(position)
        return out

    def _identity(self) -> tuple[int, str, str | None]:
        """(generation, member id, instance id) to commit with."""
        if not self._subscribed():
            return -1, "", None  # manual assignment: a "simple" group
        m = self.membership
        if m.generation.valid and m.state is not MemberState.UNJOINED:
            return m.generation.generation_id, m.generation.member_id, m.group_instance_id
        if self._joining():
            raise RebalanceInProgressError(
                "the consumer is rebalancing; call poll() to complete the rebalance, then "
                "commit again")
        raise CommitFailedError(
            "the consumer is not part of an active group (it was probably removed for "
            "not polling within max.poll.interval.ms); poll() to rejoin, and do not retry "
            "this commit: the partitions may belong to another member now")

    async def _send(self, offsets: Offsets, deadline: float) -> None:
        generation, member, instance = self._identity()
        resp = await self.link.request(OFFSET_COMMIT, commit_request(
            self.group_id, generation, member, instance, offsets), deadline=deadline)
        err = commit_result(resp)
        if err is None:
            return
        m = self.membership
        if err.code in COORDINATOR_ERRORS:
            self.link.mark_unknown(str(err))
        elif err.code in (ErrorCode.illegal_generation, ErrorCode.unknown_member_id,
                          ErrorCode.group_id_not_found, ErrorCode.fenced_member_epoch):
            if self._subscribed() and m.generation.generation_id == generation:
                m.reset(f"offset commit: {err.name}")
                self._wake_poll()
        elif err.code == ErrorCode.rebalance_in_progress:
            m.request_rejoin("offset commit: the group is rebalancing")
        elif err.code == ErrorCode.fenced_instance_id:
            self._on_fatal(err)
        raise err

    async def commit(self, offsets: Offsets | None = None, timeout_ms: int | None = None
                     ) -> None:
        """Commit `offsets` (default: every assigned partition's position), retrying
        retriable errors until the timeout (default ``default.api.timeout.ms``)."""
        todo = dict(self.consumed() if offsets is None else offsets)
        if not todo:
            return
        timeout = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout / 1000
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            try:
                await self._send(todo, deadline)
                return
            except KafkaError as e:
                if not e.retriable or isinstance(e, RebalanceInProgressError):
                    raise
                last = e
            if time.monotonic() + backoff > deadline:
                raise KafkaTimeoutError(f"committing offsets of group {self.group_id!r} "
                                        f"did not finish within {timeout} ms: {last}")
            await asyncio.sleep(backoff)

    def commit_async(self, offsets: Offsets | None = None,
                     callback: CommitCallback | None = None) -> asyncio.Task[None]:
        """Send one commit without waiting; `callback(offsets, error)` runs when it
        completes. Commits go out in call order on the coordinator connection."""
        todo = {tp: (v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v)))
                for tp, v in (self.consumed() if offsets is None else offsets).items()}

        async def run() -> None:
            error: BaseException | None = None
            try:
                if todo:
                    await self._send(
                        todo, time.monotonic() + self.config.request_timeout_ms / 1000)
            except KafkaError as e:
                error = e
            if callback is not None:
                try:
                    callback(todo, error)
                except Exception:
                    log.exception("offset commit callback failed")
            elif error is not None:
                log.warning("group %s: asynchronous commit failed: %s", self.group_id, error)

        task = asyncio.get_running_loop().create_task(run())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def commit_quietly(self, offsets: Offsets, why: str) -> None:
        """Auto-commit `offsets` now, bounded by ``request.timeout.ms``; failures are
        logged (as Kafka's auto-commit does), not raised."""
        if not offsets:
            return
        try:
            await self.commit(offsets, timeout_ms=self.config.request_timeout_ms)
        except (KafkaError, ValueError) as e:
            log.warning("group %s: auto-commit %s failed: %s", self.group_id, why, e)

    def auto_commit(self) -> None:
        """The periodic ``enable.auto.commit`` (from poll): asynchronous, one at a
        time, only while the member is stable (or the consumer assigns by hand)."""
        now = time.monotonic()
        if not self.config.enable_auto_commit or now < self.next_auto_commit:
            return
        self.next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        if self._auto is not None and not self._auto.done():
            return
        if self._subscribed() and self.membership.state is not MemberState.STABLE:
            return
        offsets = self.consumed()
        if offsets:
            self._auto = self.commit_async(offsets)

    async def wait_pending(self, timeout_s: float) -> None:
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout_s)

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout_ms: int | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where there is none)."""
        tps = set(partitions)
        if not tps:
            return {}
        timeout = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        found = await self.fetch(tps, time.monotonic() + timeout / 1000)
        return {tp: found.get(tp) for tp in tps}

    async def fetch(self, partitions: set[TopicPartition], deadline: float, *,
                    partial: bool = False) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch, retried until `deadline`; with `partial`, an answer that
        leaves some partitions out (retriable per-partition errors) is accepted."""
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            try:
                resp = await self.link.request(OFFSET_FETCH, fetch_request(
                    self.group_id, partitions,
                    require_stable=self.config.isolation_level == "read_committed"),
                    deadline=deadline)
                found, err = fetch_result(resp)
                if err is None or (partial and found):
                    return found
                if err.code in COORDINATOR_ERRORS:
                    self.link.mark_unknown(str(err))
                if not err.retriable:
                    raise err
            except KafkaError as e:
                if not e.retriable:
                    raise
                err = e
            if time.monotonic() + backoff > deadline:
                raise KafkaTimeoutError(f"fetching committed offsets of group "
                                        f"{self.group_id!r} did not finish in time: {err}")
            await asyncio.sleep(backoff)
