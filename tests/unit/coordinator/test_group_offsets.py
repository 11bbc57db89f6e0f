"""OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups, expiry and deleted topics."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import offsets
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.messages import LeaveMember
from tidegate.coordinator.group.states import GroupState
from tidegate.protocol.coordinator_records import (
    decode_key,
    decode_offset_commit_value,
)
from tidegate.records.record import iter_batches

from .harness import SESSION, Harness, sub, sync_all

OK = ErrorCode.none
MINUTE = 60_000


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path, GroupConfig(initial_rebalance_delay_ms=3000,
                                         offsets_retention_ms=10 * MINUTE))


def _stable(h: Harness, group: str = "g", clients: tuple[str, ...] = ("a", "b")) -> dict:
    joined = h.form(group, list(clients))
    sync_all(h, group, joined)
    return joined


def test_simple_consumer_commits_create_an_offsets_only_group(h: Harness) -> None:
    assert h.commit("s", {("t", 0): 5, ("t", 1): 7}) == {("t", 0): OK, ("t", 1): OK}
    g = h.shard.groups["s"]
    assert g.state is GroupState.EMPTY and g.protocol_type is None and g.stored is None
    assert h.fetch("s") == {("t", 0): 5, ("t", 1): 7}
    assert h.fetch("s", [("t", 1), ("t", 9)]) == {("t", 1): 7, ("t", 9): -1}
    assert h.fetch("nobody", [("t", 0)]) == {("t", 0): -1}
    assert h.fetch("nobody") == {}
    h.restart()
    assert h.fetch("s") == {("t", 0): 5, ("t", 1): 7}


def test_commit_records_use_kafkas_layout(h: Harness) -> None:
    h.commit("s", {("t", 3): 42}, metadata="meta")
    data = h.log.read(0, 1 << 20)
    (_, recs), = list(iter_batches(data))
    key = decode_key(recs[0].key or b"")
    value = decode_offset_commit_value(recs[0].value or b"")
    assert (key.group, key.topic, key.partition) == ("s", "t", 3)  # type: ignore[union-attr]
    assert recs[0].key[:2] == b"\x00\x01" and recs[0].value[:2] == b"\x00\x03"  # type: ignore[index]
    assert (value.offset, value.metadata, value.commit_timestamp) == (
        42, "meta", h.clock.now_ms())


def test_commit_validation_against_the_group(h: Harness) -> None:
    joined = _stable(h)
    a = joined["a"].member_id
    tp = ("t", 0)
    assert h.commit("g", {tp: 1}, generation=1, member_id=a) == {tp: OK}
    assert h.commit("g", {tp: 1}, generation=0, member_id=a) == {tp: ErrorCode.illegal_generation}
    assert h.commit("g", {tp: 1}, generation=1, member_id="x") == {
        tp: ErrorCode.unknown_member_id}
    assert h.commit("g", {tp: 1}) == {tp: ErrorCode.unknown_member_id}  # -1 needs Empty
    assert h.commit("nog", {tp: 1}, generation=3, member_id="m") == {
        tp: ErrorCode.illegal_generation}
    assert h.commit("nog", {tp: 1}, generation=3, member_id="m", version=9) == {
        tp: ErrorCode.group_id_not_found}  # Kafka 4, OffsetCommit v9+
    assert h.commit("nog", {tp: 1}, version=9) == {tp: OK}  # no generation: a simple group
    h.join_new("g", "c")  # PreparingRebalance: commits still allowed at the current gen
    assert h.commit("g", {tp: 2}, generation=1, member_id=a) == {tp: OK}
    ta, _ = h.join("g", a, client="a")
    h.join("g", joined["b"].member_id, client="b")  # CompletingRebalance
    gen = h.reply(ta).generation_id
    assert h.commit("g", {tp: 3}, generation=gen, member_id=a) == {
        tp: ErrorCode.rebalance_in_progress}
    assert h.fetch("g", [tp]) == {tp: 2}


def test_metadata_too_large_fails_only_that_partition(tmp_path: Path) -> None:
    h = Harness(tmp_path, GroupConfig(offset_metadata_max_bytes=4))
    res = h.commit("s", {("t", 0): 1}, metadata="12345")
    assert res == {("t", 0): ErrorCode.offset_metadata_too_large}
    assert h.commit("s", {("t", 0): 1}, metadata="1234") == {("t", 0): OK}


def test_a_commit_is_a_heartbeat(h: Harness) -> None:
    joined = _stable(h, clients=("a",))
    a = joined["a"].member_id
    for _ in range(3):
        h.advance(SESSION - 1000)
        assert h.commit("g", {("t", 0): 1}, generation=1, member_id=a) == {("t", 0): OK}
    assert a in h.shard.groups["g"].members


def _stay_alive(h: Harness, group: str, member_id: str, ms: int) -> None:
    for _ in range(ms // 5000):
        h.advance(5000)
        assert h.heartbeat(group, 1, member_id) == OK


def test_expiry_counts_from_when_the_group_became_empty(h: Harness) -> None:
    joined = _stable(h, clients=("a",))
    a = joined["a"].member_id
    h.commit("g", {("t", 0): 9}, generation=1, member_id=a)
    _stay_alive(h, "g", a, 15 * MINUTE)
    assert h.expire() == 0  # an old commit, but the group is active
    h.leave("g", LeaveMember(a))
    assert h.shard.groups["g"].state is GroupState.EMPTY
    h.commit("s", {("t", 0): 1})  # a simple consumer: counted from the commit
    h.advance(5 * MINUTE)
    h.restart()  # "empty since" is in the group's record, not the load time
    h.advance(5 * MINUTE - 100)
    assert h.expire() == 0
    h.advance(100)
    assert h.expire() == 2
    assert "g" not in h.shard.groups and "s" not in h.shard.groups
    h.restart()  # tombstones: gone for good
    assert "g" not in h.shard.groups and "s" not in h.shard.groups


def test_stable_consumer_group_expires_only_unsubscribed_topics(h: Harness) -> None:
    joined = h.form("g", ["a"], protocols=(("range", sub("t")),))
    sync_all(h, "g", joined)
    a = joined["a"].member_id
    h.commit("g", {("t", 0): 1, ("old", 0): 2}, generation=1, member_id=a)
    _stay_alive(h, "g", a, 11 * MINUTE)
    assert h.expire() == 1
    assert h.fetch("g") == {("t", 0): 1}


def test_empty_group_without_offsets_is_removed(h: Harness) -> None:
    joined = _stable(h, clients=("a",))
    h.leave("g", LeaveMember(joined["a"].member_id))
    assert h.expire() == 0
    assert "g" not in h.shard.groups
    h.restart()
    assert "g" not in h.shard.groups


def test_explicit_retention_sets_an_expire_timestamp(h: Harness) -> None:
    h.commit("s", {("t", 0): 1}, retention_ms=1000)
    data = h.log.read(0, 1 << 20)
    (_, recs), = list(iter_batches(data))
    assert recs[0].value[:2] == b"\x00\x01"  # type: ignore[index]  # value v1
    h.advance(1100)
    assert h.expire() == 1


def test_offset_delete(h: Harness) -> None:
    assert h.run(lambda s, now, _t: offsets.delete_offsets(s, "none", [("t", 0)], now))[1][0] \
        == ErrorCode.group_id_not_found
    joined = h.form("g", ["a"], protocols=(("range", sub("t")),))
    sync_all(h, "g", joined)
    a = joined["a"].member_id
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, generation=1, member_id=a)
    code, errs = h.run(lambda s, now, _t: offsets.delete_offsets(
        s, "g", [("t", 0), ("u", 0)], now))[1]
    assert code == OK
    assert dict(errs) == {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): OK}
    assert h.fetch("g") == {("t", 0): 1}
    h.leave("g", LeaveMember(a))
    code, errs = h.run(lambda s, now, _t: offsets.delete_offsets(s, "g", [("t", 0)], now))[1]
    assert code == OK and dict(errs) == {("t", 0): OK} and h.fetch("g") == {}
    h.restart()
    assert h.fetch("g") == {}


def test_offset_delete_refuses_a_busy_non_consumer_group(h: Harness) -> None:
    joined = h.form("g", ["a"], protocol_type="connect")
    sync_all(h, "g", joined)
    code, _ = h.run(lambda s, now, _t: offsets.delete_offsets(s, "g", [("t", 0)], now))[1]
    assert code == ErrorCode.non_empty_group


def test_delete_groups(h: Harness) -> None:
    joined = _stable(h, clients=("a",))
    h.commit("s", {("t", 0): 1})
    assert h.delete_groups("g", "s", "none") == {
        "g": ErrorCode.non_empty_group, "s": OK, "none": ErrorCode.group_id_not_found}
    assert "s" not in h.shard.groups
    h.leave("g", LeaveMember(joined["a"].member_id))
    assert h.delete_groups("g") == {"g": OK}
    assert "g" not in h.shard.groups
    h.restart()
    assert h.shard.groups == {}


def test_deleted_topics_take_their_offsets(h: Harness) -> None:
    h.commit("s", {("gone", 0): 1, ("gone", 1): 2, ("kept", 0): 3})
    h.commit("only", {("gone", 0): 4})
    removed = h.run(lambda s, now, _t: offsets.remove_topics(s, frozenset({"gone"}), now))[1]
    assert removed == 3
    assert h.fetch("s") == {("kept", 0): 3}
    assert "only" not in h.shard.groups
    h.restart()
    assert h.fetch("s") == {("kept", 0): 3} and "only" not in h.shard.groups
