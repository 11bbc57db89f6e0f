"""The leader's replication state for one partition: followers, ISR, high watermark.

`LeaderReplicaState` is what Kafka's `Partition` keeps while it leads: the leader epoch,
the assigned replicas, the in-sync replicas as committed in ZooKeeper (with their znode
version) plus at most one ISR change in flight, each follower's position and timing, and
the leader's own log end and log start. The I/O shell (the server's `Partition`) feeds it
appends and follower fetches and carries out the ISR writes it asks for; nothing here
blocks, reads a clock or touches a socket.

Rules (Kafka's, with the KIP that made each one safe):
- **Follower position.** A follower's fetch offset is its log end offset (LEO). Its
  `last_caught_up_time_ms` is Kafka's `lastCaughtUpTimeMs`: the time of this fetch if it
  asked from the leader's LEO as of this fetch, else the time of the previous fetch if it
  asked from the leader's LEO as of the previous fetch; it never goes back. A fetch whose
  `last_fetched_epoch` disagrees with the leader's epoch history gets a diverging epoch
  (KIP-595's Fetch v12+ check) and moves nothing.
- **High watermark** = min(leader's LEO, LEO of every follower in the *maximal* ISR), the
  maximal ISR being the committed ISR plus a pending addition (KIP-497 / AlterPartition:
  a replica counts from the moment the leader asks to add it, so the HW can never have
  advanced past a replica that is in the ISR by the time the write lands). A follower
  whose LEO is unknown (-1, no fetch yet under this leader) holds the HW where it is.
  The HW only moves forward on a leader; it starts at the log's HW.
- **Shrink**: a follower of the committed ISR leaves it when it has neither reached the
  leader's LEO nor been caught up within `replica.lag.time.max.ms`. The leader never
  removes itself. **Expand**: an assigned follower not in the ISR joins once its LEO is
  >= the HW and >= the start offset of the leader's current epoch (so it holds every
  record of earlier epochs the leader may still commit). At most one ISR change is in
  flight; none is proposed while one is.
- **acks=all** waits for the HW to pass the batch; `min.insync.replicas` counts the
  *committed* ISR (NOT_ENOUGH_REPLICAS before the append, NOT_ENOUGH_REPLICAS_AFTER_APPEND
  when the ISR shrank under the minimum while waiting).

ISR changes are conditional ZooKeeper writes (Kafka before 2.7 wrote the partition state
znode the same way): `begin_isr_change` records the proposal, the shell writes it with
`zk_version`, then calls `apply_committed_isr(isr, new_version)` on success or
`abort_isr_change()` on failure (BadVersion: re-read, the controller or a newer leader
decided something else). A new leader epoch for the same leader (the controller changed
the ISR or the replicas) goes through `on_new_leader_epoch`.

The values it takes and hands out, its errors and the Fetch v12+ divergence check
(`diverging_epoch`) are in `replica_types.py` (re-exported here).

Invariants: the leader is always in the committed ISR and in every proposal;
`high_watermark` <= the leader's LEO and never decreases; followers are exactly the
assigned replicas other than the leader; a pending change is an expansion (superset of
the committed ISR by one replica) or a shrink (subset).

Not thread-safe: one owner (the server's `Partition`, on the event loop) calls it; the
`epochs` lookup it is given must take the log's lock itself if the log is shared.

Position of the leader's own LEO: `on_leader_append` takes whatever offset the leader
counts as its own replica's position. Kafka passes the LEO; passing the leader's durable
offset (recovery point) instead keeps "acknowledged = fsynced on every ISR member" under
`log.flush.interval.messages=1`, provided followers also fetch only from fsynced offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tidegate.common.errors import ErrorCode, OffsetOutOfRangeError
from tidegate.replication.replica_types import (
    UNKNOWN_OFFSET,
    AcksAllStatus,
    EpochLookup,
    FollowerFetchResult,
    FollowerState,
    IsrChangeInFlightError,
    IsrChangeKind,
    PendingIsrChange,
    UnknownReplicaError,
    diverging_epoch,
)

__all__ = [
    "UNKNOWN_OFFSET",
    "AcksAllStatus",
    "EpochLookup",
    "FollowerFetchResult",
    "FollowerState",
    "IsrChangeInFlightError",
    "IsrChangeKind",
    "LeaderReplicaState",
    "PendingIsrChange",
    "UnknownReplicaError",
    "diverging_epoch",
]


class LeaderReplicaState:
    """The leader-side replication state of one partition (see the module docstring)."""

    def __init__(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        zk_version: int,
        log_end_offset: int,
        log_start_offset: int,
        high_watermark: int,
        now_ms: int,
        epoch_start_offset: int | None = None,
        epochs: EpochLookup | None = None,
    ) -> None:
        """Become leader (Kafka's `makeLeader` for a broker that was not leading).

        `high_watermark` is the log's (a follower's HW, or the checkpoint's): possibly
        behind what the previous leader committed; it catches up once every ISR member
        has fetched. `epoch_start_offset` defaults to `log_end_offset`: the offset at which
        this leader epoch's first batch goes (the caller assigns it in the epoch cache).
        Followers start with an unknown LEO; ISR members count as caught up now (they get
        a full lag time to fetch), the others as never caught up."""
        self.leader_id = leader_id
        self.epochs = epochs
        self.leader_log_end_offset = log_end_offset
        self.log_start_offset = log_start_offset
        self._high_watermark = min(high_watermark, log_end_offset)
        self.pending: PendingIsrChange | None = None
        self.followers: dict[int, FollowerState] = {}
        self._set_epoch(leader_epoch, replicas, isr, zk_version, epoch_start_offset)
        for rid in self.replicas:
            if rid != leader_id:
                self.followers[rid] = FollowerState(
                    rid, last_caught_up_time_ms=now_ms if rid in self.isr else 0
                )
        self._maybe_advance_hw()  # a leader alone in its ISR commits its whole log now

    def _set_epoch(
        self,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        zk_version: int,
        epoch_start_offset: int | None,
    ) -> None:
        if self.leader_id not in replicas:
            raise ValueError(f"leader {self.leader_id} is not among replicas {list(replicas)}")
        if self.leader_id not in isr:
            raise ValueError(f"leader {self.leader_id} is not in the ISR {list(isr)}")
        self.leader_epoch = leader_epoch
        self.replicas: tuple[int, ...] = tuple(replicas)
        self.isr: tuple[int, ...] = tuple(isr)  # committed, in ZooKeeper
        self.zk_version = zk_version
        self.epoch_start_offset = (
            self.leader_log_end_offset if epoch_start_offset is None else epoch_start_offset
        )
        self.pending = None

    def on_new_leader_epoch(
        self,
        *,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        zk_version: int,
        now_ms: int,
        epoch_start_offset: int | None = None,
    ) -> bool:
        """Still leader, at a newer epoch (the controller changed the ISR or the replicas).
        Kafka's `makeLeader` for a broker that was already leading: followers keep their
        positions, their caught-up time restarts as at election, a pending ISR change is
        dropped (its conditional write will fail). Returns whether the HW advanced."""
        if leader_epoch <= self.leader_epoch:
            raise ValueError(f"leader epoch {leader_epoch} is not newer than {self.leader_epoch}")
        self._set_epoch(leader_epoch, replicas, isr, zk_version, epoch_start_offset)
        old = self.followers
        self.followers = {}
        for rid in self.replicas:
            if rid == self.leader_id:
                continue
            st = old.get(rid) or FollowerState(rid)
            st.last_caught_up_time_ms = now_ms if rid in self.isr else 0
            st.last_fetch_leader_log_end_offset = self.leader_log_end_offset
            st.last_fetch_time_ms = now_ms
            self.followers[rid] = st
        return self._maybe_advance_hw()

    # -- reading --------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus a pending addition: the replicas the HW waits for."""
        if self.pending is not None and self.pending.kind is IsrChangeKind.EXPAND:
            return self.pending.proposed_isr
        return self.isr

    def min_isr_satisfied(self, min_insync_replicas: int) -> bool:
        """Whether an acks=all produce may be appended (NOT_ENOUGH_REPLICAS otherwise).
        Counts the committed ISR, as Kafka does, not the one being proposed."""
        return len(self.isr) >= min_insync_replicas

    def acks_all_status(self, required_offset: int, min_insync_replicas: int) -> AcksAllStatus:
        """Kafka's `checkEnoughReplicasReachOffset`: an acks=all batch ending just below
        `required_offset` is done once the HW reaches it; if the committed ISR has since
        shrunk under `min.insync.replicas` it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND
        (written, but not as replicated as asked)."""
        if self._high_watermark < required_offset:
            return AcksAllStatus(False)
        if len(self.isr) >= min_insync_replicas:
            return AcksAllStatus(True)
        return AcksAllStatus(True, ErrorCode.not_enough_replicas_after_append)

    def follower(self, replica_id: int) -> FollowerState:
        st = self.followers.get(replica_id)
        if st is None:
            raise UnknownReplicaError(
                f"broker {replica_id} is not a follower of this partition "
                f"(replicas {list(self.replicas)}, leader {self.leader_id})"
            )
        return st

    # -- the leader's own log -------------------------------------------------------------

    def on_leader_append(self, log_end_offset: int) -> bool:
        """The leader's own position moved (see the module docstring for which offset to
        pass). Returns whether the HW advanced (a leader alone in its ISR commits now)."""
        self.leader_log_end_offset = log_end_offset
        return self._maybe_advance_hw()

    def on_log_start(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the leader's log start."""
        self.log_start_offset = log_start_offset

    # -- followers --------------------------------------------------------------------------

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        now_ms: int,
        leader_leo: int,
        *,
        follower_log_start: int = UNKNOWN_OFFSET,
    ) -> FollowerFetchResult:
        """A follower fetched from `fetch_offset` (= its LEO) at `now_ms`, the leader's
        LEO being `leader_leo` when the fetch was read (Kafka uses the LEO from before the
        read, so appends racing with the fetch cannot keep a follower out of sync).

        With `last_fetched_epoch` (Fetch v12+) and an `epochs` lookup, a diverging
        follower gets the leader's epoch answer and nothing is updated. Raises
        `UnknownReplicaError` for a broker that is no follower here and
        `OffsetOutOfRangeError` for an offset outside the leader's log."""
        st = self.follower(replica_id)
        if last_fetched_epoch is not None and last_fetched_epoch >= 0 and self.epochs is not None:
            answer = self.epochs.end_offset_for(last_fetched_epoch, leader_leo)
            div = diverging_epoch(answer, last_fetched_epoch, fetch_offset, self.log_start_offset)
            if div is not None:
                return FollowerFetchResult(div, False, False)
        if fetch_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"follower {replica_id} fetch offset {fetch_offset} is below the log start "
                f"offset {self.log_start_offset}"
            )
        if fetch_offset > leader_leo:
            raise OffsetOutOfRangeError(
                f"follower {replica_id} fetch offset {fetch_offset} is above the leader's "
                f"log end offset {leader_leo}"
            )
        if fetch_offset >= leader_leo:
            st.last_caught_up_time_ms = max(st.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= st.last_fetch_leader_log_end_offset >= 0:
            st.last_caught_up_time_ms = max(st.last_caught_up_time_ms, st.last_fetch_time_ms)
        st.log_end_offset = fetch_offset
        st.log_start_offset = follower_log_start
        st.last_fetch_leader_log_end_offset = leader_leo
        st.last_fetch_time_ms = now_ms
        advanced = self._maybe_advance_hw()
        return FollowerFetchResult(None, advanced, self.can_expand_isr(replica_id))

    def is_idle_in_sync(self, replica_id: int, fetch_offset: int, leader_leo: int) -> bool:
        """Whether a fetch from `fetch_offset` would change nothing but the follower's
        timing: it is at the leader's LEO, already recorded there, and no ISR
        expansion is due. The fetch handler then skips the partition's read
        (`on_idle_fetch` keeps the timing), so an incremental follower fetch costs what
        changed, not every partition of its session."""
        st = self.followers.get(replica_id)
        return (st is not None and st.log_end_offset == fetch_offset == leader_leo
                and not self.can_expand_isr(replica_id))

    def on_idle_fetch(self, replica_id: int, now_ms: int, leader_leo: int) -> None:
        """What `on_follower_fetch` records for a follower `is_idle_in_sync` found
        caught up: caught up now (so an idle partition never looks lagging)."""
        st = self.followers[replica_id]
        st.last_caught_up_time_ms = max(st.last_caught_up_time_ms, now_ms)
        st.last_fetch_leader_log_end_offset = leader_leo
        st.last_fetch_time_ms = now_ms

    def can_expand_isr(self, replica_id: int) -> bool:
        """Kafka's `canAddReplicaToIsr` + `isFollowerInSync`: an assigned follower outside
        the ISR, no change in flight, LEO >= HW and >= this epoch's start offset."""
        st = self.followers.get(replica_id)
        if st is None or self.pending is not None or replica_id in self.isr:
            return False
        leo = st.log_end_offset
        return leo >= self._high_watermark and leo >= self.epoch_start_offset

    def expanded_isr(self, replica_id: int) -> tuple[int, ...]:
        """The committed ISR with `replica_id` appended (Kafka appends the newcomer)."""
        return (*self.isr, replica_id) if replica_id not in self.isr else self.isr

    def out_of_sync_replicas(self, now_ms: int, replica_lag_time_max_ms: int) -> list[int]:
        """Followers of the committed ISR that are out of sync (Kafka's
        `getOutOfSyncReplicas`), in ISR order. The leader is never among them."""
        out: list[int] = []
        for rid in self.isr:
            if rid == self.leader_id:
                continue
            st = self.followers.get(rid)
            if st is None or not st.is_caught_up(
                self.leader_log_end_offset, now_ms, replica_lag_time_max_ms
            ):
                out.append(rid)
        return out

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without its out-of-sync followers, or None when nothing is to change or
        a change is already in flight. Pure: pass the result to `begin_isr_change`."""
        if self.pending is not None:
            return None
        out = set(self.out_of_sync_replicas(now_ms, replica_lag_time_max_ms))
        if not out:
            return None
        return tuple(r for r in self.isr if r not in out)

    # -- ISR changes ----------------------------------------------------------------------

    def begin_isr_change(self, proposed_isr: Iterable[int]) -> PendingIsrChange:
        """Record an ISR change about to be written to ZooKeeper under `zk_version`.
        From now on an addition counts for the HW (maximal ISR); a removal only once
        committed. ValueError for a proposal that drops the leader, names an unassigned
        replica, or is neither one addition nor removals."""
        if self.pending is not None:
            raise IsrChangeInFlightError(f"ISR change already in flight: {self.pending}")
        proposed = tuple(proposed_isr)
        if len(set(proposed)) != len(proposed):
            raise ValueError(f"duplicate replica in proposed ISR {list(proposed)}")
        if self.leader_id not in proposed:
            raise ValueError(f"proposed ISR {list(proposed)} drops the leader {self.leader_id}")
        unknown = [r for r in proposed if r not in self.replicas]
        if unknown:
            raise ValueError(f"proposed ISR names unassigned replicas {unknown}")
        now, new = set(self.isr), set(proposed)
        if new > now and len(new - now) == 1:
            kind = IsrChangeKind.EXPAND
        elif new < now:
            kind = IsrChangeKind.SHRINK
        else:
            raise ValueError(f"ISR change {list(self.isr)} -> {list(proposed)} is not one step")
        self.pending = PendingIsrChange(kind, proposed, self.zk_version)
        return self.pending

    def apply_committed_isr(self, isr: Sequence[int], zk_version: int) -> bool:
        """The conditional write succeeded (or a same-epoch ISR was read back): `isr` is
        committed at `zk_version`. Clears the pending change; returns whether the HW
        advanced (it may, when followers left the ISR)."""
        if self.leader_id not in isr:
            raise ValueError(f"committed ISR {list(isr)} lacks the leader {self.leader_id}")
        unknown = [r for r in isr if r != self.leader_id and r not in self.followers]
        if unknown:
            raise ValueError(f"committed ISR {list(isr)} names unassigned replicas {unknown}")
        self.isr = tuple(isr)
        self.zk_version = zk_version
        self.pending = None
        return self._maybe_advance_hw()

    def abort_isr_change(self) -> None:
        """The conditional write failed: forget the proposal (the HW never advanced past a
        pending addition, so dropping it is safe). The caller re-reads the state znode."""
        self.pending = None

    # -- high watermark -------------------------------------------------------------------

    def _maybe_advance_hw(self) -> bool:
        candidate = self.leader_log_end_offset
        for rid in self.maximal_isr:
            if rid == self.leader_id:
                continue
            st = self.followers.get(rid)
            leo = UNKNOWN_OFFSET if st is None else st.log_end_offset
            candidate = min(candidate, leo)
        if candidate > self._high_watermark:
            self._high_watermark = candidate
            return True
        return False
