"""Leading a replicated partition: the high watermark over the ISR, acks=all, ISR changes.

A `Leadership` is attached to a cluster `Partition` while this broker leads it
(`ReplicaManager.become_leader`); it wraps the sans-IO `LeaderReplicaState`
(tidegate.replication.replica_state, where the rules are written down) and connects it
to the log, the clock and the waiters:

- The leader's own position is its *durable* offset when every write is fsynced
  (`log.flush.interval.messages=1`, the default: the recovery point after group commit),
  else its log end. Followers fsync what they fetched before fetching again, so their
  fetch offset is durable too; the high watermark = min over the ISR is therefore
  "fsynced on every in-sync replica" by default, and "in every in-sync replica's log"
  under a relaxed flush policy (docs/cluster.md).
- Follower fetches (`on_follower_fetch`) move the followers' positions; the HW moves
  when the slowest ISR member's does, and the log's HW (what consumers see) follows.
- acks=all waits (`wait_high_watermark`) until the HW passes the batch, up to the
  Produce request's timeout (REQUEST_TIMED_OUT), and reports
  NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank under `min.insync.replicas`.
- ISR changes are proposed here (`expansion_for` after a fetch, `shrink_proposal` on the
  periodic check) and written by the cluster layer as conditional ZooKeeper writes
  (`ReplicaManager.isr_writer`); `committed_isr` applies what ZooKeeper holds.

Everything runs on the event loop; the `LeaderReplicaState` is never touched elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tidegate.common.clock import Clock
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.replica_state import (
    FollowerFetchResult,
    LeaderReplicaState,
)
from tidegate.storage.leader_epochs import EpochEndOffset
from tidegate.storage.log import Log

__all__ = ["Leadership", "RequestTimedOutError"]


class RequestTimedOutError(KafkaError):
    code = ErrorCode.request_timed_out


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.not_enough_replicas


class Leadership:
    def __init__(
        self,
        log: Log,
        clock: Clock,
        *,
        leader_id: int,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        zk_version: int,
        controller_epoch: int,
        durable_position: bool,
    ) -> None:
        self.log = log
        self.clock = clock
        self.controller_epoch = controller_epoch
        self.durable_position = durable_position
        leo = log.log_end_offset
        self.state = LeaderReplicaState(
            leader_id=leader_id,
            leader_epoch=leader_epoch,
            replicas=replicas,
            isr=isr,
            zk_version=zk_version,
            log_end_offset=self.own_position(),
            log_start_offset=log.log_start_offset,
            high_watermark=log.high_watermark,
            now_ms=clock.now_ms(),
            epoch_start_offset=leo,
            epochs=_Epochs(log),
        )
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.isr_write_running = False

    @property
    def high_watermark(self) -> int:
        return self.state.high_watermark

    def own_position(self) -> int:
        return self.log.recovery_point if self.durable_position else self.log.log_end_offset

    # -- positions ----------------------------------------------------------------------

    def on_leader_progress(self) -> bool:
        """The leader appended or fsynced; True if the HW moved (the log's HW follows)."""
        self.state.on_log_start(self.log.log_start_offset)
        return self._sync_hw(self.state.on_leader_append(self.own_position()))

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
                          follower_log_start: int) -> FollowerFetchResult:
        self.state.on_log_start(self.log.log_start_offset)
        result = self.state.on_follower_fetch(
            replica_id, fetch_offset, last_fetched_epoch if last_fetched_epoch >= 0 else None,
            self.clock.now_ms(), self.log.log_end_offset,
            follower_log_start=follower_log_start)
        self._sync_hw(result.high_watermark_advanced)
        return result

    def idle_follower_fetch(self, replica_id: int, fetch_offset: int) -> bool:
        """A fetch that would change nothing but the follower's timing (it is at the
        log end, already recorded there, not due to join the ISR): record the timing
        and return True; False when the fetch must go through `on_follower_fetch`."""
        leo = self.log.log_end_offset
        if not self.state.is_idle_in_sync(replica_id, fetch_offset, leo):
            return False
        self.state.on_idle_fetch(replica_id, self.clock.now_ms(), leo)
        return True

    def _sync_hw(self, advanced: bool) -> bool:
        moved = self.log.update_high_watermark(self.state.high_watermark)
        if moved or advanced:
            self._wake()
        return moved

    # -- acks=all -----------------------------------------------------------------------

    def check_min_isr(self) -> None:
        """Before appending an acks=all batch (Kafka: NOT_ENOUGH_REPLICAS)."""
        needed = self.log.config.min_insync_replicas
        if not self.state.min_isr_satisfied(needed):
            raise NotEnoughReplicasError(
                f"{self.log.topic_partition}: the in-sync replicas {list(self.state.isr)} "
                f"are fewer than min.insync.replicas={needed}")

    async def wait_high_watermark(self, offset: int, timeout: float | None) -> ErrorCode:
        """Wait until the HW reaches `offset`; the error to answer (NONE when done)."""
        needed = self.log.config.min_insync_replicas
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            status = self.state.acks_all_status(offset, needed)
            if status.done:
                return status.error
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((offset, fut))
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return ErrorCode.request_timed_out
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                return ErrorCode.request_timed_out

    def _wake(self, *, everyone: bool = False) -> None:
        hw = self.state.high_watermark
        keep = []
        for offset, fut in self._waiters:
            if everyone or offset <= hw:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        self._waiters = keep

    def resign(self) -> None:
        """No longer leader: release every acks=all waiter (the produce path then
        answers NOT_LEADER_OR_FOLLOWER for what the HW does not cover)."""
        for _offset, fut in self._waiters:
            if not fut.done():
                fut.set_exception(_not_leader(self.log))
        self._waiters = []

    # -- ISR ------------------------------------------------------------------------------

    def expansion_for(self, replica_id: int) -> tuple[int, ...] | None:
        if self.isr_write_running or not self.state.can_expand_isr(replica_id):
            return None
        return self.state.expanded_isr(replica_id)

    def shrink_proposal(self, lag_time_ms: int) -> tuple[int, ...] | None:
        if self.isr_write_running:
            return None
        return self.state.maybe_shrink_isr(self.clock.now_ms(), lag_time_ms)

    def renew(self, *, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int],
              zk_version: int, controller_epoch: int) -> None:
        """Still leader at a newer epoch: keep the followers' positions and the waiters
        (`LeaderReplicaState.on_new_leader_epoch`)."""
        self.controller_epoch = controller_epoch
        self.isr_write_running = False  # a pending conditional write will fail
        self._sync_hw(self.state.on_new_leader_epoch(
            leader_epoch=leader_epoch, replicas=replicas, isr=isr, zk_version=zk_version,
            now_ms=self.clock.now_ms(), epoch_start_offset=self.log.log_end_offset))
        self._wake()  # NOT_ENOUGH_REPLICAS_AFTER_APPEND may now be due

    def committed_isr(self, isr: Sequence[int], zk_version: int) -> None:
        if zk_version < self.state.zk_version:
            return
        if self.state.leader_id not in isr:
            return  # not ours to apply: the controller will move leadership
        self._sync_hw(self.state.apply_committed_isr(isr, zk_version))
        self._wake()  # NOT_ENOUGH_REPLICAS_AFTER_APPEND may now be due


class _Epochs:
    """The leader's epoch history for the diverging-epoch check of follower fetches."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        return self.log.end_offset_for_epoch(requested_epoch)


def _not_leader(log: Log) -> KafkaError:
    return KafkaError(f"leadership of {log.topic_partition} moved",
                      code=ErrorCode.not_leader_or_follower)
