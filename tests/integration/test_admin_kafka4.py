"""The admin APIs and features Kafka 4 clients call (issue 19 section 2):
DescribeTopicPartitions with cursor pagination (KIP-966), the finalized features of
ApiVersions, DescribeCluster's endpoint types, ListConfigResources (KIP-1142).

kafka-python 3's admin client is the oracle where it speaks the API (librdkafka 2.16
does not send DescribeTopicPartitions: confluent-kafka's describe_topics uses Metadata,
checked here to still agree); raw requests cover pagination edges and errors. The ACL
side of each API is in test_acls.py's table. One embedded broker for the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

UNKNOWN_TOPIC, INVALID_REQUEST, UNSUPPORTED_VERSION, UNSUPPORTED_ENDPOINT_TYPE = 3, 42, 35, 115
A, B = "k4-a", "k4-b"  # 3 and 2 partitions


@pytest.fixture(scope="module")
def b(shared_broker: BrokerProcess) -> BrokerProcess:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    for f in admin.create_topics([NewTopic(A, 3, 1), NewTopic(B, 2, 1)]).values():
        f.result(30)
    return shared_broker


@pytest.fixture
def raw(b: BrokerProcess) -> Iterator[RawClient]:
    r = RawClient(b.bootstrap)
    yield r
    r.close()


@pytest.fixture(scope="module")
def kp(b: BrokerProcess) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    yield admin
    admin.close()


def _dtp(raw: RawClient, topics: list[str], limit: int,
         cursor: tuple[str, int] | None = None) -> Any:
    return raw.call(75, 0, {
        "topics": [{"name": t} for t in topics], "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0],
                                               "partition_index": cursor[1]}})


def _seen(resp: Any) -> list[tuple[str, int]]:
    return [(t.name, p.partition_index) for t in resp.topics for p in t.partitions]


def _cursor(resp: Any) -> tuple[str, int] | None:
    c = resp.next_cursor
    return None if c is None else (c.topic_name, int(c.partition_index))


def test_describe_topic_partitions_pages_with_a_cursor(raw: RawClient) -> None:
    first = _dtp(raw, [B, "k4-0", A], 2)
    # sorted by name; the unknown topic uses none of the limit
    assert [(t.name, int(t.error_code)) for t in first.topics] == [("k4-0", UNKNOWN_TOPIC),
                                                                   (A, 0)]
    assert _seen(first) == [(A, 0), (A, 1)] and _cursor(first) == (A, 2)
    part = first.topics[1].partitions[0]
    assert part.leader_id >= 0 and list(part.isr_nodes) == list(part.replica_nodes)
    assert not part.eligible_leader_replicas and not part.last_known_elr
    assert first.topics[1].topic_authorized_operations != -(2 ** 31)  # always filled
    second = _dtp(raw, [A, B], 2, (A, 2))
    assert _seen(second) == [(A, 2), (B, 0)] and _cursor(second) == (B, 1)
    third = _dtp(raw, [A, B], 2, (B, 1))
    assert _seen(third) == [(B, 1)] and _cursor(third) is None
    # the limit falls on a topic's end: the cursor is the next topic's partition 0
    assert _cursor(_dtp(raw, [A, B], 3)) == (B, 0)
    # every topic (none named), from the cursor on, includes ours in order
    everything = _dtp(raw, [], 2000, (A, 0))
    assert _seen(everything)[:5] == [(A, 0), (A, 1), (A, 2), (B, 0), (B, 1)]
    bad = _dtp(raw, [A], 10, (A, -1))
    assert [int(t.error_code) for t in bad.topics] == [INVALID_REQUEST]


def test_kafka_python_walks_every_page(kp: KafkaAdminClient) -> None:
    seen: list[tuple[str, int]] = []
    cursor = None
    for _ in range(10):
        page = kp.describe_topic_partitions([A, B], response_partition_limit=2, cursor=cursor)
        seen += [(t["name"], p["partition_index"]) for t in page["topics"]
                 for p in t["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [(A, 0), (A, 1), (A, 2), (B, 0), (B, 1)]


def test_confluent_describe_topics_agrees(b: BrokerProcess, raw: RawClient) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    desc = admin.describe_topics(TopicCollection([A]))[A].result(30)
    got = _dtp(raw, [A], 100).topics[0]
    assert desc.topic_id.__str__() and len(desc.partitions) == len(got.partitions) == 3
    assert [p.leader.id for p in desc.partitions] == [p.leader_id for p in got.partitions]


def test_finalized_features(kp: KafkaAdminClient) -> None:
    features = kp.describe_features()
    assert features["metadata.version"]["supported"] == (7, 27)
    assert features["metadata.version"]["finalized"] == (27, 27)
    assert features["transaction.version"]["finalized"] == (2, 2)
    assert features["group.version"]["finalized"] == (1, 1)


def test_describe_cluster_endpoint_types(b: BrokerProcess, raw: RawClient,
                                         kp: KafkaAdminClient) -> None:
    described = kp.describe_cluster()  # kafka-python 3 asks v2, include_fenced_brokers
    assert [(x["port"], x["is_fenced"]) for x in described["brokers"]] == [(b.port, False)]
    brokers = raw.call(60, 2, {"include_cluster_authorized_operations": False,
                               "endpoint_type": 1, "include_fenced_brokers": True})
    assert brokers.error_code == 0 and int(brokers.endpoint_type) == 1
    assert [(x.port, x.is_fenced) for x in brokers.brokers] == [(b.port, False)]
    controllers = raw.call(60, 1, {"include_cluster_authorized_operations": False,
                                   "endpoint_type": 2})
    # MISMATCHED_ENDPOINT_TYPE (114), as Kafka 4's broker answers (tests/integration/
    # test_kafka_oracle.py)
    assert controllers.error_code == 114 and not controllers.brokers


def test_list_config_resources(b: BrokerProcess, kp: KafkaAdminClient,
                               raw: RawClient) -> None:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "k4-group"})
    c.commit(offsets=[TopicPartition(A, 0, 1)], asynchronous=False)
    c.close()
    listed = kp.list_config_resources(["TOPIC", "GROUP", "BROKER"])
    assert {A, B} <= set(listed["topic"]) and "k4-group" in listed["group"]
    assert listed["broker"] == [str(raw.call(60, 0, {}).brokers[0].broker_id)]
    # a group with configs but no members or offsets is listed, as Kafka lists it
    # (kafka-configs --describe --entity-type groups shows its configs then)
    set_cfg = raw.call(44, 0, {"resources": [{
        "resource_type": 32, "resource_name": "k4-config-only", "configs": [{
            "name": "consumer.session.timeout.ms", "config_operation": 0,
            "value": "50000"}]}], "validate_only": False})
    assert set_cfg.responses[0].error_code == 0
    assert "k4-config-only" in kp.list_config_resources(["GROUP"])["group"]
    v0 = raw.call(74, 0, {})  # ListClientMetricsResources: no named subscriptions
    assert v0.error_code == 0 and v0.config_resources == ()
    assert raw.call(74, 1, {"resource_types": [99]}).error_code == UNSUPPORTED_VERSION


def _list_txns(raw: RawClient, version: int, **filters: Any) -> tuple[int, set[str]]:
    resp = raw.call(66, version, {"state_filters": [], "producer_id_filters": [], **filters})
    return int(resp.error_code), {str(t.transactional_id) for t in resp.transaction_states}


def test_list_transactions_duration_and_pattern_filters(b: BrokerProcess,
                                                        raw: RawClient) -> None:
    """ListTransactions as Kafka 4.x filters it: v1's DurationFilter keeps transactions
    running longer than it, v2's TransactionalIdPattern keeps ids the regular expression
    matches whole (Java's matches()), a bad pattern is INVALID_REGULAR_EXPRESSION."""
    import time

    from confluent_kafka import Producer

    ids = ["k4-tx-alpha-1", "k4-tx-alpha-2", "k4-tx-beta"]
    producers = []
    for tid in ids:  # each left with an open transaction
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(A, b"v", partition=0)
        p.flush(30)
        producers.append(p)
    try:
        time.sleep(0.05)
        assert _list_txns(raw, 2, transactional_id_pattern="k4-tx-alpha-.*") == (
            0, {"k4-tx-alpha-1", "k4-tx-alpha-2"})
        assert _list_txns(raw, 2, transactional_id_pattern="alpha") == (0, set())
        assert _list_txns(raw, 2, transactional_id_pattern="(")[0] == 128
        code, every = _list_txns(raw, 2, transactional_id_pattern=None)
        assert code == 0 and set(ids) <= every
        _, running = _list_txns(raw, 1, duration_filter=0)
        assert set(ids) <= running
        _, old = _list_txns(raw, 1, duration_filter=3_600_000)
        assert not set(ids) & old
        assert _list_txns(raw, 2, state_filters=["Ongoing"], duration_filter=0,
                          transactional_id_pattern=r"k4-tx-\w+") == (0, {"k4-tx-beta"})
    finally:
        for p in producers:
            p.abort_transaction(30)
