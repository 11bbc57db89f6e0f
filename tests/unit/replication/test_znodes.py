"""ZooKeeper znode codecs: Kafka-written samples decode, our encodings round-trip, and
malformed data is refused with MalformedZnodeError (never another exception)."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.replication import znodes as z
from tidegate.replication import znodes_admin as za
from tidegate.replication.znodes import (
    BrokerEndpoint,
    BrokerInfo,
    ControllerRegistration,
    MalformedZnodeError,
    PartitionState,
    TopicAssignment,
)
from tidegate.replication.znodes_admin import ProducerIdBlock
from tidegate.storage.files import parse_kafka_uuid

# As a ZooKeeper-mode Kafka 3.x broker writes them (zkCli `get`).
KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://localhost:9091"],"jmx_port":-1,"port":9091,'
    b'"host":"localhost","version":5,"timestamp":"1707276552023"}'
)
KAFKA_BROKER_MULTI = (
    b'{"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"SSL"},'
    b'"endpoints":["CLIENT://host1:9092","REPLICATION://[::1]:9093"],"rack":"dc1",'
    b'"jmx_port":9999,"port":9092,"host":"host1","version":5,"timestamp":"2233345666",'
    b'"features":{"metadata.version":{"min_version":1,"max_version":7}}}'
)
KAFKA_TOPIC = (
    b'{"removing_replicas":{},"partitions":{"0":[0]},"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ",'
    b'"adding_replicas":{},"version":3}'
)
KAFKA_CONTROLLER = (
    b'{"version":2,"brokerid":0,"timestamp":"1719917952299","kraftControllerEpoch":-1}'
)
KAFKA_STATE = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1,3]}'
KAFKA_CLUSTER_ID = b'{"version":"1","id":"Sfr7YvlkRHSHrmSrwq9mug"}'
KAFKA_PID_BLOCK = b'{"version":1,"broker":1,"block_start":"1000","block_end":"1999"}'
KAFKA_TOPIC_CONFIG = b'{"version":1,"config":{"retention.ms":"100000"}}'
KAFKA_ELECTION = (
    b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"b","partition":3}]}'
)
KAFKA_REASSIGN = b'{"version":1,"partitions":[{"topic":"a","partition":1,"replicas":[3,1,2]}]}'


def test_kafka_broker_registration_decodes() -> None:
    info = BrokerInfo.decode(101, KAFKA_BROKER)
    assert info.broker_id == 101
    assert info.endpoints == (BrokerEndpoint("PLAINTEXT", "localhost", 9091, "PLAINTEXT"),)
    assert info.rack is None and info.jmx_port == -1 and info.version == 5
    assert info.timestamp_ms == 1707276552023


def test_kafka_broker_registration_with_listeners_rack_features() -> None:
    info = BrokerInfo.decode(1, KAFKA_BROKER_MULTI)
    assert info.endpoints == (
        BrokerEndpoint("CLIENT", "host1", 9092, "PLAINTEXT"),
        BrokerEndpoint("REPLICATION", "::1", 9093, "SSL"),
    )
    assert info.rack == "dc1"
    assert info.features == {"metadata.version": (1, 7)}
    assert info.endpoint("REPLICATION") == info.endpoints[1]
    again = BrokerInfo.decode(1, info.encode())
    assert again == info


def test_broker_registration_encoding_is_kafkas_layout() -> None:
    info = BrokerInfo(
        3,
        (BrokerEndpoint("INTERNAL", "10.0.0.3", 9093), BrokerEndpoint("EXTERNAL", "h", 9092)),
        rack="r1",
        timestamp_ms=42,
    )
    obj = json.loads(info.encode())
    assert obj == {
        "features": {},
        "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT"},
        "endpoints": ["INTERNAL://10.0.0.3:9093", "EXTERNAL://h:9092"],
        "jmx_port": -1,
        "port": 9093,
        "host": "10.0.0.3",
        "version": 5,
        "timestamp": "42",
        "rack": "r1",
    }
    assert b" " not in info.encode()  # compact, as Jackson writes it


def test_broker_without_plaintext_endpoint_registers_host_null() -> None:
    info = BrokerInfo(1, (BrokerEndpoint("SECURE", "h", 1, "SSL"),))
    obj = json.loads(info.encode())
    assert obj["host"] is None and obj["port"] == -1


def test_version1_broker_registration() -> None:
    raw = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"1"}'
    info = BrokerInfo.decode(0, raw)
    assert info.endpoints == (BrokerEndpoint("PLAINTEXT", "localhost", 9092),)


def test_kafka_topic_znode() -> None:
    a = TopicAssignment.decode("test", KAFKA_TOPIC)
    assert a.partitions == {0: (0,)}
    assert a.topic_id == parse_kafka_uuid("ZOLr9CLNQjSW70hyIHx6BQ")
    assert a.adding_replicas == {} and a.removing_replicas == {}
    assert json.loads(a.encode()) == json.loads(KAFKA_TOPIC)


def test_topic_znode_with_reassignment_in_flight() -> None:
    a = TopicAssignment(
        "t",
        {0: (1, 2, 3), 1: (2, 3, 4)},
        uuid.uuid4(),
        adding_replicas={0: (3,)},
        removing_replicas={0: (4,), 1: ()},
    )
    obj = json.loads(a.encode())
    assert obj["adding_replicas"] == {"0": [3]}
    assert obj["removing_replicas"] == {"0": [4]}  # empty lists are not written
    assert obj["version"] == 3
    assert TopicAssignment.decode("t", a.encode()) == TopicAssignment(
        "t", a.partitions, a.topic_id, {0: (3,)}, {0: (4,)}
    )


def test_topic_znode_without_topic_id_decodes() -> None:
    a = TopicAssignment.decode("old", b'{"version":1,"partitions":{"0":[1,2]}}')
    assert a.topic_id is None and a.partitions == {0: (1, 2)}
    assert "topic_id" not in json.loads(a.encode())


def test_partition_state() -> None:
    s = PartitionState.decode(KAFKA_STATE)
    assert s == PartitionState(leader=2, leader_epoch=7, isr=(2, 1, 3), controller_epoch=3)
    assert json.loads(s.encode()) == json.loads(KAFKA_STATE)
    # leader_recovery_state is written only when not RECOVERED (KIP-704)
    recovering = PartitionState(-1, 8, (2,), 4, z.LEADER_RECOVERING)
    assert json.loads(recovering.encode())["leader_recovery_state"] == 1
    assert PartitionState.decode(recovering.encode()) == recovering


def test_controller_znode_and_epoch() -> None:
    c = ControllerRegistration.decode(KAFKA_CONTROLLER)
    assert c == ControllerRegistration(0, 1719917952299, -1)
    assert json.loads(c.encode()) == json.loads(KAFKA_CONTROLLER)
    old = ControllerRegistration.decode(b'{"version":1,"brokerid":4,"timestamp":"5"}')
    assert old.broker_id == 4 and old.kraft_controller_epoch == -1
    assert z.decode_controller_epoch(z.encode_controller_epoch(17)) == 17
    assert z.encode_controller_epoch(3) == b"3"


def test_cluster_id() -> None:
    assert za.decode_cluster_id(KAFKA_CLUSTER_ID) == "Sfr7YvlkRHSHrmSrwq9mug"
    assert json.loads(za.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}


def test_producer_id_block() -> None:
    b = ProducerIdBlock.decode(KAFKA_PID_BLOCK)
    assert b == ProducerIdBlock(1, 1000, 1999) and b.size == 1000
    assert json.loads(b.encode()) == json.loads(KAFKA_PID_BLOCK)
    nxt = b.next_block(broker=2)
    assert (nxt.broker, nxt.block_start, nxt.block_end) == (2, 2000, 2999)
    assert za.first_producer_id_block(3) == ProducerIdBlock(3, 0, 999)
    with pytest.raises(MalformedZnodeError):
        ProducerIdBlock.decode(b'{"version":1,"broker":1,"block_start":"9","block_end":"3"}')


def test_entity_configs_and_change_notifications() -> None:
    assert za.decode_entity_config(KAFKA_TOPIC_CONFIG) == {"retention.ms": "100000"}
    assert za.decode_entity_config(b"") == {}
    raw = za.encode_entity_config({"b": "2", "a": "1"})
    assert json.loads(raw) == {"version": 1, "config": {"a": "1", "b": "2"}}
    note = za.encode_config_change("topics/foo")
    assert json.loads(note) == {"version": 2, "entity_path": "topics/foo"}
    assert za.decode_config_change(note) == "topics/foo"
    # the names ZooKeeper gives sequential children (ten digits), and others left alone
    assert za.config_change_sequence("config_change_0000000012") == 12
    assert za.config_change_sequence("config_change_") is None
    assert za.config_change_sequence("config_change_12a") is None
    assert za.config_change_sequence("something_else_0000000001") is None


def test_admin_and_isr_notifications() -> None:
    assert za.decode_preferred_replica_election(KAFKA_ELECTION) == {("a", 0), ("b", 3)}
    assert za.decode_preferred_replica_election(
        za.encode_preferred_replica_election([("b", 3), ("a", 0)])
    ) == {("a", 0), ("b", 3)}
    assert za.decode_isr_change(za.encode_isr_change({("t", 1)})) == {("t", 1)}
    assert za.decode_reassignment(KAFKA_REASSIGN) == {("a", 1): (3, 1, 2)}
    assert za.decode_reassignment(za.encode_reassignment({("a", 1): [3, 1, 2]})) == {
        ("a", 1): (3, 1, 2)
    }


def test_paths() -> None:
    assert z.broker_path(3) == "/brokers/ids/3"
    assert z.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert z.topic_config_path("t") == "/config/topics/t"
    assert z.broker_config_path(None) == "/config/brokers/<default>"
    assert z.broker_config_path(5) == "/config/brokers/5"
    assert z.delete_topic_path("t") == "/admin/delete_topics/t"
    assert "/brokers/ids" in z.PERSISTENT_PATHS and "/config/changes" in z.PERSISTENT_PATHS


MALFORMED: list[tuple[str, bytes | None]] = [
    ("broker", None),
    ("broker", b""),
    ("broker", b"\xff\xfe"),
    ("broker", b"[1,2]"),
    ("broker", b'{"version":"5","endpoints":[]}'),
    ("broker", b'{"version":5,"endpoints":"PLAINTEXT://h:1"}'),
    ("broker", b'{"version":5,"endpoints":["nonsense"]}'),
    ("broker", b'{"version":5,"endpoints":["PLAINTEXT://h:port"]}'),
    ("broker", b'{"version":5,"endpoints":[],"rack":7}'),
    ("broker", b'{"version":0}'),
    ("topic", b'{"partitions":{"x":[1]}}'),
    ("topic", b'{"partitions":{"0":[1,"2"]}}'),
    ("topic", b'{"partitions":{"0":[true]}}'),
    ("topic", b'{"partitions":{"0":[1]},"topic_id":"short"}'),
    ("topic", b'{"partitions":[1]}'),
    ("state", b'{"leader":1,"leader_epoch":0,"controller_epoch":1}'),
    ("state", b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1.5}'),
    (
        "state",
        b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1,"leader_recovery_state":9}',
    ),
    ("controller", b'{"version":2}'),
    ("controller", b'{"brokerid":1,"timestamp":"soon"}'),
    ("epoch", b"one"),
    ("epoch", None),
    ("cluster", b'{"version":"1"}'),
    ("pid", b'{"version":1,"broker":1,"block_start":"x","block_end":"1"}'),
    ("config", b'{"version":1,"config":{"a":1}}'),
    ("change", b'{"version":1,"entity_path":"topics/a"}'),
    ("election", b'{"version":1,"partitions":[{"topic":"a"}]}'),
    ("election", b'{"version":1,"partitions":{"topic":"a"}}'),
    ("reassign", b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":"1"}]}'),
]

DECODERS = {
    "broker": lambda b: BrokerInfo.decode(1, b),
    "topic": lambda b: TopicAssignment.decode("t", b),
    "state": PartitionState.decode,
    "controller": ControllerRegistration.decode,
    "epoch": z.decode_controller_epoch,
    "cluster": za.decode_cluster_id,
    "pid": ProducerIdBlock.decode,
    "config": za.decode_entity_config,
    "change": za.decode_config_change,
    "election": za.decode_preferred_replica_election,
    "reassign": za.decode_reassignment,
}


@pytest.mark.parametrize(("kind", "raw"), MALFORMED)
def test_malformed_data_is_refused_with_a_typed_error(kind: str, raw: bytes | None) -> None:
    with pytest.raises(MalformedZnodeError):
        DECODERS[kind](raw)


@given(st.sampled_from(sorted(DECODERS)), st.binary(max_size=80))
def test_decoders_never_crash_on_garbage(kind: str, raw: bytes) -> None:
    try:
        DECODERS[kind](raw)
    except MalformedZnodeError:
        pass


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


@given(
    st.sampled_from(sorted(DECODERS)),
    st.dictionaries(
        st.sampled_from(
            [
                "version",
                "endpoints",
                "partitions",
                "isr",
                "leader",
                "leader_epoch",
                "controller_epoch",
                "brokerid",
                "id",
                "broker",
                "block_start",
                "block_end",
                "config",
                "entity_path",
                "topic_id",
                "rack",
                "features",
                "timestamp",
                "listener_security_protocol_map",
                "host",
                "port",
            ]
        ),
        json_values,
        max_size=8,
    ),
)
def test_decoders_never_crash_on_wrong_json_shapes(kind: str, obj: dict[str, object]) -> None:
    try:
        DECODERS[kind](json.dumps(obj).encode())
    except MalformedZnodeError:
        pass


ids = st.integers(min_value=0, max_value=2**31 - 1)


@given(
    st.integers(min_value=-1, max_value=1000),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.lists(ids, max_size=5),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.sampled_from([z.LEADER_RECOVERED, z.LEADER_RECOVERING]),
)
def test_partition_state_round_trip(
    leader: int, epoch: int, isr: list[int], ce: int, recovery: int
) -> None:
    s = PartitionState(leader, epoch, tuple(isr), ce, recovery)
    assert PartitionState.decode(s.encode()) == s


@given(
    st.dictionaries(st.integers(0, 500), st.lists(ids, min_size=1, max_size=4).map(tuple)),
    st.none() | st.uuids(),
)
def test_topic_round_trip(parts: dict[int, tuple[int, ...]], topic_id: uuid.UUID | None) -> None:
    a = TopicAssignment("t", parts, topic_id)
    assert TopicAssignment.decode("t", a.encode()) == a


hosts = st.sampled_from(["localhost", "10.1.2.3", "::1", "broker-1.example.com"])
names = st.sampled_from(["PLAINTEXT", "CLIENT", "REPLICATION", "INTERNAL"])


@given(
    ids,
    st.lists(
        st.builds(
            BrokerEndpoint,
            names,
            hosts,
            st.integers(1, 65535),
            st.sampled_from(["PLAINTEXT", "SSL"]),
        ),
        max_size=3,
        unique_by=lambda e: e.listener,
    ),
    st.none() | st.text(min_size=1, max_size=8),
    st.integers(0, 2**45),
)
def test_broker_round_trip(
    bid: int, endpoints: list[BrokerEndpoint], rack: str | None, ts: int
) -> None:
    info = BrokerInfo(bid, tuple(endpoints), rack, timestamp_ms=ts)
    assert BrokerInfo.decode(bid, info.encode()) == info
