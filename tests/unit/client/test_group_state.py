"""Sans-IO pieces of group membership: the member state table, JoinGroup protocol
metadata, the leader's assignment, subscriptions and the offset request codecs."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from tidegate.assignors import RebalanceProtocol, lookup
from tidegate.assignors.protocol import decode_assignment, decode_subscription
from tidegate.assignors.sticky import decode_user_data
from tidegate.client.consumer.group_offsets import (
    CommitFailedError,
    FencedInstanceIdError,
    OffsetAndMetadata,
    RebalanceInProgressError,
    commit_request,
    commit_result,
    fetch_request,
    fetch_result,
)
from tidegate.client.consumer.membership import (
    Generation,
    GroupMember,
    Membership,
    MemberState,
    diff,
    join_protocols,
    leader_assignments,
)
from tidegate.client.consumer.subscription import SubscriptionState
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError
from tidegate.protocol.messages import build, response_class

TP = TopicPartition


def test_member_state_table() -> None:
    m = Membership("g")
    assert m.state is MemberState.UNJOINED and m.rejoin_needed
    with pytest.raises(RuntimeError, match="unjoined -> stable"):
        m.transition_to(MemberState.STABLE)
    assert m.begin_join() == "initial join" and not m.rejoin_needed
    m.joined(Generation(3, "m-1", "range"))
    assert m.state is MemberState.COMPLETING_REBALANCE and m.member_id == "m-1"
    m.request_rejoin("metadata changed")  # during the rebalance: another round after
    m.synced()
    assert m.state is MemberState.STABLE and m.rejoin_reason == "metadata changed"
    m.begin_join()
    m.joined(Generation(4, "m-1", "range"))
    m.synced()
    m.request_rejoin("x")
    m.request_rejoin("y")
    assert m.rejoin_reason == "x"
    m.reset("ILLEGAL_GENERATION")
    assert m.partitions_lost and m.member_id == "" and not m.generation.valid
    m.transition_to(MemberState.PREPARING_REBALANCE)
    m.joined(Generation(4, "m-2", "range"))
    m.left(keep_member_id=True)
    assert m.member_id == "m-2" and m.state is MemberState.UNJOINED


def test_join_protocols_eager_and_cooperative() -> None:
    assignors = [lookup("sticky"), lookup("cooperative-sticky")]
    owned = [TP("t", 1)]
    eager = join_protocols(assignors, {"t", "a"}, RebalanceProtocol.EAGER, owned, 7,
                           [TP("t", 0)], 6, "rack-1")
    assert [e["name"] for e in eager] == ["sticky", "cooperative-sticky"]
    sticky = decode_subscription(eager[0]["metadata"])  # type: ignore[arg-type]
    assert sticky.topics == ("a", "t") and sticky.owned_partitions == ()
    assert sticky.rack == "rack-1" and sticky.generation_id == -1
    assert decode_user_data(sticky.user_data) == ([("t", 0)], 6)
    coop = join_protocols(assignors, {"t"}, RebalanceProtocol.COOPERATIVE, owned, 7,
                          [TP("t", 0)], 6, "")
    sub = decode_subscription(coop[1]["metadata"])  # type: ignore[arg-type]
    assert sub.owned_partitions == (("t", 1),) and sub.generation_id == 7
    assert sub.user_data == b"\x00\x00\x00\x07" and sub.rack is None


def test_leader_assignments_survive_undecodable_members() -> None:
    members = [
        GroupMember("a", None, join_protocols([lookup("range")], ["t"],
                                              RebalanceProtocol.EAGER, [], -1, [], -1,
                                              None)[0]["metadata"]),  # type: ignore[arg-type]
        GroupMember("b", None, b"\x00\x00\xff"),
    ]
    result = leader_assignments(lookup("range"), members, {"t": 3})
    assert decode_assignment(result["a"]).partitions == (("t", 0), ("t", 1), ("t", 2))
    assert decode_assignment(result["b"]).partitions == ()


def test_diff() -> None:
    assert diff([TP("t", 0), TP("t", 1)], [TP("t", 1), TP("t", 2)]) == (
        {TP("t", 0)}, {TP("t", 2)})


def test_subscription_topics_and_patterns() -> None:
    s = SubscriptionState()
    assert not s.active
    s.subscribe([re.compile(r"orders-.*"), "^logs", "plain"])
    assert s.active and s.topics == {"plain"}
    assert s.resolve(["orders-eu", "xorders-eu", "logs-a", "a-logs", "__consumer_offsets",
                      "plain"])
    assert s.topics == {"plain", "orders-eu", "logs-a"}
    assert not s.changed()  # nothing joined yet
    s.joined = frozenset(s.topics)
    s.resolve(["orders-eu"])
    assert s.changed()
    everything = SubscriptionState(exclude_internal_topics=False)
    everything.subscribe("^__")
    everything.resolve(["__consumer_offsets", "t"])
    assert everything.topics == {"__consumer_offsets"}
    with pytest.raises(ValueError, match="unsubscribe"):
        s.subscribe([])
    with pytest.raises(ValueError, match="bad topic pattern"):
        s.subscribe("^(")
    s.unsubscribe()
    assert not s.active and s.joined is None


def test_offset_commit_request_and_errors() -> None:
    req = commit_request("g", 5, "m", None, {TP("b", 1): 10, TP("a", 0):
                                             OffsetAndMetadata(3, "meta", 2)})
    assert [t["name"] for t in req["topics"]] == ["a", "b"]
    assert req["topics"][0]["partitions"][0] == {
        "partition_index": 0, "committed_offset": 3, "committed_leader_epoch": 2,
        "committed_metadata": "meta", "commit_timestamp": -1}
    with pytest.raises(ValueError, match="negative"):
        commit_request("g", 5, "m", None, {TP("a", 0): -1})

    def resp(code: int) -> object:
        return build(response_class(8, 9), {"topics": [
            {"name": "a", "partitions": [{"partition_index": 0, "error_code": code}]}]})

    assert commit_result(resp(0)) is None
    assert isinstance(commit_result(resp(22)), CommitFailedError)
    gone = commit_result(resp(69))  # GROUP_ID_NOT_FOUND: OffsetCommit v9+, group gone
    assert isinstance(gone, CommitFailedError) and gone.code == 69 and not gone.retriable
    assert isinstance(commit_result(resp(27)), RebalanceInProgressError)
    assert isinstance(commit_result(resp(82)), FencedInstanceIdError)
    err = commit_result(resp(16))
    assert isinstance(err, KafkaError) and err.retriable


@pytest.mark.parametrize("version", [1, 5, 7, 8, 9])
def test_offset_fetch_round_trip_all_versions(version: int) -> None:
    req = fetch_request("g", [TP("t", 1), TP("t", 0)], require_stable=True)
    assert req["topics"] == [{"name": "t", "partition_indexes": [0, 1]}]
    parts = [{"partition_index": 0, "committed_offset": 5, "metadata": "x",
              "committed_leader_epoch": 1, "error_code": 0},
             {"partition_index": 1, "committed_offset": -1, "metadata": "",
              "error_code": 0},
             {"partition_index": 2, "committed_offset": -1, "metadata": "",
              "error_code": ErrorCode.unstable_offset_commit.value}]
    data = {"topics": [{"name": "t", "partitions": parts}], "error_code": 0,
            "groups": [{"group_id": "g", "error_code": 0,
                        "topics": [{"name": "t", "partitions": parts}]}]}
    found, err = fetch_result(build(response_class(9, version), data))
    assert found[TP("t", 0)] is not None and found[TP("t", 0)].offset == 5
    assert found[TP("t", 1)] is None and TP("t", 2) not in found
    assert err is not None and err.retriable
    bad = SimpleNamespace(topics=(), error_code=ErrorCode.not_coordinator, groups=None)
    found, err = fetch_result(bad)
    assert found == {} and err is not None and err.code == ErrorCode.not_coordinator


def test_group_configs_have_kafkas_names_defaults_and_checks() -> None:
    from tidegate.client.config import ConfigError, ConsumerConfig

    c = ConsumerConfig.from_dict({"group.id": "g"})
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.max_poll_interval_ms,
            c.auto_commit_interval_ms, c.enable_auto_commit) == (45000, 3000, 300000, 5000,
                                                                 True)
    assert c.partition_assignment_strategy == ("range", "cooperative-sticky")
    c = ConsumerConfig.from_dict({"group.id": "g", "partition.assignment.strategy":
                                  "org.apache.kafka.clients.consumer.StickyAssignor,roundrobin"})
    assert c.partition_assignment_strategy == ("sticky", "roundrobin")
    assert not ConsumerConfig.from_dict({}).enable_auto_commit  # no group: nothing to commit
    for bad, why in [({"partition.assignment.strategy": "fancy"}, "unknown partition assignor"),
                     ({"partition.assignment.strategy": "range,range"}, "twice"),
                     ({"heartbeat.interval.ms": 45000}, "lower than session"),
                     ({"group.id": ""}, "must not be empty")]:
        with pytest.raises(ConfigError, match=why):
            ConsumerConfig.from_dict({"group.id": "g", **bad})
    with pytest.raises(ConfigError, match=r"needs a group\.id"):
        ConsumerConfig.from_dict({"enable.auto.commit": True})
    with pytest.raises(ConfigError, match=r"needs a group\.id"):
        ConsumerConfig.from_dict({"group.instance.id": "i"})
