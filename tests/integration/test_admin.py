"""Topic and config administration, offsets queries and broker configuration, with
confluent-kafka's and kafka-python's admin clients as the oracles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from tests.integration.conftest import ROOT, BrokerProcess, free_port
from tests.integration.rawclient import RawClient

_SET = AlterConfigOpType.SET
_APPEND = AlterConfigOpType.APPEND
_SUBTRACT = AlterConfigOpType.SUBTRACT


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def test_create_describe_alter_delete_topics(shared_broker: BrokerProcess) -> None:
    a = _admin(shared_broker)
    a.create_topics([NewTopic("adm1", 2, 1, config={"cleanup.policy": "compact"})])["adm1"].result(
        30
    )
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("adm1", 2, 1)])["adm1"].result(30)
    assert "TOPIC_ALREADY_EXISTS" in str(ei.value)
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"].result(30)
    assert "val=17" in str(ei.value)  # INVALID_TOPIC_EXCEPTION
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("adm-rf", 1, 3)])["adm-rf"].result(30)
    assert "REPLICATION_FACTOR" in str(ei.value)
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("adm-cfg", 1, 1, config={"retention.ms": "soon"})])[
            "adm-cfg"
        ].result(30)
    assert "INVALID_CONFIG" in str(ei.value)
    md = a.list_topics(timeout=10)
    assert len(md.topics["adm1"].partitions) == 2
    a.create_partitions([NewPartitions("adm1", 5)])["adm1"].result(30)
    assert len(a.list_topics("adm1", timeout=10).topics["adm1"].partitions) == 5
    with pytest.raises(KafkaException):
        a.create_partitions([NewPartitions("adm1", 3)])["adm1"].result(30)

    res = ConfigResource("topic", "adm1")
    cfg = a.describe_configs([res])[res].result(30)
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["cleanup.policy"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert cfg["retention.ms"].value == "604800000"
    a.incremental_alter_configs(
        [
            ConfigResource(
                "topic",
                "adm1",
                incremental_configs=[
                    ConfigEntry(
                        "retention.ms", "1000", incremental_operation=AlterConfigOpType.SET
                    ),
                    ConfigEntry(
                        "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND
                    ),
                ],
            )
        ]
    )[res].result(30)
    cfg = a.describe_configs([res])[res].result(30)
    assert cfg["retention.ms"].value == "1000"
    assert cfg["cleanup.policy"].value == "compact,delete"
    a.incremental_alter_configs(
        [
            ConfigResource(
                "topic",
                "adm1",
                incremental_configs=[
                    ConfigEntry(
                        "retention.ms", None, incremental_operation=AlterConfigOpType.DELETE
                    ),
                ],
            )
        ]
    )[res].result(30)
    assert a.describe_configs([res])[res].result(30)["retention.ms"].value == "604800000"

    a.delete_topics(["adm1"])["adm1"].result(30)
    time.sleep(0.2)
    assert "adm1" not in a.list_topics(timeout=10).topics


def test_broker_configs_and_dynamic_defaults(shared_broker: BrokerProcess) -> None:
    a = _admin(shared_broker)
    res = ConfigResource("broker", "1")
    cfg = a.describe_configs([res])[res].result(30)
    assert cfg["num.partitions"].value == "1"
    assert cfg["log.flush.interval.messages"].value == "1"
    a.incremental_alter_configs(
        [
            ConfigResource(
                "broker",
                "1",
                incremental_configs=[
                    ConfigEntry(
                        "log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET
                    )
                ],
            )
        ]
    )[res].result(30)
    a.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(30)
    tres = ConfigResource("topic", "dyn")
    entry = a.describe_configs([tres])[tres].result(30)["retention.ms"]
    assert entry.value == "7200000"
    assert entry.source == 2  # DYNAMIC_BROKER_CONFIG: set on broker id 1
    a.incremental_alter_configs(
        [
            ConfigResource(
                "broker",
                "1",
                incremental_configs=[
                    ConfigEntry(
                        "log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE
                    )
                ],
            )
        ]
    )[res].result(30)
    assert a.describe_configs([tres])[tres].result(30)["retention.ms"].value == "604800000"


def test_list_offsets_and_delete_records(shared_broker: BrokerProcess) -> None:
    a = _admin(shared_broker)
    a.create_topics([NewTopic("offs", 1, 1)])["offs"].result(30)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    stamps = [base + 10 * i for i in range(100)]
    stamps[40] = base + 99_999  # the max timestamp, in the middle
    for i, ts in enumerate(stamps):
        p.produce("offs", str(i).encode(), partition=0, timestamp=ts)
        p.flush(10)
    tp = TopicPartition("offs", 0)
    got = a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30)
    assert got.offset == 0
    got = a.list_offsets({tp: OffsetSpec.latest()})[tp].result(30)
    assert got.offset == 100
    got = a.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(30)
    assert (got.offset, got.timestamp) == (40, base + 99_999)
    got = a.list_offsets({tp: OffsetSpec.for_timestamp(base + 505)})[tp].result(30)
    assert got.offset == 40  # first record with timestamp >= base+505 is #40 (the max)
    got = a.list_offsets({tp: OffsetSpec.for_timestamp(base + 10**9)})[tp].result(30)
    assert got.offset == -1
    deleted = a.delete_records([TopicPartition("offs", 0, 30)])
    assert deleted[tp].result(30).low_watermark == 30
    got = a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30)
    assert got.offset == 30
    c = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": "x",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition("offs", 0, 0)])  # below the log start: reset to earliest
    m = c.consume(1, 10)[0]
    assert (m.offset(), m.value()) == (30, b"30")
    c.close()


def test_kafka_python_admin(shared_broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    a = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    a.create_topics([KNewTopic("kp-adm", 3, 1, topic_configs={"retention.bytes": "1000000"})])
    assert "kp-adm" in a.list_topics()
    desc = a.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-adm")])
    text = str(desc)
    assert "retention.bytes" in text and "1000000" in text
    cluster = a.describe_cluster()
    assert cluster["brokers"][0]["port"] == shared_broker.port
    a.delete_topics(["kp-adm"])
    a.close()


def test_advertised_listeners_properties_file_and_env(tmp_path: Path) -> None:
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        f"# a Kafka-style file\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
        "num.partitions=4\nadvertised.listeners=PLAINTEXT://localhost:"
        f"{port}\n"
    )
    env = dict(os.environ, TIDEGATE_LOG_DIRS=str(tmp_path / "data"), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidegate.cli.main",
            "serve",
            str(props),
            "--override",
            "auto.create.topics.enable=true",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 30
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert f"advertised as PLAINTEXT://localhost:{port}" in line
        a = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        md = a.list_topics(timeout=10)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("localhost", port)]
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        p.produce("auto-created", b"x")
        assert p.flush(20) == 0
        assert len(a.list_topics("auto-created", timeout=10).topics["auto-created"].partitions) == 4
        assert (tmp_path / "data" / "auto-created-0").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "stopped cleanly" in out


def _ialter(a: AdminClient, res: ConfigResource, *entries: ConfigEntry) -> None:
    r = ConfigResource(res.restype, res.name, incremental_configs=list(entries))
    a.incremental_alter_configs([r])[r].result(30)


def _error_of(fut: Any) -> str:
    with pytest.raises(KafkaException) as ei:
        fut.result(30)
    return str(ei.value)


def test_subtract_may_empty_a_list_config(shared_broker: BrokerProcess) -> None:
    a = _admin(shared_broker)
    a.create_topics([NewTopic("sub-empty", 1, 1)])["sub-empty"].result(30)
    res = ConfigResource("topic", "sub-empty")
    _ialter(a, res, ConfigEntry("cleanup.policy", "delete", incremental_operation=_SUBTRACT))
    entry = a.describe_configs([res])[res].result(30)["cleanup.policy"]
    assert (entry.value or "", entry.source) == ("", 1)
    _ialter(a, res, ConfigEntry("cleanup.policy", "compact", incremental_operation=_APPEND))
    assert a.describe_configs([res])[res].result(30)["cleanup.policy"].value == "compact"


def test_unknown_broker_in_an_assignment_is_invalid_replica_assignment(
    shared_broker: BrokerProcess,
) -> None:
    a = _admin(shared_broker)
    err = _error_of(a.create_topics([NewTopic("ra-bad", 1, replica_assignment=[[2]])])["ra-bad"])
    assert "INVALID_REPLICA_ASSIGNMENT" in err, err
    a.create_topics([NewTopic("ra-ok", 2, replica_assignment=[[1], [1]])])["ra-ok"].result(30)
    fut = a.create_partitions([NewPartitions("ra-ok", 3, replica_assignment=[[7]])])["ra-ok"]
    assert "INVALID_REPLICA_ASSIGNMENT" in _error_of(fut)
    a.create_partitions([NewPartitions("ra-ok", 3, replica_assignment=[[1]])])["ra-ok"].result(30)
    assert len(a.list_topics("ra-ok", timeout=10).topics["ra-ok"].partitions) == 3


def test_config_sources_and_dynamic_broker_keys(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={"log.retention.hours": "100"})
    b.start()
    try:
        a = _admin(b)
        broker_res = ConfigResource("broker", "1")
        cfg = a.describe_configs([broker_res])[broker_res].result(30)
        assert (cfg["log.retention.hours"].value, cfg["log.retention.hours"].source) == ("100", 4)
        assert (cfg["num.partitions"].value, cfg["num.partitions"].source) == ("1", 5)
        # The cluster default written at first start, as Kafka 4.1+ (KIP-966).
        assert (cfg["min.insync.replicas"].value, cfg["min.insync.replicas"].source) == ("1", 3)
        assert cfg["background.threads"].source == 5 and not cfg["background.threads"].is_read_only
        assert cfg["log.dirs"].source == 4 and cfg["log.dirs"].is_read_only
        a.create_topics([NewTopic("src", 1, 1)])["src"].result(30)
        topic_res = ConfigResource("topic", "src")
        tcfg = a.describe_configs([topic_res])[topic_res].result(30)
        assert (tcfg["retention.ms"].value, tcfg["retention.ms"].source) == ("360000000", 4)
        assert tcfg["min.insync.replicas"].source == 3

        # librdkafka's admin test: a non-incremental AlterConfigs of a listener key.
        res = ConfigResource(
            "broker", "1", set_config={"sasl.kerberos.min.time.before.relogin": "58000"}
        )
        a.alter_configs([res])[res].result(30)
        _ialter(
            a,
            broker_res,
            ConfigEntry("background.threads", "9", incremental_operation=_SET),
            ConfigEntry("num.io.threads", "4", incremental_operation=_SET),
            ConfigEntry("log.cleaner.threads", "2", incremental_operation=_SET),
            ConfigEntry("max.connections", "1000", incremental_operation=_SET),
            ConfigEntry("unclean.leader.election.enable", "false", incremental_operation=_SET),
            ConfigEntry("message.max.bytes", "2000000", incremental_operation=_SET),
        )
        cfg = a.describe_configs([broker_res])[broker_res].result(30)
        # set on broker id 1: DYNAMIC_BROKER_CONFIG (2); the KIP-966 cluster default is
        # the "" resource's (3), untouched by a non-incremental AlterConfigs of broker 1
        for name, value, source in [
            ("sasl.kerberos.min.time.before.relogin", "58000", 2),
            ("min.insync.replicas", "1", 3),
            ("background.threads", "9", 2),
            ("num.io.threads", "4", 2),
            ("message.max.bytes", "2000000", 2),
        ]:
            assert (cfg[name].value, cfg[name].source) == (value, source), name
        tcfg = a.describe_configs([topic_res])[topic_res].result(30)
        assert (tcfg["max.message.bytes"].value, tcfg["max.message.bytes"].source) == ("2000000", 2)
        # The cluster-default resource lists only the dynamic values.
        raw = RawClient(b.bootstrap)
        resp = raw.call(
            32,
            4,
            {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}]},
        )
        raw.close()
        dcfg = {c.name: c for c in resp.results[0].configs}
        assert "num.partitions" not in dcfg and "background.threads" not in dcfg
        assert dcfg["min.insync.replicas"].config_source == 3
        # Read-only keys, unprefixed keystore keys and bad values are refused.
        for name, value, code in [
            ("log.dirs", "/tmp/x", "INVALID_REQUEST"),
            ("num.partitions", "3", "INVALID_REQUEST"),
            ("ssl.keystore.location", "/k.jks", "INVALID_REQUEST"),
            ("background.threads", "many", "INVALID_CONFIG"),
            ("background.threads", "0", "INVALID_CONFIG"),
        ]:
            r = ConfigResource(
                "broker",
                "1",
                incremental_configs=[ConfigEntry(name, value, incremental_operation=_SET)],
            )
            assert code in _error_of(a.incremental_alter_configs([r])[r]), name
        _ialter(
            a,
            broker_res,
            ConfigEntry(
                "listener.name.plaintext.ssl.keystore.location",
                "/k.jks",
                incremental_operation=_SET,
            ),
        )
        b.restart()
        a = _admin(b)
        cfg = a.describe_configs([broker_res])[broker_res].result(30)
        assert (cfg["background.threads"].value, cfg["background.threads"].source) == ("9", 2)
        assert cfg["listener.name.plaintext.ssl.keystore.location"].value == "/k.jks"
    finally:
        b.stop()


def test_authorized_operations_without_an_authorizer(shared_broker: BrokerProcess) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    a = _admin(shared_broker)
    a.create_topics([NewTopic("ops", 1, 1)])["ops"].result(30)
    cluster = a.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations or []) == {
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    }
    topic = a.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)[
        "ops"
    ].result(30)
    assert set(topic.authorized_operations or []) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    plain = a.describe_cluster().result(30)
    assert not plain.authorized_operations
