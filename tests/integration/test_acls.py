"""ACLs end to end: one broker with the authorizer on (Kafka's AclAuthorizer class name),
a SASL_PLAINTEXT listener with PLAIN users admin (a super user), alice and bob, and a
PLAINTEXT listener whose clients are User:ANONYMOUS.

confluent-kafka's admin API creates, describes and deletes ACLs; a principal without
ACLs can do nothing; grants hold per resource and pattern, DENY over ALLOW; WRITE on a
topic without an ACL on the transactional id cannot use (or fence) that id; committing
offsets needs READ on the group. The table at the end walks every API the broker
serves over the raw wire, with and without the ACLs Kafka's KafkaApis asks for, and
checks the error code Kafka gives.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
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
from tests.integration.conftest import ROOT, BrokerProcess, free_port
from tests.integration.rawclient import RawClient

from tidegate.protocol.messages import build, encode, request_class
from tidegate.server.dispatch import default_dispatcher

pytestmark = pytest.mark.interop

USERS = ("admin", "alice", "bob")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{u}-secret"' for u in USERS) + ";")
ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


class Secured:
    def __init__(self, b: BrokerProcess, sasl_port: int) -> None:
        self.b, self.sasl_port = b, sasl_port
        self.admin = AdminClient(self.conf("admin"))

    def conf(self, user: str) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": f"{user}-secret"}

    def grant(self, *acls: AclBinding) -> None:
        for fut in self.admin.create_acls(list(acls)).values():
            fut.result(10)

    def revoke(self, *acls: AclBinding) -> None:
        filters = [AclBindingFilter(a.restype, a.name, a.resource_pattern_type, a.principal,
                                    a.host, a.operation, a.permission_type) for a in acls]
        for fut in self.admin.delete_acls(filters).values():
            fut.result(10)

    def topic(self, name: str, partitions: int = 1) -> str:
        self.admin.create_topics([NewTopic(name, partitions)])[name].result(10)
        return name


def allow(rtype: ResourceType, name: str, principal: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          perm: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


@pytest.fixture(scope="module")
def sec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    sasl_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("acls") / "data", overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    })
    b.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},"
                                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}")
    b.start()
    try:
        yield Secured(b, sasl_port)
    finally:
        b.stop()


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _produce_error(conf: dict[str, Any], topic: str) -> KafkaError | None:
    p = Producer({**conf, "message.timeout.ms": 5000})
    errs: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda e, _m: errs.append(e))
    p.flush(10)
    assert errs, "no delivery report"
    return errs[0]


def test_admin_api_creates_describes_and_deletes_acls(sec: Secured) -> None:
    t = _unique("adm")
    lit = allow(ResourceType.TOPIC, t, "User:alice", AclOperation.READ)
    pre = allow(ResourceType.GROUP, t[:5], "User:bob", AclOperation.ALL,
                ResourcePatternType.PREFIXED, AclPermissionType.DENY)
    sec.grant(lit, pre)
    got = sec.admin.describe_acls(ANY_FILTER).result(10)
    assert {lit, pre} <= set(got)
    only_topic = AclBindingFilter(ResourceType.TOPIC, t, ResourcePatternType.MATCH, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert sec.admin.describe_acls(only_topic).result(10) == [lit]
    deleted = sec.admin.delete_acls([ANY_FILTER])[ANY_FILTER].result(10)
    assert {lit, pre} <= set(deleted)
    assert sec.admin.describe_acls(ANY_FILTER).result(10) == []
    # a non-super user may not manage ACLs
    alice = AdminClient(sec.conf("alice"))
    with pytest.raises(KafkaException) as e:
        alice.create_acls([lit])[lit].result(10)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_bad_acls_are_invalid_request(sec: Secured) -> None:
    """Unknown operation, empty principal, a CLUSTER not named kafka-cluster: each refused
    with INVALID_REQUEST in its own result; the good one beside them is created."""
    grant = allow(ResourceType.BROKER, "kafka-cluster", "User:ANONYMOUS", AclOperation.ALTER)
    sec.grant(grant)
    try:
        raw = RawClient(sec.b.bootstrap)
        base = {"resource_type": 2, "resource_name": "bad-acl", "resource_pattern_type": 3,
                "principal": "User:carol", "host": "*", "operation": 3, "permission_type": 3}
        resp = raw.call(30, 3, {"creations": [
            {**base, "operation": 99}, {**base, "principal": ""},
            {**base, "resource_type": 4, "resource_name": "other"}, base]})
        codes = [int(r.error_code) for r in resp.results]
        assert codes == [42, 42, 42, 0]
        raw.close()
    finally:
        sec.revoke(grant)
    assert "User:carol" in {a.principal for a in sec.admin.describe_acls(ANY_FILTER).result(10)}
    sec.admin.delete_acls([ANY_FILTER])[ANY_FILTER].result(10)


def test_principal_without_acls_can_do_nothing(sec: Secured) -> None:
    t = sec.topic(_unique("none"))
    err = _produce_error(sec.conf("bob"), t)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert t not in AdminClient(sec.conf("bob")).list_topics(timeout=10).topics
    assert t in sec.admin.list_topics(timeout=10).topics
    c = Consumer({**sec.conf("bob"), "group.id": _unique("g"), "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(t, 0, 0)])
        errors: set[int] = set()  # the group's coordinator refuses too (no READ on it)
        for _ in range(10):
            msg = c.poll(1)
            if msg is not None:
                assert msg.error() is not None, "bob read a record"
                errors.add(msg.error().code())
            if errors:
                break
        # librdkafka reports the coordinator's GROUP_AUTHORIZATION_FAILED first and may
        # not fetch before it has one; the fetch refusal itself is in the table below
        assert errors & {KafkaError.TOPIC_AUTHORIZATION_FAILED,
                         KafkaError.GROUP_AUTHORIZATION_FAILED}, errors
    finally:
        c.close()


def test_grants_per_resource_and_pattern_deny_wins(sec: Secured) -> None:
    base = _unique("pay")
    ok, secret, other = (sec.topic(f"{base}-eu"), sec.topic(f"{base}-secret"),
                         sec.topic(_unique("misc")))
    prefixed = allow(ResourceType.TOPIC, f"{base}-", "User:alice", AclOperation.WRITE,
                     ResourcePatternType.PREFIXED)
    deny = allow(ResourceType.TOPIC, secret, "User:*", AclOperation.WRITE,
                 perm=AclPermissionType.DENY)
    sec.grant(prefixed, deny)
    try:
        assert _produce_error(sec.conf("alice"), ok) is None
        for t in (secret, other):
            err = _produce_error(sec.conf("alice"), t)
            assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, t
        # the grant is alice's: bob still gets nothing
        err = _produce_error(sec.conf("bob"), ok)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        sec.revoke(prefixed, deny)
    log = sec.b.logs()
    assert "Principal = User:alice is Denied Operation = Write" in log or \
        "Principal = User:alice is Denied Operation = Describe" in log


def test_write_on_topic_does_not_give_the_transactional_id(sec: Secured) -> None:
    t, tid = sec.topic(_unique("eos")), _unique("tx")
    grant = allow(ResourceType.TOPIC, t, "User:alice", AclOperation.WRITE)
    sec.grant(grant)
    owner = Producer({**sec.conf("admin"), "transactional.id": tid})
    try:
        owner.init_transactions(10)
        owner.begin_transaction()
        owner.produce(t, b"owner")
        thief = Producer({**sec.conf("alice"), "transactional.id": tid})
        with pytest.raises(KafkaException) as e:
            thief.init_transactions(10)
        assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        owner.commit_transaction(10)  # not fenced: the owner's transaction commits
    finally:
        sec.revoke(grant)


def test_committing_offsets_needs_read_on_the_group(sec: Secured) -> None:
    t, group = sec.topic(_unique("commit")), _unique("grp")
    read_topic = allow(ResourceType.TOPIC, t, "User:bob", AclOperation.READ)
    read_group = allow(ResourceType.GROUP, group, "User:bob", AclOperation.READ)
    # DESCRIBE lets the client find the group's coordinator; committing needs READ
    describe_group = allow(ResourceType.GROUP, group, "User:bob", AclOperation.DESCRIBE)
    sec.grant(read_topic, describe_group)
    c = Consumer({**sec.conf("bob"), "group.id": group, "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition(t, 0, 0)], asynchronous=False)
        assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        sec.grant(read_group)
        c.commit(offsets=[TopicPartition(t, 0, 0)], asynchronous=False)
        assert c.committed([TopicPartition(t, 0)], timeout=10)[0].offset == 0
    finally:
        c.close()
        sec.revoke(read_topic, read_group, describe_group)


# -- every API, over the raw wire, as User:ANONYMOUS (the PLAINTEXT listener) -------------

TOPIC, GROUP, TXN, CLUSTER = (ResourceType.TOPIC, ResourceType.GROUP,
                              ResourceType.TRANSACTIONAL_ID, ResourceType.BROKER)
Op = AclOperation
TAF, GAF, CAF, TIAF = 29, 30, 31, 53
AUTH_CODES = {TAF, GAF, CAF, TIAF}
T, G, X = "tbl", "tblg", "tbltx"  # the table's topic, group and transactional id

Codes = Callable[[Any], list[int]]


def _parts(field: str, parts: str = "partitions", code: str = "error_code") -> Codes:
    return lambda r: [int(getattr(p, code)) for t in getattr(r, field)
                      for p in getattr(t, parts)]


def _top(r: Any) -> list[int]:
    return [int(r.error_code)]


def _each(field: str) -> Codes:
    return lambda r: [int(x.error_code) for x in getattr(r, field)]


_TP = [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 0}]}]
# (api key, version, request, needed ACLs, code without them, codes of the response)
TABLE: list[tuple[int, int, dict[str, Any], list[tuple[ResourceType, str, AclOperation]],
                  int, Codes]] = [
    (0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": T, "partition_data": [{"index": 0, "records": b""}]}]},
     [(TOPIC, T, Op.WRITE)], TAF, _parts("responses", "partition_responses")),
    (0, 9, {"transactional_id": X, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": T, "partition_data": [{"index": 0, "records": b""}]}]},
     [(TOPIC, T, Op.WRITE), (TXN, X, Op.WRITE)], TIAF, _parts("responses", "partition_responses")),
    (1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1000, "topics": [
        {"topic": T, "partitions": [{"partition": 0, "fetch_offset": 0,
                                     "partition_max_bytes": 1000}]}]},
     [(TOPIC, T, Op.READ)], TAF, _parts("responses")),
    (2, 7, {"replica_id": -1, "topics": [
        {"name": T, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
     [(TOPIC, T, Op.DESCRIBE)], TAF, _parts("topics")),
    (3, 12, {"topics": [{"name": T}], "allow_auto_topic_creation": False},
     [(TOPIC, T, Op.DESCRIBE)], TAF, _each("topics")),
    (3, 12, {"topics": [{"name": "tbl-auto"}], "allow_auto_topic_creation": True},
     [(TOPIC, "tbl-auto", Op.DESCRIBE), (TOPIC, "tbl-auto", Op.CREATE)], TAF, _each("topics")),
    (8, 8, {"group_id": G, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": _TP}, [(GROUP, G, Op.READ), (TOPIC, T, Op.READ)], GAF, _parts("topics")),
    (9, 7, {"group_id": G, "topics": [{"name": T, "partition_indexes": [0]}]},
     [(GROUP, G, Op.DESCRIBE), (TOPIC, T, Op.DESCRIBE)], GAF, _top),
    (10, 3, {"key": G, "key_type": 0}, [(GROUP, G, Op.DESCRIBE)], GAF, _top),
    (10, 3, {"key": X, "key_type": 1}, [(TXN, X, Op.DESCRIBE)], TIAF, _top),
    (11, 5, {"group_id": G, "session_timeout": 10000, "rebalance_timeout": 10000,
             "member_id": "", "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b""}]},
     [(GROUP, G, Op.READ)], GAF, _top),
    (12, 3, {"group_id": G, "generation_id": 1, "member_id": "m"}, [(GROUP, G, Op.READ)], GAF,
     _top),
    (13, 3, {"group_id": G, "members": [{"member_id": "m"}]}, [(GROUP, G, Op.READ)], GAF, _top),
    (14, 3, {"group_id": G, "generation_id": 1, "member_id": "m", "assignments": []},
     [(GROUP, G, Op.READ)], GAF, _top),
    (15, 5, {"groups": [G]}, [(GROUP, G, Op.DESCRIBE)], GAF, _each("groups")),
    (19, 5, {"topics": [{"name": "tbl-new", "num_partitions": 1, "replication_factor": 1}],
             "timeout": 5000, "validate_only": True},
     [(TOPIC, "tbl-new", Op.CREATE)], TAF, _each("topics")),
    (20, 4, {"topic_names": ["tbl-gone"], "timeout": 5000}, [(TOPIC, "tbl-gone", Op.DELETE)],
     TAF, _each("responses")),
    (21, 2, {"topics": [{"name": T, "partitions": [{"partition_index": 0, "offset": 0}]}],
             "timeout": 5000}, [(TOPIC, T, Op.DELETE)], TAF, _parts("topics")),
    (22, 3, {"transactional_id": X, "transaction_timeout": 60000, "producer_id": -1,
             "producer_epoch": -1}, [(TXN, X, Op.WRITE)], TIAF, _top),
    (22, 3, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
             "producer_epoch": -1}, [(CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)], CAF,
     _top),
    (23, 3, {"replica_id": -1, "topics": [{"topic": T, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
     [(TOPIC, T, Op.DESCRIBE)], TAF, _parts("topics")),
    (24, 3, {"v3_and_below_transactional_id": X, "v3_and_below_producer_id": 1,
             "v3_and_below_producer_epoch": 0,
             "v3_and_below_topics": [{"name": T, "partitions": [0]}]},
     [(TXN, X, Op.WRITE), (TOPIC, T, Op.WRITE)], TIAF,
     _parts("results_by_topic_v3_and_below", "results_by_partition", "partition_error_code")),
    (24, 4, {"transactions": [{"transactional_id": X, "producer_id": 1, "producer_epoch": 0,
                               "verify_only": True, "topics": [{"name": T, "partitions": [0]}]}]},
     [(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)], CAF, _top),
    (25, 3, {"transactional_id": X, "producer_id": 1, "producer_epoch": 0, "group_id": G},
     [(TXN, X, Op.WRITE), (GROUP, G, Op.READ)], TIAF, _top),
    (26, 3, {"transactional_id": X, "producer_id": 1, "producer_epoch": 0, "committed": True},
     [(TXN, X, Op.WRITE)], TIAF, _top),
    (27, 1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                          "coordinator_epoch": 0,
                          "topics": [{"name": T, "partition_indexes": [0]}]}]},
     [(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)], CAF, _parts("markers", "topics")
     if False else (lambda r: [int(p.error_code) for m in r.markers for t in m.topics
                               for p in t.partitions])),
    (28, 3, {"transactional_id": X, "group_id": G, "producer_id": 1, "producer_epoch": 0,
             "generation_id": -1, "member_id": "", "topics": [
                 {"name": T, "partitions": [{"partition_index": 0, "committed_offset": 0}]}]},
     [(TXN, X, Op.WRITE), (GROUP, G, Op.READ), (TOPIC, T, Op.READ)], TIAF, _parts("topics")),
    (29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
             "principal_filter": None, "host_filter": None, "operation": 1,
             "permission_type": 1}, [(CLUSTER, "kafka-cluster", Op.DESCRIBE)], CAF, _top),
    (30, 3, {"creations": [{"resource_type": 2, "resource_name": "tbl-x",
                            "resource_pattern_type": 3, "principal": "User:nobody",
                            "host": "*", "operation": 3, "permission_type": 3}]},
     [(CLUSTER, "kafka-cluster", Op.ALTER)], CAF, _each("results")),
    (31, 3, {"filters": [{"resource_type_filter": 2, "resource_name_filter": "tbl-x",
                          "pattern_type_filter": 3, "principal_filter": "User:nobody",
                          "host_filter": None, "operation": 1, "permission_type": 1}]},
     [(CLUSTER, "kafka-cluster", Op.ALTER)], CAF, _each("filter_results")),
    (32, 3, {"resources": [{"resource_type": 2, "resource_name": T}]},
     [(TOPIC, T, Op.DESCRIBE_CONFIGS)], TAF, _each("results")),
    (32, 3, {"resources": [{"resource_type": 4, "resource_name": "1"}]},
     [(CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS)], CAF, _each("results")),
    (33, 1, {"resources": [{"resource_type": 2, "resource_name": T, "configs": [
        {"name": "retention.ms", "value": "600000"}]}], "validate_only": True},
     [(TOPIC, T, Op.ALTER_CONFIGS)], TAF, _each("responses")),
    (44, 1, {"resources": [{"resource_type": 2, "resource_name": T, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "600000"}]}],
        "validate_only": True}, [(TOPIC, T, Op.ALTER_CONFIGS)], TAF, _each("responses")),
    (34, 2, {"dirs": [{"path": "/no-such-log-dir", "topics": [{"name": T, "partitions": [0]}]}]},
     [(CLUSTER, "kafka-cluster", Op.ALTER)], CAF, _parts("results")),
    (35, 4, {"topics": None}, [(CLUSTER, "kafka-cluster", Op.DESCRIBE)], CAF, _top),
    (37, 2, {"topics": [{"name": T, "count": 2, "assignments": None}], "timeout": 5000,
             "validate_only": True}, [(TOPIC, T, Op.ALTER)], TAF, _each("results")),
    (42, 2, {"groups_names": [G]}, [(GROUP, G, Op.DELETE)], GAF, _each("results")),
    (43, 2, {"election_type": 0, "topic_partitions": [{"topic": T, "partitions": [0]}],
             "timeout": 5000}, [(CLUSTER, "kafka-cluster", Op.ALTER)], CAF, _top),
    (45, 0, {"timeout": 5000, "topics": []}, [(CLUSTER, "kafka-cluster", Op.ALTER)], CAF, _top),
    (46, 0, {"timeout": 5000, "topics": None}, [(CLUSTER, "kafka-cluster", Op.DESCRIBE)], CAF,
     _top),
    (47, 0, {"group_id": G, "topics": [{"name": T, "partitions": [{"partition_index": 0}]}]},
     [(GROUP, G, Op.DELETE), (TOPIC, T, Op.READ)], GAF, _top),
    (50, 0, {"users": None}, [(CLUSTER, "kafka-cluster", Op.DESCRIBE)], CAF, _top),
    (51, 0, {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []},
     [(CLUSTER, "kafka-cluster", Op.ALTER)], CAF, _each("results")),
    (61, 0, {"topics": [{"name": T, "partition_indexes": [0]}]}, [(TOPIC, T, Op.READ)], TAF,
     _parts("topics")),
    (65, 0, {"transactional_ids": [X]}, [(TXN, X, Op.DESCRIBE)], TIAF,
     _each("transaction_states")),
    # KIP-848 (a group of its own: the granted heartbeat leaves a member behind)
    (68, 0, {"group_id": G + "848", "member_id": "", "member_epoch": 0,
             "rebalance_timeout": 60000, "subscribed_topic_names": [T],
             "topic_partitions": []},
     [(GROUP, G + "848", Op.READ), (TOPIC, T, Op.DESCRIBE)], GAF, _top),
    (69, 0, {"group_ids": [G], "include_authorized_operations": False},
     [(GROUP, G, Op.DESCRIBE)], GAF, _each("groups")),
    # KIP-966 (a named topic needs DESCRIBE) and KIP-1142 (DESCRIBE_CONFIGS on the cluster)
    (75, 0, {"topics": [{"name": T}], "response_partition_limit": 2000, "cursor": None},
     [(TOPIC, T, Op.DESCRIBE)], TAF, _each("topics")),
    (74, 1, {"resource_types": [2]}, [(CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS)], CAF,
     _top),
    (48, 1, {"components": [], "strict": False}, [(CLUSTER, "kafka-cluster",
                                                   Op.DESCRIBE_CONFIGS)], CAF, _top),
    (49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "tbl-c"}],
                          "ops": [{"key": "producer_byte_rate", "value": 1e6,
                                   "remove": False}]}], "validate_only": True},
     [(CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS)], CAF, _each("entries")),
]
# APIs with no ACL of their own (ApiVersions, SASL) or that filter what they list rather
# than refuse (ListGroups, DescribeCluster, ListTransactions): checked separately below.
UNCHECKED = {18, 17, 36, 16, 60, 66}


def test_the_table_covers_every_api() -> None:
    served = set(default_dispatcher().apis)
    assert served - UNCHECKED <= {row[0] for row in TABLE}


def _bindings(acls: list[tuple[ResourceType, str, AclOperation]]) -> list[AclBinding]:
    return [allow(rt, name, "User:ANONYMOUS", op) for rt, name, op in acls]


def _codes(raw: RawClient, row: Any) -> list[int]:
    api, version, data, _needed, _denied, codes = row
    if api != 65:
        return list(codes(raw.call(api, version, data)))
    # DescribeTransactions answers an unknown or refused id with start time -1, as Kafka
    # does, which kio cannot decode: read the first error code by hand (after the
    # header, throttle time and the one-entry array's length).
    raw.send_frame(raw.request_bytes(api, version, encode(build(request_class(api, version),
                                                                data))))
    frame = raw.recv_frame()
    assert frame is not None
    return [int.from_bytes(frame[10:12], "big", signed=True)]


@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"api{r[0]}v{r[1]}-{r[4]}")
def test_every_api_checks_kafkas_acls(sec: Secured, row: Any) -> None:
    needed, denied = row[3], row[4]
    if T not in sec.admin.list_topics(timeout=10).topics:
        sec.topic(T)
    raw = RawClient(sec.b.bootstrap)
    try:
        assert set(_codes(raw, row)) == {denied}
        sec.grant(*_bindings(needed))
        try:
            got = _codes(raw, row)
            assert got and not set(got) & AUTH_CODES, got
        finally:
            sec.revoke(*_bindings(needed))
    finally:
        raw.close()


def test_listings_show_only_what_one_may_describe(sec: Secured) -> None:
    """ListGroups and ListTransactions filter; DescribeCluster and Metadata answer the
    authorized-operations bitfields from the ACLs."""
    group = _unique("lg")
    c = Consumer({**sec.conf("admin"), "group.id": group})
    c.commit(offsets=[TopicPartition(sec.topic(_unique("lgt")), 0, 0)], asynchronous=False)
    c.close()
    raw = RawClient(sec.b.bootstrap)
    try:
        assert group not in {g.group_id for g in raw.call(16, 4, {}).groups}
        grant = allow(GROUP, group, "User:ANONYMOUS", Op.DESCRIBE)
        sec.grant(grant)
        assert group in {g.group_id for g in raw.call(16, 4, {}).groups}
        sec.revoke(grant)
        dc = raw.call(60, 0, {"include_cluster_authorized_operations": True})
        assert int(dc.cluster_authorized_operations) == 0
        grant = allow(CLUSTER, "kafka-cluster", "User:ANONYMOUS", Op.ALTER)
        sec.grant(grant)
        dc = raw.call(60, 0, {"include_cluster_authorized_operations": True})
        assert int(dc.cluster_authorized_operations) == (1 << 7) | (1 << 8)  # ALTER, DESCRIBE
        sec.revoke(grant)
    finally:
        raw.close()


def test_cli_adds_lists_and_removes_acls(sec: Secured, tmp_path: Path) -> None:
    """`tidegate acls` with kafka-acls' flags, logged in through --command-config."""
    cfg = tmp_path / "admin.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                   "sasl.username=admin\nsasl.password=admin-secret\n")
    t, tid = _unique("cli"), _unique("cli-tx")
    common = ["--bootstrap-server", f"127.0.0.1:{sec.sasl_port}", "--command-config", str(cfg)]

    def acls(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "tidegate.cli.main", "acls", *args, *common],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return r.stdout

    acls("add", "--allow-principal", "User:alice", "--producer", "--topic", t,
         "--transactional-id", tid)
    listed = acls("list", "--topic", t)
    assert f"name={t}, patternType=LITERAL" in listed
    assert "(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)" in listed
    assert len(sec.admin.describe_acls(AclBindingFilter(
        ResourceType.TRANSACTIONAL_ID, tid, ResourcePatternType.LITERAL, None, None,
        AclOperation.ANY, AclPermissionType.ANY)).result(10)) == 2  # WRITE, DESCRIBE
    removed = acls("remove", "--allow-principal", "User:alice", "--topic", t,
                   "--operation", "Create")
    assert "operation=CREATE" in removed
    assert "operation=CREATE" not in acls("list", "--topic", t)
    sec.admin.delete_acls([ANY_FILTER])[ANY_FILTER].result(10)


# -- CreateTopics' configs and KIP-939's TWO_PHASE_COMMIT, over the raw wire as ANONYMOUS ---


def test_create_topics_hides_configs_without_describe_configs(sec: Secured) -> None:
    """Kafka's ControllerApis: CREATE alone creates the topic but answers its configs,
    partition count and replication factor only with DESCRIBE_CONFIGS on it; without,
    topic_config_error_code is TOPIC_AUTHORIZATION_FAILED."""
    name = _unique("ctc")
    req = {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1}],
           "timeout": 5000, "validate_only": True}
    create = allow(TOPIC, name, "User:ANONYMOUS", Op.CREATE)
    describe = allow(TOPIC, name, "User:ANONYMOUS", Op.DESCRIBE_CONFIGS)
    raw = RawClient(sec.b.bootstrap)
    try:
        sec.grant(create)
        (hidden,) = raw.call(19, 7, req).topics
        assert (int(hidden.error_code), int(hidden.topic_config_error_code)) == (0, TAF)
        assert (hidden.num_partitions, hidden.replication_factor) == (-1, -1)
        assert not hidden.configs
        sec.grant(describe)
        (shown,) = raw.call(19, 7, req).topics
        assert (int(shown.error_code), int(shown.topic_config_error_code)) == (0, 0)
        assert (shown.num_partitions, shown.replication_factor) == (2, 1)
        assert "retention.ms" in {c.name for c in shown.configs}
    finally:
        sec.revoke(create, describe)
        raw.close()


def _tidegate_acls(sec: Secured, bindings: list[Any], add: bool) -> None:
    """confluent-kafka's AclOperation stops at IDEMPOTENT_WRITE: TWO_PHASE_COMMIT (15)
    goes through Tidegate's own admin client."""
    import asyncio

    from tidegate.client.admin import AsyncAdmin
    from tidegate.common.acl import AclBindingFilter as TgFilter

    async def run() -> None:
        async with AsyncAdmin(sec.conf("admin")) as admin:
            if add:
                assert await admin.create_acls(bindings) == [None] * len(bindings)
            else:
                await admin.delete_acls([TgFilter(
                    b.pattern.type, b.pattern.name, b.pattern.pattern, b.entry.principal,
                    b.entry.host, b.entry.operation, b.entry.permission) for b in bindings])

    asyncio.run(run())


def test_init_producer_id_with_2pc_needs_two_phase_commit(sec: Secured) -> None:
    """KIP-939: InitProducerId with enable2Pc needs WRITE and TWO_PHASE_COMMIT on the
    transactional id (WRITE does not imply it); keepPreparedTxn without enable2Pc is
    INVALID_REQUEST once authorized."""
    from tidegate.common.acl import AccessControlEntry, ResourcePattern
    from tidegate.common.acl import AclBinding as TgBinding
    from tidegate.common.acl import AclOperation as TgOp
    from tidegate.common.acl import AclPermissionType as TgPerm
    from tidegate.common.acl import ResourceType as TgRes

    tid = _unique("2pc")

    def grant(op: TgOp) -> Any:
        return TgBinding(ResourcePattern(TgRes.TRANSACTIONAL_ID, tid),
                         AccessControlEntry("User:ANONYMOUS", "*", op, TgPerm.ALLOW))

    def init(enable_2pc: bool, keep: bool = False) -> int:
        return int(raw.call(22, 6, {"transactional_id": tid, "transaction_timeout": 60000,
                                    "producer_id": -1, "producer_epoch": -1,
                                    "enable2_pc": enable_2pc,
                                    "keep_prepared_txn": keep}).error_code)

    raw = RawClient(sec.b.bootstrap)
    write, two_pc = grant(TgOp.WRITE), grant(TgOp.TWO_PHASE_COMMIT)
    try:
        assert init(True) == TIAF
        _tidegate_acls(sec, [write], add=True)
        assert init(False) == 0
        assert init(True) == TIAF
        assert init(False, keep=True) == 42  # INVALID_REQUEST: keepPreparedTxn needs 2PC
        _tidegate_acls(sec, [two_pc], add=True)
        assert init(True) == 0
        _tidegate_acls(sec, [write], add=False)
        assert init(True) == TIAF  # TWO_PHASE_COMMIT alone is not enough either
    finally:
        _tidegate_acls(sec, [write, two_pc], add=False)
        raw.close()
