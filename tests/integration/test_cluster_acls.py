"""ACLs in a 3-broker ZooKeeper cluster (server/cluster/acls.py): an ACL created through
one broker is enforced by the others within seconds, a deletion too, and the znodes are
Kafka's (`/kafka-acl/Topic/<t>`, `/kafka-acl-extended/prefixed/...`, change
notifications). Brokers talk to each other on a PLAINTEXT listener named INTERNAL, as
User:ANONYMOUS, which `super.users` therefore lists (docs/security.md); clients use
SASL_PLAINTEXT (PLAIN users admin and alice), logged in by hand over the raw wire so
each request goes to the broker the test names. SCRAM users live in ZooKeeper's
`/config/users/<user>` beside the user's quotas: one made through one broker logs in on
all three, and its deletion holds everywhere. Topic ACLs are checked before a topic is
looked up in ZooKeeper (a lookup on a metadata-cache miss).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Callable, Iterator

import pytest
import scramp  # type: ignore[import-untyped]
from kazoo.client import KazooClient
from tests.integration.cluster import Cluster, wait_for
from tests.integration.conftest import free_port
from tests.integration.rawclient import RawClient

pytestmark = pytest.mark.interop

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-secret" user_alice="alice-secret";')
TAF, UNKNOWN_TOPIC = 29, 3


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[int, int]]]:
    c = Cluster(tmp_path_factory.mktemp("acl-cluster"), overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    })
    sasl: dict[int, int] = {}
    for bid, b in c.brokers.items():
        sasl[bid] = free_port()
        b.overrides["listeners"] = (f"INTERNAL://127.0.0.1:{b.port},"
                                    f"SASL_PLAINTEXT://127.0.0.1:{sasl[bid]}")
    c.start()
    try:
        yield c, sasl
    finally:
        c.stop()


def login(port: int, user: str) -> RawClient:
    """A raw connection to one broker, authenticated with SASL/PLAIN."""
    raw = RawClient(f"127.0.0.1:{port}")
    assert int(raw.call(17, 1, {"mechanism": "PLAIN"}).error_code) == 0
    token = b"\0" + user.encode() + b"\0" + f"{user}-secret".encode()
    assert int(raw.call(36, 2, {"auth_bytes": token}).error_code) == 0
    return raw


def _describe_code(raw: RawClient, topic: str) -> int:
    resp = raw.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return int(resp.topics[0].error_code)


def _acl(op: int, name: str, pattern: int = 3) -> dict[str, object]:
    return {"resource_type": 2, "resource_name": name, "resource_pattern_type": pattern,
            "principal": "User:alice", "host": "*", "operation": op, "permission_type": 3}


def test_an_acl_made_on_one_broker_holds_on_every_broker(
        secured: tuple[Cluster, dict[int, int]]) -> None:
    c, sasl = secured
    admin1, admin2 = login(sasl[1], "admin"), login(sasl[2], "admin")
    alice = {bid: login(port, "alice") for bid, port in sasl.items()}
    try:
        for raw in alice.values():
            assert _describe_code(raw, "orders") == TAF
        created = admin1.call(30, 3, {"creations": [_acl(8, "orders"), _acl(4, "pay-", 4)]})
        assert [int(r.error_code) for r in created.results] == [0, 0]
        for bid, raw in alice.items():  # DESCRIBE granted: the topic is merely unknown
            wait_for(f"broker {bid} to apply the ACL",
                     lambda raw=raw: _describe_code(raw, "orders") == UNKNOWN_TOPIC, 10)
        zk = KazooClient(hosts=f"{c.zk.connect}/tidegate")
        zk.start()
        try:
            data, _ = zk.get("/kafka-acl/Topic/orders")
            assert json.loads(data) == {"version": 1, "acls": [
                {"principal": "User:alice", "permissionType": "Allow",
                 "operation": "Describe", "host": "*"}]}
            assert zk.exists("/kafka-acl-extended/prefixed/Topic/pay-")
            assert zk.get_children("/kafka-acl-changes")
            assert zk.get_children("/kafka-acl-extended-changes")
        finally:
            zk.stop()
            zk.close()
        deleted = admin2.call(31, 3, {"filters": [{
            "resource_type_filter": 2, "resource_name_filter": "orders",
            "pattern_type_filter": 3, "principal_filter": None, "host_filter": None,
            "operation": 1, "permission_type": 1}]})
        assert len(deleted.filter_results[0].matching_acls) == 1
        for bid, raw in alice.items():
            wait_for(f"broker {bid} to drop the ACL",
                     lambda raw=raw: _describe_code(raw, "orders") == TAF, 10)
        # the PREFIXED one is still everywhere (WRITE implies DESCRIBE)
        for raw in alice.values():
            assert _describe_code(raw, "pay-eu") == UNKNOWN_TOPIC
    finally:
        for raw in (admin1, admin2, *alice.values()):
            raw.close()
    # a restarted broker reads the ACLs back from ZooKeeper
    c.brokers[3].stop()
    c.restart(3)
    again = login(sasl[3], "alice")
    try:
        assert _describe_code(again, "pay-eu") == UNKNOWN_TOPIC
        assert _describe_code(again, "orders") == TAF
    finally:
        again.close()


def scram_login(port: int, user: str, password: str) -> int:
    """SCRAM-SHA-512 over the raw wire against one broker: SaslAuthenticate's last code."""
    raw = RawClient(f"127.0.0.1:{port}")
    try:
        assert int(raw.call(17, 1, {"mechanism": "SCRAM-SHA-512"}).error_code) == 0
        client = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
        first = raw.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
        if int(first.error_code) != 0:
            return int(first.error_code)
        client.set_server_first(bytes(first.auth_bytes).decode())
        final = raw.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
        return int(final.error_code)
    finally:
        raw.close()


def _upsert(user: str, password: str) -> dict[str, object]:
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
    return {"name": user, "mechanism": 2, "iterations": 4096, "salt": salt,
            "salted_password": salted}


def test_scram_user_made_on_one_broker_logs_in_on_every_broker(
        secured: tuple[Cluster, dict[int, int]]) -> None:
    c, sasl = secured
    admin1, admin2 = login(sasl[1], "admin"), login(sasl[2], "admin")
    try:
        for port in sasl.values():  # unknown everywhere at first
            assert scram_login(port, "dave", "dave-secret") == 58
        made = admin1.call(51, 0, {"deletions": [], "upsertions": [_upsert("dave", "dave-secret")]})
        assert [int(r.error_code) for r in made.results] == [0]
        for bid, port in sasl.items():
            wait_for(f"broker {bid} to know dave",
                     lambda port=port: scram_login(port, "dave", "dave-secret") == 0, 10)
        assert scram_login(sasl[3], "dave", "wrong") == 58
        # a quota for the same user, through another broker, shares the znode
        quota = admin2.call(49, 1, {"entries": [{
            "entity": [{"entity_type": "user", "entity_name": "dave"}],
            "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}],
            "validate_only": False})
        assert int(quota.entries[0].error_code) == 0
        zk = KazooClient(hosts=f"{c.zk.connect}/tidegate")
        zk.start()
        try:
            config = json.loads(zk.get("/config/users/dave")[0])["config"]
            assert config["producer_byte_rate"] == "1048576"
            assert set(config["SCRAM-SHA-512"].split(",")[i].split("=")[0]
                       for i in range(4)) == {"salt", "stored_key", "server_key", "iterations"}
            assert "dave-secret" not in json.dumps(config)
        finally:
            zk.stop()
            zk.close()
        described = admin2.call(50, 0, {"users": [{"name": "dave"}]})
        assert int(described.results[0].error_code) == 0
        assert scram_login(sasl[1], "dave", "dave-secret") == 0  # the quota write kept it
        gone = admin2.call(51, 0, {"deletions": [{"name": "dave", "mechanism": 2}],
                                   "upsertions": []})
        assert [int(r.error_code) for r in gone.results] == [0]
        for bid, port in sasl.items():
            wait_for(f"broker {bid} to forget dave",
                     lambda port=port: scram_login(port, "dave", "dave-secret") == 58, 10)
    finally:
        admin1.close()
        admin2.close()


def _zk_received(c: Cluster) -> int:
    """Packets the ZooKeeper server has received so far (its `srvr` four-letter word)."""
    with socket.create_connection(("127.0.0.1", c.zk.port), timeout=5) as s:
        s.sendall(b"srvr")
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    found = re.search(rb"Received: (\d+)", out)
    assert found is not None, out
    return int(found.group(1))


def _refusals_read_nothing(call: Callable[[list[str]], tuple[set[str], int]],
                           allowed: list[str], denied: list[str]) -> None:
    """`call(names)` -> (error codes, ZooKeeper packets received meanwhile): the denied
    names are refused without a read, the allowed ones (unknown topics) cost at least
    100 reads; only the brokers' own traffic otherwise."""
    wait_for("broker 1 to apply the ACLs",
             lambda: call(allowed[:1])[0] == {"unknown_topic_or_partition"}, 10)
    codes, denied_reads = call(denied)
    assert codes == {"topic_authorization_failed"}
    codes, allowed_reads = call(allowed)
    assert codes == {"unknown_topic_or_partition"}
    assert allowed_reads >= 100 and denied_reads < 30, (allowed_reads, denied_reads)


def test_refused_topics_cost_no_zookeeper_reads(
        secured: tuple[Cluster, dict[int, int]]) -> None:
    """OffsetCommit naming topics alice may not READ is refused before any topic is
    looked up (Kafka answers TOPIC_AUTHORIZATION_FAILED whether or not the topic exists),
    so unknown topics cost no ZooKeeper read; the same request for topics she may READ
    looks each one up (a read of its znode) and answers UNKNOWN_TOPIC_OR_PARTITION."""
    c, sasl = secured
    admin, alice = login(sasl[1], "admin"), login(sasl[1], "alice")
    group = "zk-reads-g"
    try:
        created = admin.call(30, 3, {"creations": [
            _acl(3, "zk-allowed-", 4),
            {**_acl(3, group), "resource_type": 3}]})  # READ on the group
        assert [int(r.error_code) for r in created.results] == [0, 0]

        def commit(names: list[str]) -> tuple[set[str], int]:
            before = _zk_received(c)
            r = alice.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1,
                                  "member_id": "", "topics": [
                                      {"name": n, "partitions": [
                                          {"partition_index": 0, "committed_offset": 0}]}
                                      for n in names]})
            return ({str(t.partitions[0].error_code.name) for t in r.topics},
                    _zk_received(c) - before)

        _refusals_read_nothing(commit, [f"zk-allowed-{i}" for i in range(100)],
                               [f"zk-denied-{i}" for i in range(100)])
    finally:
        admin.close()
        alice.close()


def test_refused_descriptions_cost_no_zookeeper_reads(
        secured: tuple[Cluster, dict[int, int]]) -> None:
    """Metadata and DescribeTopicPartitions naming topics alice may not DESCRIBE are
    refused before a topic this broker has not seen is looked up in ZooKeeper (a topic
    created through another broker moments ago, handlers/new_topics.py); names she may
    describe are looked up (a read of each znode) and answered
    UNKNOWN_TOPIC_OR_PARTITION."""
    c, sasl = secured
    admin, alice = login(sasl[1], "admin"), login(sasl[1], "alice")
    try:
        created = admin.call(30, 3, {"creations": [_acl(8, "md-allowed-", 4)]})
        assert [int(r.error_code) for r in created.results] == [0]

        def describe(names: list[str]) -> tuple[set[str], int]:
            before = _zk_received(c)
            md = alice.call(3, 12, {"topics": [{"name": n} for n in names],
                                    "allow_auto_topic_creation": False})
            dtp = alice.call(75, 0, {"topics": [{"name": n} for n in names],
                                     "response_partition_limit": 2000, "cursor": None})
            return ({str(t.error_code.name) for t in [*md.topics, *dtp.topics]},
                    _zk_received(c) - before)

        # 2 x 50 reads for the allowed names (Metadata and DescribeTopicPartitions)
        _refusals_read_nothing(describe, [f"md-allowed-{i}" for i in range(50)],
                               [f"md-denied-{i}" for i in range(50)])
    finally:
        admin.close()
        alice.close()
