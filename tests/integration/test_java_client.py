"""Kafka's own Java client (`org.apache.kafka:kafka-clients` 4.x) against a real broker.

The Java client is the one most Kafka users run and the reference the other clients
follow. `java/` is a Maven project whose `Driver` runs one role per JVM and prints JSON
lines; `make deps-java` builds its jar (`mvn -q -B package`). A JVM start costs about a
second, so each driver run batches several checks:

- the idempotent producer (acks=all) lands every record once, keyed records in the
  partition murmur2 picks, and confluent-kafka reads them back;
- the transactional producer commits, aborts and commits again, with offsets sent to a
  group in the first transaction: a read_committed Java consumer sees only the committed
  records, read_uncommitted sees all of them, the group's offset is the one committed;
- two members of one group split four partitions disjointly and read everything, under
  the classic protocol and under KIP-848's `group.protocol=consumer`; ListGroups and
  DescribeConsumerGroups then report the group's type;
- the Admin client: createTopics (and the duplicate's TopicExistsException),
  describeTopics, listOffsets (earliest, latest, max timestamp, by timestamp),
  describeConfigs with sources, incrementalAlterConfigs (SET, APPEND, DELETE, unknown
  name), deleteRecords (and beyond the high watermark), describeCluster, listGroups,
  describeTransactions (an open transaction, an unknown id).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.clients import consume, create_topic
from tests.integration.conftest import BrokerProcess

from tidegate.client.partitioner import partition_for_key

JAR = Path(__file__).parent / "java" / "target" / "tidegate-java-driver.jar"


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # no initial rebalance delay and a 1-s KIP-848 heartbeat: the group tests wait for
    # rebalances, not for timers (both are Kafka settings a test cluster would lower too)
    b = BrokerProcess(tmp_path_factory.mktemp("java") / "data", overrides={
        "group.initial.rebalance.delay.ms": "0",
        "group.consumer.heartbeat.interval.ms": "1000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
    })
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _run(broker: BrokerProcess, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run one driver command; its JSON lines merged into one dict (keys are unique per
    command)."""
    java = shutil.which("java")
    if java is None or not JAR.is_file():
        pytest.fail("the Java driver is not built: run `make deps-java` (needs java and mvn)")
    proc = subprocess.run([java, "-jar", str(JAR), args[0], broker.bootstrap, *args[1:]],
                          text=True, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"Java {args[0]} failed:\n{proc.stderr[-4000:]}\nbroker log:\n"
        + "\n".join(broker.log_lines[-40:]))
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines and "done" in lines[-1], f"Java {args[0]} did not finish: {lines[-3:]}"
    merged: dict[str, Any] = {}
    for line in lines:
        if "txn" in line:  # txn prints one line per transaction
            merged.setdefault("txns", []).append(line)
        elif "isolation" in line:
            merged[line["isolation"]] = line
        else:
            merged.update(line)
    return merged


def test_java_idempotent_producer_confluent_reads(java_broker: BrokerProcess) -> None:
    topic, n = "java-idem", 2000
    create_topic(java_broker.bootstrap, topic, 3)
    res = _run(java_broker, "produce", topic, str(n))
    assert res["done"] == n
    got = consume("confluent", java_broker.bootstrap, topic, n, timeout=30)
    assert len(got) == n
    values = sorted(int(g.value[1:]) for g in got if g.value is not None)
    assert values == list(range(n)), "a record lost or duplicated"
    for g in got:
        assert g.key is not None and g.value is not None
        assert g.key.decode()[1:] == g.value.decode()[1:]
        assert g.partition == partition_for_key(g.key, 3), f"{g.key!r} not where murmur2 says"
    per_partition = {int(p): c for p, c in res["partitions"].items()}
    assert per_partition == {p: sum(1 for g in got if g.partition == p) for p in range(3)}
    for p in range(3):
        offsets = [g.offset for g in got if g.partition == p]
        assert offsets == list(range(len(offsets))), f"partition {p} offsets not dense"


def test_java_transactions_read_committed(java_broker: BrokerProcess) -> None:
    topic = "java-txn"
    create_topic(java_broker.bootstrap, topic, 2)
    res = _run(java_broker, "txn", topic, "java-tx-1", "java-tx-group")
    assert [(t["txn"], t["committed"]) for t in res["txns"]] == [
        ("c", True), ("a", False), ("d", True)]
    committed = sorted(f"{p}{i}" for p in "cd" for i in range(10))
    assert res["read_committed"]["values"] == committed
    assert res["read_uncommitted"]["values"] == sorted(
        committed + [f"a{i}" for i in range(10)])
    # 3 transactions of 5 records in each partition, each closed by a marker; nothing
    # is open, so the last stable offset is the high watermark
    assert res["read_committed"]["end"] == {"0": 18, "1": 18}
    assert res["read_uncommitted"]["end"] == {"0": 18, "1": 18}
    assert res["group_offset"] == 42
    # confluent-kafka agrees about what was committed
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": java_broker.bootstrap, "group.id": "java-txn-check",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(2)])
        values: list[str] = []
        while len(values) < 20:
            m = c.poll(10.0)
            assert m is not None, f"confluent read_committed stopped at {len(values)} records"
            assert not m.error(), m.error()
            values.append(bytes(m.value() or b"").decode())
        assert sorted(values) == committed
    finally:
        c.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_group_members_split_partitions(java_broker: BrokerProcess, protocol: str) -> None:
    topic, group, n = f"java-group-{protocol}", f"java-group-{protocol}", 400
    create_topic(java_broker.bootstrap, topic, 4)
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": java_broker.bootstrap})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % 4)
    assert p.flush(30) == 0
    res = _run(java_broker, "group", topic, group, protocol, str(n))
    assignments = {m: set(ps) for m, ps in res["assignments"].items()}
    assert set(assignments) == {"m1", "m2"}
    assert all(assignments.values()), f"a member got nothing: {assignments}"
    assert assignments["m1"].isdisjoint(assignments["m2"]), assignments
    assert assignments["m1"] | assignments["m2"] == {0, 1, 2, 3}, assignments
    assert res["consumed"] == n
    assert res["committed_total"] == n
    kind = "Classic" if protocol == "classic" else "Consumer"
    assert res["listed"] == {"type": kind, "protocol": "consumer", "state": "Empty"}
    assert res["described"]["type"] == kind
    assert res["described"]["state"] == "Empty"
    assert res["described"]["members"] == 0


def test_java_admin(java_broker: BrokerProcess) -> None:
    topic = "java-admin"
    res = _run(java_broker, "admin", topic)
    assert res["created"] == topic
    assert res["created_again"] == "TopicExistsException"
    d = res["described"]
    assert d["name"] == topic and d["internal"] is False and d["id_set"] is True
    assert sorted(p["partition"] for p in d["partitions"]) == [0, 1, 2]
    assert all(p["replicas"] == 1 and p["isr"] == 1 for p in d["partitions"])

    # 10 records at 1_700_000_000_000 + i s in partition 0; by timestamp 3.5 s in is the
    # first at or after it: offset 4; earliest/latest carry no timestamp (-1), as Kafka's
    assert res["offsets"] == {
        "earliest": {"offset": 0, "timestamp": -1},
        "latest": {"offset": 10, "timestamp": -1},
        "max_timestamp": {"offset": 9, "timestamp": 1_700_000_009_000},
        "at_ts": {"offset": 4, "timestamp": 1_700_000_004_000},
    }
    dyn, dflt = "DYNAMIC_TOPIC_CONFIG", "DEFAULT_CONFIG"
    assert res["configs"] == {
        "retention.ms": {"value": "3600000", "source": dyn, "default": False},
        "cleanup.policy": {"value": "delete", "source": dyn, "default": False},
        "segment.bytes": {"value": "1073741824", "source": dflt, "default": True},
    }
    assert res["altered"] == {
        "retention.ms": {"value": "7200000", "source": dyn, "default": False},
        "cleanup.policy": {"value": "delete,compact", "source": dyn, "default": False},
        "segment.bytes": {"value": "1073741824", "source": dflt, "default": True},
    }
    assert res["alter_unknown"] == "InvalidConfigurationException"
    assert res["broker_config"]["num.partitions"] == "1"
    assert res["broker_config"]["source"] == dflt
    assert res["broker_config"]["entries"] > 50

    assert res["deleted_low_watermark"] == 4
    assert res["offsets_after_delete"]["earliest"] == {"offset": 4, "timestamp": -1}
    assert res["offsets_after_delete"]["latest"] == {"offset": 10, "timestamp": -1}
    assert res["delete_beyond_hw"] == "OffsetOutOfRangeException"

    cluster = res["cluster"]
    assert cluster["nodes"] == 1 and cluster["host"] == "127.0.0.1"
    assert cluster["controller"] >= 0 and cluster["id"] not in ("", "None")
    assert isinstance(res["groups"], list)

    txn = res["transaction"]
    assert txn["state"] == "Ongoing" and txn["producer_id_set"] and txn["start_set"]
    assert txn["partitions"] == [f"{topic}-1"]
    assert txn["timeout_ms"] == 60000  # the Java producer's transaction.timeout.ms
    assert res["transaction_unknown"] == "TransactionalIdNotFoundException"


@pytest.fixture(scope="module")
def misuse(java_broker: BrokerProcess) -> dict[str, Any]:
    """One driver run of the Admin client's error and detail paths, shared by the tests
    below (a JVM start per check would cost a second each)."""
    return _run(java_broker, "misuse", "java-misuse")


def test_java_admin_errors_are_kafkas(misuse: dict[str, Any]) -> None:
    """Each answer is the exception Kafka's broker makes the Java Admin raise."""
    assert misuse["describe_unknown_topic"] == "UnknownTopicOrPartitionException"
    assert misuse["create_zero_partitions"] == "InvalidPartitionsException"
    assert misuse["create_rf_3"] == "InvalidReplicationFactorException"
    assert misuse["create_bad_config"] == "InvalidConfigurationException"
    assert misuse["create_bad_value"] == "InvalidConfigurationException"
    assert misuse["create_bad_name"] == "InvalidTopicException"
    assert misuse["describe_configs_unknown_topic"] == "UnknownTopicOrPartitionException"
    # a read-only broker key: Kafka wraps the ConfigException in INVALID_REQUEST
    assert misuse["alter_static_broker"] == "InvalidRequestException"
    assert misuse["alter_append_non_list"] == "InvalidConfigurationException"
    assert misuse["delete_topic_unknown"] == "UnknownTopicOrPartitionException"
    # KIP-1043 (Kafka 4.0): describing a group that does not exist fails
    assert misuse["describe_unknown_group"] == "GroupIdNotFoundException"
    assert misuse["list_group_offsets_unknown"] == "{}"


def test_java_admin_details(misuse: dict[str, Any]) -> None:
    # validateOnly answers with what would be created, and creates nothing; absent
    # partitions and replication factor take the broker's defaults
    assert misuse["create_validate_only"] == {"partitions": 5, "exists": False}
    assert misuse["create_defaults"] == {"partitions": 1, "rf": 1}
    assert misuse["alter_validate_only"] == "604800000"
    # a cluster-wide default reaches the topic, and removing it restores the built-in
    assert misuse["alter_cluster_default"] == (
        "0.6@DYNAMIC_DEFAULT_BROKER_CONFIG then 0.5@DEFAULT_CONFIG")
    # synonyms are named by the broker key behind the topic config, as Kafka's are
    syn = misuse["synonyms"]
    assert syn["retention.ms"]["synonyms"] == ["log.retention.hours=168@DEFAULT_CONFIG"]
    assert syn["segment.bytes"]["synonyms"] == ["log.segment.bytes=1073741824@DEFAULT_CONFIG"]
    assert syn["message.timestamp.type"]["synonyms"] == [
        "log.message.timestamp.type=CreateTime@DEFAULT_CONFIG"]
    assert syn["min.insync.replicas"]["synonyms"] == [
        "min.insync.replicas=1@DYNAMIC_DEFAULT_BROKER_CONFIG",
        "min.insync.replicas=1@DEFAULT_CONFIG"]
    assert all(e["doc"] and not e["readOnly"] and not e["sensitive"] for e in syn.values())
    assert (syn["retention.ms"]["type"], syn["segment.bytes"]["type"]) == ("LONG", "INT")
    assert misuse["delete_records_hw"] == 1  # -1: up to the high watermark
    # no authorizer: every operation the resource type supports, as Kafka reports
    assert misuse["cluster_operations"] == sorted([
        "ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
        "IDEMPOTENT_WRITE"])
    assert misuse["topic_operations"] == sorted([
        "ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ",
        "WRITE"])
    assert misuse["describe_producers"] == [
        {"epoch": 0, "last_seq": 0, "txn_start": "OptionalLong.empty"}]
    assert misuse["list_transactions"] == "CompleteCommit"
    assert misuse["describe_log_dirs"] == {
        "dir": {"has_tp0": True, "error": "null", "total_set": True}}
    features = misuse["describe_features"]
    assert set(features) >= {"metadata.version", "transaction.version", "group.version"}
    assert all(lo == hi for lo, hi in (v.split("..") for v in features.values()))


def test_java_admin_per_broker_config_source(misuse: dict[str, Any]) -> None:
    """A value set on broker id N is that broker's own (Kafka keeps two levels)."""
    assert misuse["alter_broker_dynamic"] == "2@DYNAMIC_BROKER_CONFIG"
