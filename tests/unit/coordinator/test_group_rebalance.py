"""The classic group protocol, request by request, against Kafka's documented behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.messages import LeaveMember
from tidegate.coordinator.group.states import (
    TRANSITIONS,
    GroupState,
    IllegalStateTransition,
    check_transition,
)
from tidegate.coordinator.runtime import PARKED

from .harness import FAST, REBALANCE, SESSION, Harness, sub, sync_all

E, P, C, S, D = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                 GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_transition_table_is_kafkas() -> None:
    assert TRANSITIONS[E] == {P, D}
    assert TRANSITIONS[S] == {P, D}
    assert TRANSITIONS[C] == {P, S, D}
    assert TRANSITIONS[P] == {C, E, D}
    with pytest.raises(IllegalStateTransition):
        check_transition(E, S)
    for state in GroupState:
        assert state.doc  # each state says what it does with each request


def test_member_id_required_round_trip(h: Harness) -> None:
    _, first = h.join("g", client="cli")
    assert first.error == ErrorCode.member_id_required
    assert first.member_id.startswith("cli-")
    assert h.shard.groups["g"].pending  # not a member yet
    _, resp = h.join("g", first.member_id, client="cli")
    assert resp is PARKED  # the initial rebalance delay
    h.advance(3000)


def test_pending_member_expires_after_its_session(h: Harness) -> None:
    _, first = h.join("g")
    h.advance(SESSION + 100)
    assert "g" not in h.shard.groups  # nothing left: an ephemeral group is forgotten
    _, resp = h.join("g", first.member_id)
    assert resp.error == ErrorCode.unknown_member_id


def test_old_join_versions_get_an_id_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, FAST)
    _, resp = h.join("g", require_known=False)
    assert resp.error == ErrorCode.none and resp.generation_id == 1
    assert resp.leader == resp.member_id


def test_initial_delay_gathers_members_then_one_generation(h: Harness) -> None:
    joined = h.form("g", ["a", "b", "c"])
    gens = {r.generation_id for r in joined.values()}
    assert gens == {1}
    leaders = {r.leader for r in joined.values()}
    assert len(leaders) == 1
    leader = next(r for r in joined.values() if r.member_id == r.leader)
    assert leader is joined["a"]  # the first member to join leads
    assert {m.member_id for m in leader.members} == {r.member_id for r in joined.values()}
    assert all(not r.members for r in joined.values() if r is not leader)
    assert h.shard.groups["g"].state is C


def test_initial_delay_extends_while_members_arrive(h: Harness) -> None:
    t1, _ = h.join_new("g", "a")
    h.advance(2000)
    t2, _ = h.join_new("g", "b")  # a new member during the delay: it is extended
    h.advance(1500)
    assert h.reply(t1) is PARKED  # 3.5 s: the delay was extended to 6 s
    h.advance(2000)
    assert h.reply(t1) is PARKED
    h.advance(600)
    assert h.reply(t1).generation_id == h.reply(t2).generation_id == 1


def test_sync_hands_out_the_leaders_assignment_and_stores_it(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    got = sync_all(h, "g", joined)
    assert got["a"] != got["b"]
    g = h.shard.groups["g"]
    assert g.state is S and g.stored is not None and g.stored.generation == 1
    assert {m.member_id: m.assignment for m in g.stored.members} == {
        joined[c].member_id: got[c] for c in got}
    h.restart()
    g = h.shard.groups["g"]
    assert g.state is S and g.generation == 1
    assert {m.assignment for m in g.members.values()} == set(got.values())


def test_follower_sync_waits_for_the_leader(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    tok, resp = h.sync("g", 1, joined["b"].member_id)
    assert resp is PARKED
    h.sync("g", 1, joined["a"].member_id, {joined["b"].member_id: b"B"})
    assert h.reply(tok).assignment == b"B"


def test_members_left_out_by_the_leader_get_an_empty_assignment(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    tok, _ = h.sync("g", 1, joined["b"].member_id)
    h.sync("g", 1, joined["a"].member_id, {joined["a"].member_id: b"A", "stranger": b"X"})
    assert h.reply(tok).assignment == b""
    assert "stranger" not in {m.member_id for m in h.shard.groups["g"].stored.members}


def test_stable_follower_rejoin_without_change_gets_current_generation(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    sync_all(h, "g", joined)
    _, resp = h.join("g", joined["b"].member_id, client="b")
    assert resp.error == ErrorCode.none and resp.generation_id == 1 and not resp.members
    assert h.shard.groups["g"].state is S


def test_new_member_triggers_rebalance_and_rejoin(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    sync_all(h, "g", joined)
    t_c, _ = h.join_new("g", "c")
    assert h.shard.groups["g"].state is P
    assert h.heartbeat("g", 1, joined["a"].member_id) == ErrorCode.rebalance_in_progress
    ta, _ = h.join("g", joined["a"].member_id, client="a")
    tb, _ = h.join("g", joined["b"].member_id, client="b")
    replies = [h.reply(t) for t in (ta, tb, t_c)]
    assert {r.generation_id for r in replies} == {2}
    assert h.shard.groups["g"].state is C


def test_rebalance_timeout_removes_members_that_do_not_rejoin(h: Harness) -> None:
    joined = h.form("g", ["a", "b"], rebalance_ms=20_000)
    sync_all(h, "g", joined)
    h.join_new("g", "c", rebalance_ms=20_000)
    ta, _ = h.join("g", joined["a"].member_id, client="a", rebalance_ms=20_000)
    # b keeps heartbeating but never rejoins
    for _ in range(19):
        h.advance(1000)
        h.heartbeat("g", 1, joined["b"].member_id)
    h.advance(1100)
    assert h.reply(ta).generation_id == 2
    assert joined["b"].member_id not in h.shard.groups["g"].members
    assert h.heartbeat("g", 2, joined["b"].member_id) == ErrorCode.unknown_member_id


def test_session_expiry_removes_a_member_and_rebalances(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    sync_all(h, "g", joined)
    for _ in range(SESSION // 1000 + 1):
        h.advance(1000)
        h.heartbeat("g", 1, joined["a"].member_id)
    g = h.shard.groups["g"]
    assert joined["b"].member_id not in g.members and g.state is P


def test_leader_leaving_hands_leadership_to_a_member(h: Harness) -> None:
    joined = h.form("g", ["a", "b", "c"])
    sync_all(h, "g", joined)
    resp = h.leave("g", LeaveMember(joined["a"].member_id))
    assert resp.members[0][1] == ErrorCode.none
    tb, _ = h.join("g", joined["b"].member_id, client="b")
    tc, _ = h.join("g", joined["c"].member_id, client="c")
    rb, rc = h.reply(tb), h.reply(tc)
    assert rb.leader == rc.leader != joined["a"].member_id
    assert rb.generation_id == 2


def test_last_member_leaving_empties_the_group_with_a_record(h: Harness) -> None:
    joined = h.form("g", ["a"])
    sync_all(h, "g", joined)
    h.leave("g", LeaveMember(joined["a"].member_id))
    g = h.shard.groups["g"]
    assert g.state is E and g.generation == 2 and g.stored is not None and not g.stored.members
    h.restart()
    assert h.shard.groups["g"].state is E and h.shard.groups["g"].generation == 2


def test_leave_errors_are_per_member(h: Harness) -> None:
    joined = h.form("g", ["a"], static=True)
    resp = h.leave("g", LeaveMember("nobody"), LeaveMember("x", "i-a"),
                   LeaveMember("", "i-zzz"))
    assert [c for _, c in resp.members] == [
        ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id, ErrorCode.unknown_member_id]
    resp = h.leave("g", LeaveMember("", "i-a"))  # removal by instance id (admin tools)
    assert resp.members[0][1] == ErrorCode.none
    assert joined["a"].member_id not in h.shard.groups["g"].members
    assert h.leave("nogroup", LeaveMember("m")).members[0][1] == ErrorCode.unknown_member_id


def test_protocol_vote_and_inconsistent_protocols(h: Harness) -> None:
    both = (("range", sub()), ("roundrobin", sub()))
    rr_first = (("roundrobin", sub()), ("range", sub()))
    joined = h.form("g", ["a", "b", "c"], protocols=both)
    assert joined["a"].protocol_name == "range"
    sync_all(h, "g", joined)
    _, resp = h.join("g", protocols=(("sticky", sub()),))
    assert resp.error == ErrorCode.inconsistent_group_protocol
    _, resp = h.join("g", protocol_type="connect", protocols=both)
    assert resp.error == ErrorCode.inconsistent_group_protocol
    # two of three now prefer roundrobin: it wins the next election
    tb, _ = h.join("g", joined["b"].member_id, client="b", protocols=rr_first)
    tc, _ = h.join("g", joined["c"].member_id, client="c", protocols=rr_first)
    ta, _ = h.join("g", joined["a"].member_id, client="a", protocols=both)
    assert {h.reply(t).protocol_name for t in (ta, tb, tc)} == {"roundrobin"}


def test_session_timeout_bounds(h: Harness) -> None:
    assert h.join("g", session=5999)[1].error == ErrorCode.invalid_session_timeout
    assert h.join("g", session=1_800_001)[1].error == ErrorCode.invalid_session_timeout
    assert h.join("", session=SESSION)[1].error == ErrorCode.invalid_group_id


def test_stale_generation_and_unknown_members(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    sync_all(h, "g", joined)
    a = joined["a"].member_id
    assert h.heartbeat("g", 0, a) == ErrorCode.illegal_generation
    assert h.sync("g", 7, a)[1].error == ErrorCode.illegal_generation
    assert h.heartbeat("g", 1, "who") == ErrorCode.unknown_member_id
    assert h.heartbeat("nogroup", 1, a) == ErrorCode.unknown_member_id
    assert h.join("g", "who")[1].error == ErrorCode.unknown_member_id
    assert h.sync("g", 1, a, protocol_name="roundrobin")[1].error == \
        ErrorCode.inconsistent_group_protocol
    h.join_new("g", "c")  # PreparingRebalance
    assert h.sync("g", 1, a)[1].error == ErrorCode.rebalance_in_progress


def test_rebalance_answers_parked_syncs_with_rebalance_in_progress(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    tok, _ = h.sync("g", 1, joined["b"].member_id)
    h.join_new("g", "c")
    assert h.reply(tok).error == ErrorCode.rebalance_in_progress


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(h: Harness) -> None:
    joined = h.form("g", ["a", "b"])
    tok, _ = h.sync("g", 1, joined["b"].member_id)
    h.advance(REBALANCE + 100)
    assert h.reply(tok).error == ErrorCode.rebalance_in_progress
    assert joined["a"].member_id not in h.shard.groups["g"].members


def test_static_member_restart_keeps_assignment_without_rebalance(h: Harness) -> None:
    joined = h.form("s", ["a", "b"], static=True)
    ra = joined["a"]
    got = sync_all(h, "s", joined)
    g = h.shard.groups["s"]
    gen = g.generation
    # "a" restarts: a JoinGroup with no member id and its instance id
    _, again = h.join("s", client="a", instance="i-a")
    assert again.error == ErrorCode.none and again.generation_id == gen
    assert again.member_id != ra.member_id
    assert g.state is S and g.generation == gen  # no rebalance
    assert again.skip_assignment and again.leader == again.member_id  # a led (KIP-814)
    assert {m.member_id for m in again.members} == {again.member_id, joined["b"].member_id}
    _, synced = h.sync("s", gen, again.member_id, instance="i-a")
    assert synced.assignment == got["a"]
    # the old incarnation is fenced
    assert h.heartbeat("s", gen, ra.member_id, "i-a") == ErrorCode.fenced_instance_id
    assert h.join("s", ra.member_id, instance="i-a")[1].error == ErrorCode.fenced_instance_id
    assert h.sync("s", gen, ra.member_id, instance="i-a")[1].error == \
        ErrorCode.fenced_instance_id
    assert h.commit("s", {("t", 0): 1}, generation=gen, member_id=ra.member_id,
                    instance="i-a") == {("t", 0): ErrorCode.fenced_instance_id}
    # the new member id is stored: it survives a coordinator restart
    h.restart()
    g = h.shard.groups["s"]
    assert g.static_members["i-a"] == again.member_id and g.generation == gen
    assert g.members[again.member_id].assignment == got["a"]


def test_static_follower_restart_gets_an_empty_member_list(h: Harness) -> None:
    joined = h.form("s", ["a", "b"], static=True)
    sync_all(h, "s", joined)
    _, again = h.join("s", client="b", instance="i-b")
    assert again.error == ErrorCode.none and not again.members and not again.skip_assignment
    assert again.leader == joined["a"].member_id


def test_static_leader_rejoin_before_kip_814_is_told_the_old_leader(h: Harness) -> None:
    joined = h.form("s", ["a", "b"], static=True)
    sync_all(h, "s", joined)
    _, again = h.join("s", client="a", instance="i-a", skip_capable=False)
    assert again.leader == joined["a"].member_id != again.member_id
    assert not again.skip_assignment


def test_static_member_rejoin_with_new_protocol_rebalances(h: Harness) -> None:
    joined = h.form("s", ["a"], static=True)
    sync_all(h, "s", joined)
    _, resp = h.join("s", client="a", instance="i-a", protocols=(("sticky", sub()),))
    assert resp.error == ErrorCode.inconsistent_group_protocol  # not what the group speaks
    tok, _ = h.join("s", client="a", instance="i-a",
                    protocols=(("roundrobin", sub()), ("range", sub())))
    assert h.shard.groups["s"].generation == 2 and h.reply(tok).protocol_name == "roundrobin"


def test_static_member_not_rejoining_stays_until_its_session_ends(h: Harness) -> None:
    joined = h.form("s", ["a", "b"], static=True)
    sync_all(h, "s", joined)
    h.join_new("s", "c")
    ta, _ = h.join("s", joined["a"].member_id, client="a", instance="i-a")
    assert h.reply(ta) is PARKED
    h.advance(SESSION + 100)  # b neither rejoins nor heartbeats: its session ends
    assert joined["b"].member_id not in h.shard.groups["s"].members
    assert h.reply(ta).generation_id == 2


def test_static_member_whose_session_ended_while_syncing_still_expires(h: Harness) -> None:
    """A session that ends while the member is parked in SyncGroup is ignored; when a new
    rebalance answers that SyncGroup, the member gets a new session (Kafka's
    propagateAssignment), so a static member that is gone is removed in time instead of
    holding the group in PreparingRebalance for ever."""
    ta, _ = h.join_new("g", "a")
    tb, _ = h.join("g", client="b", instance="i-b")
    h.advance(7000)  # the initial delay, extended once for b
    a, b = h.reply(ta), h.reply(tb)
    assert a.generation_id == b.generation_id == 1 and a.leader == a.member_id
    sb, _ = h.sync("g", 1, b.member_id, instance="i-b")  # waits for the leader
    h.advance(100)
    assert h.heartbeat("g", 1, a.member_id) == ErrorCode.none
    h.advance(SESSION + 100)  # b's session ends while parked (kept), then a's (removed)
    g = h.shard.groups["g"]
    assert h.reply(sb).error == ErrorCode.rebalance_in_progress
    assert g.state is P and list(g.members) == [b.member_id]
    h.advance(SESSION + 100)  # b never rejoins: its new session ends
    assert g.state is E and not g.members


def test_group_max_size(tmp_path: Path) -> None:
    h = Harness(tmp_path, GroupConfig(initial_rebalance_delay_ms=0, max_size=1))
    h.join_new("g", "a")
    assert h.join("g", client="b")[1].error == ErrorCode.group_max_size_reached


def test_describe_and_list(h: Harness) -> None:
    from tidegate.coordinator.group import admin

    joined = h.form("g", ["a", "b"])
    d = h.describe("g")
    assert d.state == "CompletingRebalance" and d.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    got = sync_all(h, "g", joined)
    d = h.describe("g")
    assert d.state == "Stable" and d.protocol == "range" and d.protocol_type == "consumer"
    assert {m.assignment for m in d.members} == set(got.values())
    assert {m.client_host for m in d.members} == {"/127.0.0.1"}
    assert h.describe("nope").state == "Dead" and h.describe("nope").error == ErrorCode.none
    assert h.describe("nope", v6=True).error == ErrorCode.group_id_not_found
    listed = admin.list_groups(h.shard)
    assert [(g.group_id, g.state) for g in listed] == [("g", "Stable")]
    assert admin.list_groups(h.shard, ["empty"]) == []
    assert admin.list_groups(h.shard, ["STABLE"], ["Classic"])
    assert admin.list_groups(h.shard, [], ["consumer"]) == []
