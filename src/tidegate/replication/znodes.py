"""ZooKeeper paths and znode codecs, laid out exactly as a ZooKeeper-mode Kafka 3.x writes
them (Kafka's `kafka.zk.ZkData`), so a `zkCli`-literate operator recognises a Tidegate
cluster and Kafka's own tools can read it.

This module: paths, and the codecs of the znodes that make up the cluster's state
(/controller, /controller_epoch, /brokers/ids, /brokers/topics, partition states);
`znodes_admin.py` has the bookkeeping and request znodes (/cluster/id, producer id
blocks, /config, /admin, ISR change notifications).

Sans-IO: bytes in, frozen dataclasses out, and back. Every decoder either returns a value
or raises `MalformedZnodeError` (a `ValueError`): a znode written by a buggy or foreign
tool must never crash the controller or a broker, which log it once and skip it.
Encoders write compact JSON (Jackson's style) with Kafka's version numbers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.replication.znode_json import (
    MalformedZnodeError,
    dumps,
    json_int,
    json_int_list,
    json_long_string,
    json_object,
)
from tidegate.storage.files import kafka_uuid, parse_kafka_uuid

__all__ = [
    "BROKER_IDS",
    "CLUSTER_ID",
    "CONFIG_CHANGES",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "DELETE_TOPICS",
    "ISR_CHANGE_NOTIFICATION",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION",
    "PRODUCER_ID_BLOCK",
    "REASSIGN_PARTITIONS",
    "TOPICS",
    "BrokerEndpoint",
    "BrokerInfo",
    "ControllerRegistration",
    "MalformedZnodeError",
    "PartitionState",
    "TopicAssignment",
    "TopicPartition",
]

TopicPartition = tuple[str, int]

# -- paths (Kafka's ZkData objects) ---------------------------------------------------

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
# The broker-config entity every broker inherits from (Kafka's ConfigEntityName.Default).
DEFAULT_BROKER_ENTITY = "<default>"

# Persistent paths Kafka creates at broker start (ZkData.PersistentZkPaths).
PERSISTENT_PATHS: tuple[str, ...] = (
    "/consumers",
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    CONFIG_BROKERS,
    "/config/ips",
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(broker_id: int | None) -> str:
    """/config/brokers/<id>, or the cluster-wide default entity for None."""
    return f"{CONFIG_BROKERS}/{DEFAULT_BROKER_ENTITY if broker_id is None else broker_id}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


# -- /controller and /controller_epoch ------------------------------------------------


@dataclass(frozen=True)
class ControllerRegistration:
    """/controller (ephemeral): who the controller is. Version 2 adds
    `kraftControllerEpoch`, -1 for a ZooKeeper-mode controller."""

    broker_id: int
    timestamp_ms: int = 0
    kraft_controller_epoch: int = -1

    def encode(self) -> bytes:
        return dumps(
            {
                "version": 2,
                "brokerid": self.broker_id,
                "timestamp": str(self.timestamp_ms),
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ControllerRegistration:
        what = CONTROLLER
        obj = json_object(data, what)
        ts = json_long_string(obj, "timestamp", what) if "timestamp" in obj else 0
        kraft = json_int(obj, "kraftControllerEpoch", what, -1)
        return cls(json_int(obj, "brokerid", what), ts, kraft)


def encode_controller_epoch(epoch: int) -> bytes:
    """/controller_epoch: the epoch as a bare decimal string."""
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise MalformedZnodeError(f"{CONTROLLER_EPOCH}: not an integer: {data!r}") from None


# -- /brokers/ids/<id> ----------------------------------------------------------------


@dataclass(frozen=True)
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocols: Mapping[str, str], what: str) -> BrokerEndpoint:
        name, sep, rest = text.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not name or not port.isdigit():
            raise MalformedZnodeError(f"{what}: bad endpoint {text!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        protocol = protocols.get(name, name)
        return cls(name, host, int(port), protocol)


@dataclass(frozen=True)
class BrokerInfo:
    """/brokers/ids/<id> (ephemeral): a live broker's endpoints and rack (version 5).
    Top-level host/port are the first PLAINTEXT endpoint, for very old clients."""

    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    # feature name -> (min_version, max_version) this broker supports
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    version: int = 5

    def encode(self) -> bytes:
        plain = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "features": {
                name: {"min_version": lo, "max_version": hi}
                for name, (lo, hi) in sorted(self.features.items())
            },
            "listener_security_protocol_map": {
                e.listener: e.security_protocol for e in self.endpoints
            },
            "endpoints": [e.connection_string() for e in self.endpoints],
            "jmx_port": self.jmx_port,
            "port": plain.port if plain else -1,
            "host": plain.host if plain else None,
            "version": self.version,
            "timestamp": str(self.timestamp_ms),
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        return dumps(obj)

    @classmethod
    def decode(cls, broker_id: int, data: bytes | None) -> BrokerInfo:
        what = broker_path(broker_id)
        obj = json_object(data, what)
        version = json_int(obj, "version", what)
        if version < 1:
            raise MalformedZnodeError(f"{what}: unsupported registration version {version}")
        if version == 1:
            host = obj.get("host")
            if not isinstance(host, str):
                raise MalformedZnodeError(f"{what}: version 1 without a host")
            endpoints: tuple[BrokerEndpoint, ...] = (
                BrokerEndpoint("PLAINTEXT", host, json_int(obj, "port", what)),
            )
        else:
            protocols = obj.get("listener_security_protocol_map") or {}
            texts = obj.get("endpoints")
            if not isinstance(protocols, dict) or not all(
                isinstance(v, str) for v in protocols.values()
            ):
                raise MalformedZnodeError(f"{what}: bad listener_security_protocol_map")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise MalformedZnodeError(f"{what}: 'endpoints' must be a list of strings")
            endpoints = tuple(BrokerEndpoint.parse(t, protocols, what) for t in texts)
        rack = obj.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise MalformedZnodeError(f"{what}: 'rack' is not a string: {rack!r}")
        features: dict[str, tuple[int, int]] = {}
        raw_features = obj.get("features") or {}
        if not isinstance(raw_features, dict):
            raise MalformedZnodeError(f"{what}: 'features' is not an object")
        for name, rng in raw_features.items():
            if not isinstance(rng, dict):
                raise MalformedZnodeError(f"{what}: feature {name!r} is not an object")
            features[name] = (
                json_int(rng, "min_version", what),
                json_int(rng, "max_version", what),
            )
        ts = json_long_string(obj, "timestamp", what) if "timestamp" in obj else 0
        return cls(
            broker_id,
            endpoints,
            rack,
            json_int(obj, "jmx_port", what, -1),
            ts,
            features,
            version,
        )

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


# -- /brokers/topics/<topic> ---------------------------------------------------------


@dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<topic>: replica lists per partition, the topic id and an
    in-flight reassignment's adding/removing replicas (version 3)."""

    topic: str
    partitions: Mapping[int, tuple[int, ...]]
    topic_id: uuid.UUID | None = None
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def by_key(m: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(m.items()) if r}

        obj: dict[str, Any] = {
            "removing_replicas": by_key(self.removing_replicas),
            "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
        }
        if self.topic_id is not None:
            obj["topic_id"] = kafka_uuid(self.topic_id)
        obj["adding_replicas"] = by_key(self.adding_replicas)
        obj["version"] = 3
        return dumps(obj)

    @classmethod
    def decode(cls, topic: str, data: bytes | None) -> TopicAssignment:
        what = topic_path(topic)
        obj = json_object(data, what)

        def by_partition(key: str) -> dict[int, tuple[int, ...]]:
            raw = obj.get(key) or {}
            if not isinstance(raw, dict):
                raise MalformedZnodeError(f"{what}: {key!r} is not an object")
            out: dict[int, tuple[int, ...]] = {}
            for p, replicas in raw.items():
                if not (isinstance(p, str) and p.isdigit()):
                    raise MalformedZnodeError(f"{what}: partition key {p!r} is not a number")
                out[int(p)] = json_int_list(replicas, f"{what} partition {p}")
            return out

        topic_id = None
        raw_id = obj.get("topic_id")
        if raw_id is not None:
            try:
                topic_id = parse_kafka_uuid(raw_id) if isinstance(raw_id, str) else None
            except ValueError:
                topic_id = None
            if topic_id is None:
                raise MalformedZnodeError(f"{what}: bad topic_id {raw_id!r}")
        return cls(
            topic,
            by_partition("partitions"),
            topic_id,
            by_partition("adding_replicas"),
            by_partition("removing_replicas"),
        )


# -- /brokers/topics/<topic>/partitions/<p>/state --------------------------------------

LEADER_RECOVERED = 0
LEADER_RECOVERING = 1
NO_LEADER = -1


@dataclass(frozen=True)
class PartitionState:
    """A partition's leader, leader epoch and ISR, and the controller epoch that wrote
    it. Every write of it is conditional on its znode version (kept beside it by the
    reader, never inside). `leader_recovery_state` (KIP-704) is written only when not
    RECOVERED (0), as Kafka does."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERED

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != LEADER_RECOVERED:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return dumps(obj)

    @classmethod
    def decode(cls, data: bytes | None, what: str = "partition state") -> PartitionState:
        obj = json_object(data, what)
        recovery = json_int(obj, "leader_recovery_state", what, LEADER_RECOVERED)
        if recovery not in (LEADER_RECOVERED, LEADER_RECOVERING):
            raise MalformedZnodeError(f"{what}: unknown leader_recovery_state {recovery}")
        return cls(
            json_int(obj, "leader", what),
            json_int(obj, "leader_epoch", what),
            json_int_list(obj.get("isr"), f"{what} isr"),
            json_int(obj, "controller_epoch", what),
            recovery,
        )
