"""Partition health (under-replicated / offline), `cluster status`'s table and the
marks and filters of `topics describe`."""

from __future__ import annotations

import uuid

from tidegate.cli.health import (
    MAX_PROBLEM_ROWS,
    is_offline,
    is_under_replicated,
    status_lines,
    summarize,
    table,
)
from tidegate.cli.topics import partition_line, wanted_partition
from tidegate.client.types import BrokerInfo, ClusterDescription, PartitionInfo, TopicInfo

LIVE = {1, 2, 3}


def part(index: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]
         ) -> PartitionInfo:
    return PartitionInfo(index, leader, replicas=replicas, isr=isr)


def cluster(ids: tuple[int, ...] = (1, 2, 3), controller: int = 1) -> ClusterDescription:
    return ClusterDescription("abc", controller, tuple(
        BrokerInfo(i, "127.0.0.1", 9091 + i, "r1" if i == 2 else None) for i in ids))


def topic(name: str, *parts: PartitionInfo, internal: bool = False) -> TopicInfo:
    return TopicInfo(name, uuid.UUID(int=1), {p.partition: p for p in parts}, internal)


def test_offline_and_under_replicated_never_overlap() -> None:
    healthy = part(0, 1, (1, 2), (1, 2))
    short = part(1, 1, (1, 2), (1,))
    leaderless = part(2, -1, (4,), (4,))
    dead_leader = part(3, 4, (4, 1), (1,))  # leader 4 is not a live broker
    assert not is_offline(healthy, LIVE) and not is_under_replicated(healthy, LIVE)
    assert is_under_replicated(short, LIVE) and not is_offline(short, LIVE)
    for p in (leaderless, dead_leader):
        assert is_offline(p, LIVE) and not is_under_replicated(p, LIVE)


def test_table_aligns_columns_and_trims_line_ends() -> None:
    assert table([["A", "BB", "C"], ["aaa", "b", ""]]) == ["A    BB  C", "aaa  b"]
    assert table([]) == []


def test_healthy_cluster_status() -> None:
    topics = {"t": topic("t", part(0, 1, (1,), (1,)), part(1, 2, (2, 3), (2, 3))),
              "__consumer_offsets": topic("__consumer_offsets", part(0, 3, (3,), (3,)),
                                          internal=True)}
    h = summarize(cluster(), topics)
    assert h.healthy
    assert status_lines(cluster(), h) == [
        "Cluster id: abc  Controller: broker 1  Brokers: 3",
        "BROKER  ADDRESS         RACK  ROLE        LEADERS  REPLICAS",
        "1       127.0.0.1:9092  -     controller  1        1",
        "2       127.0.0.1:9093  r1    broker      1        1",
        "3       127.0.0.1:9094  -     broker      1        2",
        "Topics: 1 (+1 internal)  Partitions: 3  Under-replicated: 0  Offline: 0",
        "Healthy: every partition has a live leader and all its replicas in sync.",
    ]


def test_unhealthy_cluster_lists_the_partitions_and_a_missing_broker() -> None:
    c = cluster(ids=(1, 2))
    topics = {"t": topic("t", part(0, 1, (1, 2, 3), (1, 2)), part(1, -1, (3,), (3,)),
                         part(2, 2, (2, 1), (2, 1)))}
    h = summarize(c, topics)
    assert not h.healthy and h.under_replicated == 1 and h.offline == 1
    assert status_lines(c, h) == [
        "Cluster id: abc  Controller: broker 1  Brokers: 2",
        "BROKER  ADDRESS         RACK  ROLE        LEADERS  REPLICAS",
        "1       127.0.0.1:9092  -     controller  1        2",
        "2       127.0.0.1:9093  r1    broker      1        2",
        "3       -               -     not live    0        2",
        "Topics: 1 (+0 internal)  Partitions: 3  Under-replicated: 1  Offline: 1",
        "",
        "TOPIC  PARTITION  LEADER  REPLICAS  ISR  PROBLEM",
        "t      0          1       1,2,3     1,2  under-replicated: 3 not in ISR",
        "t      1          none    3         3    offline: no leader",
        "Not healthy: 1 under-replicated partition and 1 offline partition.",
    ]


def test_no_controller_is_not_healthy() -> None:
    h = summarize(cluster(controller=-1), {})
    assert not h.healthy
    lines = status_lines(cluster(controller=-1), h)
    assert lines[0].startswith("Cluster id: abc  Controller: none")
    assert lines[-1].startswith("Not healthy: no controller")


def test_long_problem_lists_are_cut_with_a_pointer_to_all_of_them() -> None:
    n = MAX_PROBLEM_ROWS + 5
    topics = {"t": topic("t", *(part(i, 1, (1, 2), (1,)) for i in range(n)))}
    lines = status_lines(cluster(), summarize(cluster(), topics))
    assert sum(1 for x in lines if x.startswith("t ")) == MAX_PROBLEM_ROWS
    assert lines[-2].startswith("... and 5 more: `tidegate topics describe "
                                "--under-replicated-partitions --unavailable-partitions`")
    assert lines[-1] == f"Not healthy: {n} under-replicated partitions."


def test_describe_lines_keep_kafkas_format_and_mark_problems() -> None:
    assert partition_line("t", part(0, 1, (1, 2), (1, 2)), LIVE) == (
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2")
    assert partition_line("t", part(1, 1, (1, 2), (1,)), LIVE).endswith(
        "\tIsr: 1\tUnderReplicated: true")
    assert partition_line("t", part(2, -1, (4,), (4,)), LIVE) == (
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 4\tIsr: 4\tOffline: true")
    offline_replica = PartitionInfo(3, 1, replicas=(1, 2), isr=(1,), offline_replicas=(2,))
    assert partition_line("t", offline_replica, LIVE).endswith(
        "\tOfflineReplicas: 2\tUnderReplicated: true")


def test_describe_filters_are_ored_like_kafka_topics() -> None:
    ok, short, down = part(0, 1, (1, 2), (1, 2)), part(1, 1, (1, 2), (1,)), part(2, -1, (4,), ())
    keep = {(u, a): [p.partition for p in (ok, short, down) if wanted_partition(p, LIVE, u, a)]
            for u in (False, True) for a in (False, True)}
    assert keep == {(False, False): [0, 1, 2], (True, False): [1], (False, True): [2],
                    (True, True): [1, 2]}
