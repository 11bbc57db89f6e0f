"""Hypothesis drives a group with dynamic and static members through joins, syncs,
heartbeats, commits, leaves, crashes, time passing and coordinator restarts (a replay
of the log), checking after every step:

- structure: the leader is a member; Empty means no members; static ids map to members;
- one generation at a time: the generation moves forward only through a rebalance and
  is the stored one whenever the group is Stable or Empty; successful SyncGroups of one
  generation hand out the leader's assignment for that generation, disjoint between
  members, and never for two different assignments of one generation (a static
  member restarting while Stable takes over its old member id's share of the same
  generation, as in Kafka);
- sessions: every member is on a session timer unless it waits for a join or a
  SyncGroup whose end gives it a new one;
- assignment only to current members: in Stable the members are exactly the stored
  members, with the stored assignments;
- replay reproduces the state: a fresh shard replaying the log has the same stored
  groups and offsets, and the same live groups where the live group is Stable/Empty;
- liveness: once clients go quiet, every parked request is answered within the
  rebalance and session timeouts, and the group ends up Empty.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.messages import JoinResponse, LeaveMember, SyncResponse
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import PARKED
from tidegate.protocol.coordinator_records import assignment_partitions, encode_assignment

from .harness import REBALANCE, SESSION, Harness

GROUP = "g"
PARTITIONS = 6
CLIENTS = [("d0", None), ("d1", None), ("s0", "i-s0"), ("s1", "i-s1")]


@dataclass
class _Just:
    """Stands in for `st.data()` when a rule is called with a chosen client (also by
    the replayed sequences below: every draw answers that client)."""

    name: str

    def draw(self, _strategy: Any, label: Any = None) -> str:
        return self.name


def st_just(_data: Any, name: str) -> Any:
    return _Just(name)


@dataclass
class Client:
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    join_token: int | None = None
    sync_token: int | None = None
    joined: JoinResponse | None = None  # awaiting its SyncGroup
    synced: bool = False

    def reset(self) -> None:
        self.member_id, self.generation, self.joined, self.synced = "", -1, None, False
        self.join_token = self.sync_token = None


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tg-groups-"))
        self.h = Harness(self.dir, GroupConfig(initial_rebalance_delay_ms=300))
        self.clients = {name: Client(name, inst) for name, inst in CLIENTS}
        self.leader_plans: dict[int, dict[str, bytes]] = {}  # generation -> assignment
        self.synced: dict[int, dict[str, bytes]] = {}  # generation -> member -> assignment
        self.instances: dict[int, dict[str, str]] = {}  # generation -> instance -> member
        self.last_generation = 0

    def teardown(self) -> None:
        self.h.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- plumbing -------------------------------------------------------------------------

    def _group(self) -> Any:
        return self.h.shard.groups.get(GROUP)

    def _on_join(self, c: Client, r: Any) -> None:
        c.join_token = None
        assert isinstance(r, JoinResponse), r
        if r.error == ErrorCode.none:
            assert r.generation_id >= 1
            c.member_id, c.generation, c.joined, c.synced = r.member_id, r.generation_id, r, False
            if c.instance is not None:
                self._static_member_replaced(r.generation_id, c.instance, r.member_id)
            if r.member_id == r.leader and r.members:
                ids = sorted(m.member_id for m in r.members)
                assert c.member_id in ids
                plan = {mid: encode_assignment({"t": list(range(i, PARTITIONS, len(ids)))})
                        for i, mid in enumerate(ids)}
                prior = self.leader_plans.get(r.generation_id)
                assert prior is None or set(prior) == set(plan), "two member lists, one gen"
                self.leader_plans.setdefault(r.generation_id, plan)
                self.instances.setdefault(r.generation_id, {
                    m.group_instance_id: m.member_id for m in r.members
                    if m.group_instance_id is not None})
        elif r.error == ErrorCode.member_id_required:
            c.member_id = r.member_id
        elif r.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            c.reset()
        else:
            assert r.error == ErrorCode.rebalance_in_progress, r

    def _static_member_replaced(self, gen: int, instance: str, member_id: str) -> None:
        """A static member that restarted (new member id, same group.instance.id) while
        the group was Stable is answered with the *current* generation, without a
        rebalance (KIP-345; Kafka's updateStaticMemberAndRebalance): the coordinator
        stores the group with the new member id in place of the old one, the new id
        inherits the old one's assignment, and a leader is told so with
        skip_assignment=True and the member list holding the new id (KIP-814). So one
        generation can legitimately be handed out with two member lists that differ
        exactly by that replacement: re-key the generation's plan to the new id, and
        drop what the fenced old id synced (its partitions now belong to the new id)."""
        owners = self.instances.get(gen)
        old = owners.get(instance) if owners is not None else None
        if owners is None or old is None or old == member_id:
            return
        owners[instance] = member_id
        plan = self.leader_plans.get(gen)
        if plan is not None and old in plan:
            plan[member_id] = plan.pop(old)
        self.synced.get(gen, {}).pop(old, None)

    def _on_sync(self, c: Client, r: Any) -> None:
        c.sync_token = None
        assert isinstance(r, SyncResponse), r
        if r.error == ErrorCode.none:
            gen = c.generation
            plan = self.leader_plans.get(gen)
            assert plan is not None, "a sync succeeded before any leader planned"
            assert r.assignment == plan.get(c.member_id, b""), "not the leader's assignment"
            got = self.synced.setdefault(gen, {})
            assert got.get(c.member_id, r.assignment) == r.assignment
            got[c.member_id] = r.assignment
            c.synced, c.joined = True, None
        elif r.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            c.reset()
        else:
            assert r.error in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation), r
            c.joined = None

    def _deliver(self) -> None:
        for c in self.clients.values():
            if c.join_token is not None and c.join_token in self.h.replies:
                self._on_join(c, self.h.replies.pop(c.join_token))
            if c.sync_token is not None and c.sync_token in self.h.replies:
                self._on_sync(c, self.h.replies.pop(c.sync_token))

    # -- rules ----------------------------------------------------------------------------

    def _pick(self, data: Any, ok: Any) -> Client | None:
        if isinstance(data, _Just):
            c = self.clients[data.name]
            return c if ok(c) else None
        names = [n for n, c in self.clients.items() if ok(c)]
        return self.clients[data.draw(st.sampled_from(names))] if names else None

    @rule(data=st.data(), protocols=st.sampled_from(["range", "both"]))
    def join(self, data: st.DataObject, protocols: str) -> None:
        """A client (re)joins; a new dynamic member does the MEMBER_ID_REQUIRED round
        trip at once, as real clients do."""
        c = self._pick(data, lambda c: c.join_token is None)
        if c is None:
            return
        from .harness import sub

        proto = (("range", sub()),) if protocols == "range" else (
            ("range", sub()), ("roundrobin", sub()))
        for _ in range(2):
            tok, r = self.h.join(GROUP, c.member_id, client=c.name, instance=c.instance,
                                 protocols=proto, session=SESSION, rebalance_ms=REBALANCE)
            c.join_token = tok
            if r is PARKED:
                break
            self.h.replies.pop(tok, None)
            self._on_join(c, r)
            if r.error != ErrorCode.member_id_required:
                break
        self._deliver()

    @rule(data=st.data())
    def sync(self, data: st.DataObject) -> None:
        c = self._pick(data, lambda c: c.joined is not None and c.sync_token is None)
        if c is None or c.joined is None:
            return
        plan = self.leader_plans.get(c.generation, {}) if c.member_id == c.joined.leader else {}
        tok, r = self.h.sync(GROUP, c.generation, c.member_id, plan, instance=c.instance)
        c.sync_token = tok
        if r is not PARKED:
            self.h.replies.pop(tok, None)
            self._on_sync(c, r)
        self._deliver()

    def _progress(self, data: st.DataObject) -> None:
        """What a well-behaved client does next: join, sync, or heartbeat (and rejoin
        when told to)."""
        c = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        if c.joined is not None and c.sync_token is None:
            self.sync(st_just(data, c.name))
        elif c.join_token is None and (not c.member_id or c.generation < 0):
            self.join(st_just(data, c.name), "range")
        elif c.member_id and c.generation >= 0 and c.join_token is None:
            code = self.h.heartbeat(GROUP, c.generation, c.member_id, c.instance)
            if code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                c.reset()
            elif code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
                self.join(st_just(data, c.name), "range")
        self.h.advance(100)
        self._deliver()

    @rule(data=st.data())
    def progress(self, data: st.DataObject) -> None:
        self._progress(data)

    @rule(data=st.data())
    def progress_more(self, data: st.DataObject) -> None:
        self._progress(data)

    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        c = self._pick(data, lambda c: bool(c.member_id) and c.generation >= 0)
        if c is None:
            return
        code = self.h.heartbeat(GROUP, c.generation, c.member_id, c.instance)
        if code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            c.reset()
        else:
            assert code in (ErrorCode.none, ErrorCode.rebalance_in_progress,
                            ErrorCode.illegal_generation), code
        self._deliver()

    @rule(name=st.sampled_from([n for n, _ in CLIENTS]), offset=st.integers(0, 100))
    def commit(self, name: str, offset: int) -> None:
        c = self.clients[name]
        g = self._group()
        before = (g.state, g.generation, c.member_id in g.members) if g else None
        res = self.h.commit(GROUP, {("t", 0): offset}, generation=c.generation,
                            member_id=c.member_id, instance=c.instance)
        if res[("t", 0)] == ErrorCode.none:
            assert before is None or (before[0] is GroupState.EMPTY and c.generation < 0) or (
                before[2] and before[1] == c.generation
                and before[0] in (GroupState.STABLE, GroupState.PREPARING_REBALANCE))
            assert self.h.fetch(GROUP, [("t", 0)]) == {("t", 0): offset}
        self._deliver()

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        c = self._pick(data, lambda c: bool(c.member_id))
        if c is None:
            return
        self.h.leave(GROUP, LeaveMember(c.member_id, c.instance))
        self._deliver()
        c.reset()

    @rule(name=st.sampled_from([n for n, _ in CLIENTS]))
    def crash(self, name: str) -> None:
        """The process dies: a static member will come back with its instance id."""
        self.clients[name].reset()

    @rule(ms=st.sampled_from([100, 100, 500, 1000, 3000, SESSION // 2, SESSION + 100]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)
        self._deliver()

    @rule()
    def restart_coordinator(self) -> None:
        self.h.restart()
        for c in self.clients.values():  # connections drop: parked requests are lost
            c.join_token = c.sync_token = None
        # Generations formed but never stored are forgotten, and their numbers are
        # used again (as after a Kafka coordinator failover); stored ones are kept.
        g = self._group()
        stored = g.stored.generation if g is not None and g.stored is not None else 0
        for gen in [k for k in self.leader_plans if k > stored]:
            assert gen not in self.synced, "a generation was handed out but not stored"
            del self.leader_plans[gen]
            self.instances.pop(gen, None)
        self.last_generation = g.generation if g is not None else 0

    @rule()
    def go_quiet_now(self) -> None:
        self.go_quiet()

    @rule()
    def go_quiet(self) -> None:
        """Nobody talks for long enough: every parked request must be answered and the
        group must end up Empty (or gone)."""
        self.h.advance(2 * REBALANCE + SESSION)
        self._deliver()
        for c in self.clients.values():
            assert c.join_token is None and c.sync_token is None, c
            c.reset()
        g = self._group()
        assert g is None or (g.state is GroupState.EMPTY and not g.members), g

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def structure(self) -> None:
        g = self._group()
        if g is None:
            return
        if g.members:
            assert g.leader in g.members
        if g.state is GroupState.EMPTY:
            assert not g.members
        for inst, mid in g.static_members.items():
            assert g.members[mid].group_instance_id == inst
        assert not set(g.pending) & set(g.members)

    @invariant()
    def one_generation_at_a_time(self) -> None:
        g = self._group()
        if g is None:
            return
        stored_gen = g.stored.generation if g.stored else 0
        if g.state in (GroupState.STABLE, GroupState.EMPTY) and g.stored is not None:
            assert g.generation == stored_gen
        if g.state is GroupState.COMPLETING_REBALANCE:
            assert g.generation > stored_gen  # formed, not yet stored
        assert g.generation >= stored_gen
        assert g.generation >= self.last_generation  # never backwards (bar a restart)
        self.last_generation = g.generation
        for gen, got in self.synced.items():
            owned = [p for a in got.values() for p in (assignment_partitions(a) or {}).get("t", [])]
            assert len(owned) == len(set(owned)), f"generation {gen} assigned a partition twice"

    @invariant()
    def every_member_has_a_session(self) -> None:
        """Outside a join phase each member is on a session timer (or parked in a
        SyncGroup, which the sync deadline bounds). While a rebalance is being prepared,
        a member that has rejoined waits for the join to complete (Kafka's
        hasSatisfiedHeartbeat: an awaiting, not new, member needs no heartbeat); every
        other one — not rejoined, or new — must still be on a timer, or a static member
        that is gone would hold the rebalance up for ever."""
        g = self._group()
        if g is None or g.state is GroupState.EMPTY:
            return
        now = self.h.clock.now_ms()
        for mid, m in g.members.items():
            deadline = self.h.shard.timers.get(("member", GROUP, mid))
            if g.state is GroupState.PREPARING_REBALANCE:
                assert (m.awaiting_join and not m.is_new) or deadline is not None, mid
                continue
            assert m.sync_waiter is not None or (
                deadline is not None and deadline <= now + m.session_timeout_ms), mid

    @invariant()
    def assignment_only_to_current_members(self) -> None:
        g = self._group()
        if g is None or g.state is not GroupState.STABLE:
            return
        assert g.stored is not None
        assert set(g.members) == {m.member_id for m in g.stored.members}
        for m in g.stored.members:
            assert g.members[m.member_id].assignment == m.assignment
        for c in self.clients.values():
            if c.synced and c.generation == g.generation and c.member_id in g.members:
                plan = self.leader_plans[c.generation]
                assert g.members[c.member_id].assignment == plan.get(c.member_id, b"")

    @invariant()
    def replay_reproduces_the_state(self) -> None:
        fresh, _ = self.h.runtime.load(0, self.h.log)
        live = self.h.shard
        live_groups = {k: g for k, g in live.groups.items() if g.stored or g.offsets}
        assert set(fresh.groups) == set(live_groups)
        for gid, g in live_groups.items():
            r = fresh.groups[gid]
            assert r.stored == g.stored and r.offsets == g.offsets
            if g.state in (GroupState.STABLE, GroupState.EMPTY):
                assert (r.state, r.generation, r.protocol, r.leader, r.protocol_type) == (
                    g.state, g.generation, g.protocol, g.leader, g.protocol_type)
                assert {k: m.assignment for k, m in r.members.items()} == {
                    k: m.assignment for k, m in g.members.items()}


# Sequences the random runs once failed on (shrunk), replayed step by step: rules are
# (name, args...) where a client name stands for the `data` draw of that client.
_INVARIANTS = ("structure", "one_generation_at_a_time", "every_member_has_a_session",
               "assignment_only_to_current_members", "replay_reproduces_the_state")
_CLIENT_RULES = {"join", "sync", "heartbeat", "leave", "progress"}
REGRESSIONS = {
    # A static leader restarts while Stable: the same generation comes back with the new
    # member id in the member list and skip_assignment (was "two member lists, one gen").
    "static-leader-restart": [("progress", "s1"), ("advance", 500), ("progress", "s1"),
                              ("crash", "s1"), ("progress", "s1"), ("progress", "s1"),
                              ("go_quiet_now",)],
    # A static follower restarts while Stable and syncs: it gets its old incarnation's
    # assignment (was "not the leader's assignment").
    "static-follower-restart": [("join", "d0"), ("join", "s0"), ("advance", 1000),
                                ("sync", "s0"), ("sync", "d0"), ("crash", "s0"),
                                ("join", "s0"), ("sync", "s0"), ("go_quiet_now",)],
    # ... and across a coordinator restart, which loads the stored renamed member.
    "static-restart-then-coordinator-restart": [
        ("join", "s0"), ("join", "d0"), ("advance", 1000), ("sync", "d0"), ("sync", "s0"),
        ("crash", "s0"), ("join", "s0"), ("restart_coordinator",), ("sync", "s0"),
        ("heartbeat", "d0"), ("go_quiet_now",)],
    # s0's session ends while it waits in SyncGroup for the leader d0; d0 then expires and
    # the rebalance answers s0's SyncGroup: s0 must get a new session, or, never
    # rejoining, it holds the group in PreparingRebalance for good (a coordinator bug).
    "session-ended-while-syncing": [("join", "d0"), ("join", "s0"), ("advance", 1000),
                                    ("sync", "s0"), ("advance", 100), ("heartbeat", "d0"),
                                    ("go_quiet_now",)],
}


@pytest.mark.parametrize("steps", REGRESSIONS.values(), ids=REGRESSIONS.keys())
def test_regression_sequence(steps: list[tuple[Any, ...]]) -> None:
    machine = GroupMachine()
    try:
        for name, *args in steps:
            if name in _CLIENT_RULES:
                args = [_Just(args[0]), *args[1:]]
                if name == "join" and len(args) == 1:
                    args.append("range")
            getattr(machine, name)(*args)
            for invariant_name in _INVARIANTS:
                getattr(machine, invariant_name)()
    finally:
        machine.teardown()


# Three runs of the same machine:
# - TestGroupMachine: a fixed (derandomized) sequence of examples, identical on every run;
# - TestGroupMachineRandom: fresh random examples on every run, part of the normal suite
#   (200 examples: ~11-14 s alone on a busy two-core machine, 400 took ~20-27 s; the
#   fixed 150 above and the soak's 1,500 longer ones are unchanged). Hypothesis
#   keeps a failing example in its database (.hypothesis/) and replays it first on the
#   next run;
# - TestGroupMachineSoak: many more and longer sequences (~1-3 minutes); marked `slow`
#   and run only when TIDEGATE_SOAK is set, i.e. by `make soak`.
_COMMON: dict[str, Any] = {
    "deadline": None,  # steps advance a manual clock by up to 70 s of polling
    "suppress_health_check": [HealthCheck.too_slow],
}
GroupMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, derandomize=True, database=None, **_COMMON)
TestGroupMachine = GroupMachine.TestCase


class RandomGroupMachine(GroupMachine):
    pass


RandomGroupMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, **_COMMON)
TestGroupMachineRandom = RandomGroupMachine.TestCase


class SoakGroupMachine(GroupMachine):
    pass


SoakGroupMachine.TestCase.settings = settings(
    max_examples=1500, stateful_step_count=100, **_COMMON)
# Shrinking a failure may take Hypothesis's own 5 minutes on top of the run.
TestGroupMachineSoak = pytest.mark.slow(pytest.mark.timeout(900)(pytest.mark.skipif(
    not os.environ.get("TIDEGATE_SOAK"), reason="soak run: `make soak` (TIDEGATE_SOAK=1)",
)(SoakGroupMachine.TestCase)))
