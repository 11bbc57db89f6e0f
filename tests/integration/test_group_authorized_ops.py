"""A group's authorized operations, as DescribeGroups and ConsumerGroupDescribe report
them to confluent-kafka: the group's supported operations as Kafka's AclEntry lists
them (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS since group configs),
all of them without an authorizer, and with one only what the ACLs allow (READ implying
DESCRIBE). Found with confluent-kafka-python's own `test_describe_operations`
(tests/compat/confluent_kafka_python.py), which Tidegate answered without the two
config operations.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.integration.conftest import BrokerProcess

_O = AclOperation
ALL_GROUP_OPS = {_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}


def _group_with_a_member(bootstrap: str, topic: str, group: str, protocol: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "group.protocol": protocol, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            return c
    raise AssertionError(f"{protocol} consumer of {group} got no record")


def _ops(a: AdminClient, group: str) -> set[AclOperation]:
    d = a.describe_consumer_groups([group], include_authorized_operations=True,
                                   request_timeout=30)[group].result()
    return set(d.authorized_operations or [])


def test_group_authorized_operations(shared_broker: BrokerProcess) -> None:
    a = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    a.create_topics([NewTopic("gops", 1, 1)])["gops"].result(30)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap})
    p.produce("gops", b"x")
    p.flush(30)
    for protocol in ("classic", "consumer"):  # DescribeGroups, ConsumerGroupDescribe
        group = f"gops-{protocol}"
        c = _group_with_a_member(shared_broker.bootstrap, "gops", group, protocol)
        try:
            assert _ops(a, group) == ALL_GROUP_OPS, protocol
            d = a.describe_consumer_groups([group], request_timeout=30)[group].result()
            assert d.authorized_operations is None
        finally:
            c.close()


def test_group_authorized_operations_with_acls(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    broker.start()
    try:
        _check_with_acls(broker)
    finally:
        broker.stop()


def _check_with_acls(broker: BrokerProcess) -> None:
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic("gacl", 1, 1)])["gacl"].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("gacl", b"x")
    p.flush(30)
    c = _group_with_a_member(broker.bootstrap, "gacl", "gacl", "classic")
    try:
        assert _ops(a, "gacl") == ALL_GROUP_OPS  # no ACL on the group: everyone
        acl = AclBinding(ResourceType.GROUP, "gacl", ResourcePatternType.LITERAL,
                         "User:ANONYMOUS", "*", _O.READ, AclPermissionType.ALLOW)
        a.create_acls([acl])[acl].result(30)
        assert _ops(a, "gacl") == {_O.READ, _O.DESCRIBE}
        f = AclBindingFilter(ResourceType.GROUP, "gacl", ResourcePatternType.ANY, None, None,
                             _O.ANY, AclPermissionType.ANY)
        a.delete_acls([f])[f].result(30)
    finally:
        c.close()
