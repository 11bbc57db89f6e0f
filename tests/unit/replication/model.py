"""A sans-IO model of one replicated partition, driven by test_model.py.

Three replicas by default (ids 0, 1, 2, all assigned, preferred leader 0; four
exercise rules needing an outsider besides two ISR members). Each holds a log of
`(epoch, value)` entries (offset = index), a `LeaderEpochCache`, a high watermark, and
while it believes it leads, a `LeaderReplicaState`. ZooKeeper is one partition-state
znode (leader, leader epoch, ISR, version) written by a controller that reacts at once
to a replica joining or leaving the live set; replicas *learn* the znode's state later
(`learn`), as brokers receive LeaderAndIsr late. The real rules under test are the
production ones: `replica_state`, `follower`, `election`, `leader_epochs`.

Faults: crash (nothing written is lost: fsync per append; the HW checkpoint may be
stale), a pause the controller does not notice, isolation from ZooKeeper (the
controller elects another leader, the old one goes on as a zombie), cut links between
two replicas, controlled shutdown, preferred leader election.

`Model.check()` verifies after every step:
- the HW of every leader (zombies included) never moves backwards while it leads, and
  every entry below it equals the reference `ref` (the committed log, extended by every
  HW advance: two leaders never commit different entries at one offset);
- every member of the ISR in ZooKeeper holds `ref` as a prefix of its log;
- no truncation ever removes an entry equal to the committed one at its offset, nor cuts
  below the replica's own HW (checked where truncation happens).
`Model.converge()` heals everything and runs replication to quiescence: all logs then
equal the leader's, which starts with `ref`, and every HW is the log end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tidegate.common.errors import OffsetOutOfRangeError
from tidegate.replication.election import (
    NO_LEADER,
    controlled_shutdown_election,
    isr_after_broker_loss,
    offline_election,
    preferred_leader,
)
from tidegate.replication.follower import (
    first_request_epoch,
    follower_high_watermark,
    truncation_offset,
)
from tidegate.replication.replica_state import LeaderReplicaState
from tidegate.storage.leader_epochs import LeaderEpochCache

LAG_MS = 100

Entry = tuple[int, int]  # (leader epoch, value)


@dataclass
class Replica:
    rid: int
    log: list[Entry] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw: int = 0
    alive: bool = True
    paused: bool = False
    zk_connected: bool = True
    known_epoch: int = -1  # newest partition state learned; -1 after a restart
    leader_id: int = NO_LEADER  # the leader at known_epoch
    lstate: LeaderReplicaState | None = None  # while it believes it leads
    truncating: bool = False
    ask_epoch: int | None = None

    @property
    def leo(self) -> int:
        return len(self.log)

    @property
    def active(self) -> bool:
        return self.alive and not self.paused


@dataclass
class Znode:
    leader: int = NO_LEADER
    epoch: int = 0
    isr: tuple[int, ...] = ()
    version: int = 0


class Model:
    def __init__(
        self,
        *,
        n: int = 3,
        unclean: bool = False,
        truncate: Callable[..., int] | None = None,
        leader_state: type[LeaderReplicaState] = LeaderReplicaState,
    ) -> None:
        # Knobs for the mutation tests (the model must catch a broken rule).
        self.unclean = unclean
        self.broken_truncate = truncate
        self.leader_state = leader_state
        self.now = 0
        self.value = 0
        self.assignment = tuple(range(n))  # replica 0 is the preferred leader
        self.replicas = [Replica(i) for i in range(n)]
        self.cut: set[frozenset[int]] = set()
        self.zk = Znode(leader=0, epoch=0, isr=self.assignment, version=0)
        self.ref: list[Entry] = []
        self.hw_seen: dict[int, tuple[LeaderReplicaState, int]] = {}
        for r in self.replicas:
            self.learn(r.rid)
        self.check()

    # -- helpers ----------------------------------------------------------------------

    def live(self) -> set[int]:
        """What the controller sees: registered brokers (alive, with a ZK session)."""
        return {r.rid for r in self.replicas if r.alive and r.zk_connected}

    def linked(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    def _bump(self, leader: int, isr: tuple[int, ...]) -> None:
        self.zk = Znode(leader, self.zk.epoch + 1, isr, self.zk.version + 1)

    def _sync_hw(self, r: Replica) -> None:
        if r.lstate is not None:
            r.hw = r.lstate.high_watermark

    def _leader_for(self, f: Replica) -> Replica | None:
        """The leader `f` follows, if it can be reached and is at `f`'s epoch (KIP-320:
        requests carry the follower's current leader epoch; a mismatch is fenced)."""
        if not f.active or f.lstate is not None or f.leader_id == NO_LEADER:
            return None
        leader = self.replicas[f.leader_id]
        if not leader.active or leader.lstate is None or not self.linked(f.rid, leader.rid):
            return None
        if leader.lstate.leader_epoch != f.known_epoch:
            return None
        return leader

    def _truncate(self, r: Replica, offset: int) -> None:
        if offset >= r.leo:
            # Kafka's truncateTo: even with nothing to cut, drop epochs starting at the
            # log end (a leader that assigned its epoch, wrote nothing and lost office),
            # or the follower would keep announcing that epoch and diverge forever.
            r.cache.truncate_from_end(r.leo)
            return
        for i in range(max(offset, 0), min(r.leo, len(self.ref))):
            assert r.log[i] != self.ref[i], (
                f"replica {r.rid} truncates to {offset}, removing committed entry "
                f"{self.ref[i]} at offset {i}"
            )
        assert offset >= r.hw, f"replica {r.rid} truncates to {offset}, below its HW {r.hw}"
        del r.log[offset:]
        r.cache.truncate_from_end(offset)
        r.hw = min(r.hw, offset)

    def _follow_answer(self, f: Replica, epoch: int, end_offset: int) -> None:
        """Apply an OffsetForLeaderEpoch answer (or a diverging epoch) to follower `f`."""
        if self.broken_truncate is not None:
            self._truncate(f, self.broken_truncate(f, epoch, end_offset))
            f.truncating = False
            return
        point = truncation_offset(f.cache, f.leo, epoch, end_offset, high_watermark=f.hw)
        self._truncate(f, point.offset)
        f.truncating = not point.complete
        f.ask_epoch = point.ask_again_with

    # -- the controller -------------------------------------------------------------------

    def controller_on_loss(self, rid: int) -> None:
        """`rid` left the live set (crash, session expiry): Kafka's onBrokerFailure."""
        zk = self.zk
        if zk.leader == rid:
            decision = offline_election(self.assignment, zk.isr, self.live(), self.unclean)
            if decision is None:
                self._bump(NO_LEADER, isr_after_broker_loss(zk.isr, rid))
            else:
                self._bump(decision.leader, decision.isr)
        elif rid in zk.isr and len(zk.isr) > 1:
            self._bump(zk.leader, isr_after_broker_loss(zk.isr, rid))

    def controller_on_join(self) -> None:
        """A broker registered: an offline partition may get a leader again."""
        if self.zk.leader == NO_LEADER:
            decision = offline_election(self.assignment, self.zk.isr, self.live(), self.unclean)
            if decision is not None:
                self._bump(decision.leader, decision.isr)

    def preferred_election(self) -> None:
        p = preferred_leader(self.assignment, self.zk.isr, self.live())
        if p is not None and p != self.zk.leader:
            self._bump(p, self.zk.isr)

    # -- replica actions ------------------------------------------------------------------

    def learn(self, rid: int) -> None:
        """`rid` reads the partition state (LeaderAndIsr arrives): becomes leader or
        follower of the newer epoch."""
        r = self.replicas[rid]
        zk = self.zk
        if not r.active or not r.zk_connected or r.known_epoch >= zk.epoch:
            return
        self._sync_hw(r)
        continuing = (
            r.lstate is not None and r.lstate.leader_epoch == r.known_epoch and zk.leader == rid
        )
        r.known_epoch = zk.epoch
        r.leader_id = zk.leader
        r.truncating = False
        if zk.leader == rid:
            r.cache.assign(zk.epoch, r.leo)
            if continuing and r.lstate is not None:
                r.lstate.on_new_leader_epoch(
                    leader_epoch=zk.epoch, replicas=self.assignment, isr=zk.isr,
                    zk_version=zk.version, now_ms=self.now,
                )
            else:
                r.lstate = self.leader_state(
                    leader_id=rid, leader_epoch=zk.epoch, replicas=self.assignment, isr=zk.isr,
                    zk_version=zk.version, log_end_offset=r.leo, log_start_offset=0,
                    high_watermark=r.hw, now_ms=self.now, epochs=r.cache,
                )
            self._sync_hw(r)
            return
        r.lstate = None
        if zk.leader != NO_LEADER:
            r.truncating = True
            r.ask_epoch = first_request_epoch(r.cache)

    def append(self, rid: int, count: int) -> None:
        r = self.replicas[rid]
        if not r.active or r.lstate is None:
            return
        for _ in range(count):
            self.value += 1
            r.log.append((r.lstate.leader_epoch, self.value))
        r.lstate.on_leader_append(r.leo)
        self._sync_hw(r)

    def truncate_step(self, rid: int) -> None:
        """One OffsetForLeaderEpoch round (or the no-epoch fallback to the HW)."""
        f = self.replicas[rid]
        leader = self._leader_for(f)
        if leader is None or not f.truncating:
            return
        if f.ask_epoch is None:
            self._truncate(f, f.hw)
            f.truncating = False
            return
        answer = leader.cache.end_offset_for(f.ask_epoch, leader.leo)
        self._follow_answer(f, answer.epoch, answer.end_offset)

    def fetch(self, rid: int, max_entries: int) -> None:
        f = self.replicas[rid]
        leader = self._leader_for(f)
        if leader is None or f.truncating or leader.lstate is None:
            return
        st = leader.lstate
        # Kafka 3.x answers with the HW from before this fetch moved it, so followers'
        # HWs lag one round behind the leader's (the case the epoch-start rule is for).
        hw_before = st.high_watermark
        last_epoch = f.cache.latest_epoch  # Kafka sends the cache's latest epoch
        try:
            result = st.on_follower_fetch(rid, f.leo, last_epoch, self.now, leader.leo)
        except OffsetOutOfRangeError:
            f.truncating, f.ask_epoch = True, first_request_epoch(f.cache)
            return
        self._sync_hw(leader)
        if result.diverging_epoch is not None:
            self._follow_answer(f, *result.diverging_epoch)
            return
        start = f.leo
        for offset, entry in enumerate(leader.log[start : start + max_entries], start):
            f.cache.assign(entry[0], offset)
            f.log.append(entry)
        f.hw = follower_high_watermark(hw_before, f.leo)
        if result.expand_isr and st.pending is None:
            st.begin_isr_change(st.expanded_isr(rid))

    def shrink_isr(self, rid: int) -> None:
        r = self.replicas[rid]
        if not r.active or r.lstate is None:
            return
        proposal = r.lstate.maybe_shrink_isr(self.now, LAG_MS)
        if proposal is not None:
            r.lstate.begin_isr_change(proposal)

    def write_isr(self, rid: int) -> None:
        """The leader's conditional write of its pending ISR change lands or fails."""
        r = self.replicas[rid]
        if not r.active or r.lstate is None or r.lstate.pending is None:
            return
        pending = r.lstate.pending
        if r.zk_connected and self.zk.version == pending.expected_zk_version:
            self.zk = Znode(self.zk.leader, self.zk.epoch, pending.proposed_isr,
                            self.zk.version + 1)
            r.lstate.apply_committed_isr(pending.proposed_isr, self.zk.version)
        else:
            r.lstate.abort_isr_change()  # BadVersion or no session: re-read later
        self._sync_hw(r)

    # -- faults -------------------------------------------------------------------------

    def crash(self, rid: int, hw_checkpoint_lag: int) -> None:
        r = self.replicas[rid]
        if not r.alive:
            return
        self._sync_hw(r)
        was_live = r.zk_connected
        r.alive, r.paused, r.lstate, r.truncating = False, False, None, False
        r.known_epoch, r.leader_id = -1, NO_LEADER
        r.hw = max(0, r.hw - hw_checkpoint_lag)  # the HW checkpoint is periodic
        if was_live:
            self.controller_on_loss(rid)

    def restart(self, rid: int) -> None:
        r = self.replicas[rid]
        if r.alive:
            return
        r.alive, r.zk_connected = True, True
        self.controller_on_join()

    def isolate_from_zk(self, rid: int) -> None:
        r = self.replicas[rid]
        if r.alive and r.zk_connected:
            r.zk_connected = False
            self.controller_on_loss(rid)

    def reconnect_to_zk(self, rid: int) -> None:
        r = self.replicas[rid]
        if r.alive and not r.zk_connected:
            r.zk_connected = True
            self.controller_on_join()

    def controlled_shutdown(self, rid: int) -> None:
        """Leadership and ISR membership move away first, then the broker stops."""
        r = self.replicas[rid]
        if not r.alive or not r.zk_connected:
            return
        zk = self.zk
        if zk.leader == rid:
            decision = controlled_shutdown_election(self.assignment, zk.isr, self.live(), {rid})
            if decision is not None:
                self._bump(decision.leader, decision.isr)
        elif rid in zk.isr and len(zk.isr) > 1:
            self._bump(zk.leader, tuple(x for x in zk.isr if x != rid))
        for other in self.replicas:
            self.learn(other.rid)
        self.crash(rid, 0)

    # -- invariants ---------------------------------------------------------------------

    def check(self) -> None:
        for r in self.replicas:
            assert r.hw <= r.leo, (r.rid, r.hw, r.leo)
            st = r.lstate
            if st is None or not r.alive:
                continue
            hw = st.high_watermark
            assert hw <= r.leo
            seen = self.hw_seen.get(r.rid)
            if seen is not None and seen[0] is st:
                assert hw >= seen[1], f"leader {r.rid} HW went back from {seen[1]} to {hw}"
            self.hw_seen[r.rid] = (st, hw)
            common = min(hw, len(self.ref))
            assert r.log[:common] == self.ref[:common], (
                f"leader {r.rid} (epoch {st.leader_epoch}) committed entries that differ "
                f"from the committed log: {r.log[:common]} vs {self.ref[:common]}"
            )
            if hw > len(self.ref):
                self.ref.extend(r.log[len(self.ref) : hw])
        for m in self.zk.isr:
            log = self.replicas[m].log
            assert log[: len(self.ref)] == self.ref, (
                f"ISR member {m} lacks committed entries: {log} vs committed {self.ref}"
            )

    def converge(self) -> None:
        """Heal every fault, then replicate until nothing moves; check convergence."""
        self.cut.clear()
        for r in self.replicas:
            r.paused = False
            if not r.alive:
                self.restart(r.rid)
            elif not r.zk_connected:
                self.reconnect_to_zk(r.rid)
        self.controller_on_join()
        assert self.zk.leader != NO_LEADER, f"no leader after healing: {self.zk}"
        for _ in range(50):
            for r in self.replicas:
                self.learn(r.rid)
            for r in self.replicas:
                for _ in range(2 * len(self.replicas) + 2):
                    self.truncate_step(r.rid)
                self.fetch(r.rid, 10**6)
                self.fetch(r.rid, 0)  # learns the HW its last fetch moved
            for r in self.replicas:
                self.write_isr(r.rid)
            self.check()
        leader = self.replicas[self.zk.leader]
        assert leader.lstate is not None
        assert set(self.zk.isr) == set(self.assignment), f"ISR did not heal: {self.zk}"
        assert leader.log[: len(self.ref)] == self.ref
        for r in self.replicas:
            assert r.log == leader.log, f"replica {r.rid} diverges: {r.log} vs {leader.log}"
            assert r.hw == r.leo, f"replica {r.rid} HW {r.hw} below its log end {r.leo}"
            # The cache describes the log: where each epoch's entries start (an entry at
            # the log end, for an epoch that wrote nothing yet, is allowed).
            starts = [(e.epoch, e.start_offset) for e in r.cache.entries if e.start_offset < r.leo]
            expected = [(epoch, i) for i, (epoch, _) in enumerate(r.log)
                        if i == 0 or r.log[i - 1][0] != epoch]
            assert starts == expected, f"replica {r.rid} cache {r.cache} vs log {r.log}"
