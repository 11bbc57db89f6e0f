"""Codecs of the bookkeeping and request znodes, in Kafka's layouts (`kafka.zk.ZkData`):
/cluster/id, /latest_producer_id_block, /config/<type>/<name> and /config/changes,
/admin/preferred_replica_election, /admin/reassign_partitions and
/isr_change_notification. Sans-IO; decoders raise only `MalformedZnodeError`.
(`/admin/delete_topics/<t>` znodes carry no data.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidegate.replication.znode_json import (
    MalformedZnodeError,
    dumps,
    json_int,
    json_int_list,
    json_long_string,
    json_object,
    json_partition_list,
)
from tidegate.replication.znodes import (
    CLUSTER_ID,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    ISR_CHANGE_NOTIFICATION,
    PREFERRED_REPLICA_ELECTION,
    PRODUCER_ID_BLOCK,
    REASSIGN_PARTITIONS,
    TopicPartition,
)

__all__ = [
    "ProducerIdBlock",
    "config_change_sequence",
    "decode_cluster_id",
    "decode_config_change",
    "decode_entity_config",
    "decode_isr_change",
    "decode_preferred_replica_election",
    "decode_reassignment",
    "encode_cluster_id",
    "encode_config_change",
    "encode_entity_config",
    "encode_isr_change",
    "encode_preferred_replica_election",
    "encode_reassignment",
    "first_producer_id_block",
]


# -- /cluster/id ------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    # Kafka writes the version as a string here, unlike everywhere else.
    return dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    obj = json_object(data, CLUSTER_ID)
    value = obj.get("id")
    if not isinstance(value, str) or not value:
        raise MalformedZnodeError(f"{CLUSTER_ID}: missing 'id'")
    return value


# -- /latest_producer_id_block -----------------------------------------------------------


@dataclass(frozen=True)
class ProducerIdBlock:
    """The last block of producer ids handed out; a broker takes the next one with a
    write conditional on this znode's version (seed 004). Bounds are inclusive and,
    as in Kafka, written as strings."""

    broker: int
    block_start: int
    block_end: int

    def __post_init__(self) -> None:
        if self.block_start < 0 or self.block_end < self.block_start:
            raise MalformedZnodeError(
                f"{PRODUCER_ID_BLOCK}: bad block [{self.block_start}, {self.block_end}]"
            )

    @property
    def size(self) -> int:
        return self.block_end - self.block_start + 1

    def next_block(self, broker: int, size: int = 1000) -> ProducerIdBlock:
        return ProducerIdBlock(broker, self.block_end + 1, self.block_end + size)

    def encode(self) -> bytes:
        return dumps(
            {
                "version": 1,
                "broker": self.broker,
                "block_start": str(self.block_start),
                "block_end": str(self.block_end),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ProducerIdBlock:
        what = PRODUCER_ID_BLOCK
        obj = json_object(data, what)
        return cls(
            json_int(obj, "broker", what),
            json_long_string(obj, "block_start", what),
            json_long_string(obj, "block_end", what),
        )


def first_producer_id_block(broker: int, size: int = 1000) -> ProducerIdBlock:
    return ProducerIdBlock(broker, 0, size - 1)


# -- /config/topics/<t>, /config/brokers/<id>, /config/changes ---------------------------


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    return dumps({"version": 1, "config": dict(sorted(config.items()))})


def decode_entity_config(data: bytes | None, what: str = "entity config") -> dict[str, str]:
    """An entity's config overrides; an empty znode means none (Kafka's reading)."""
    if not data:
        return {}
    obj = json_object(data, what)
    config = obj.get("config", {})
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise MalformedZnodeError(f"{what}: 'config' must map names to strings")
    return dict(config)


def encode_config_change(entity_path: str) -> bytes:
    """A /config/changes/config_change_<seq> notification, e.g. entity "topics/foo"."""
    return dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> str:
    obj = json_object(data, CONFIG_CHANGES)
    value = obj.get("entity_path")
    if json_int(obj, "version", CONFIG_CHANGES) != 2 or not isinstance(value, str):
        raise MalformedZnodeError(f"{CONFIG_CHANGES}: expected version 2 with entity_path")
    return value


def config_change_sequence(child: str) -> int | None:
    """The sequence number of a /config/changes child ("config_change_0000000012" ->
    12); None for a child that is not a notification (left alone, as Kafka does)."""
    if not child.startswith(CONFIG_CHANGE_PREFIX):
        return None
    digits = child[len(CONFIG_CHANGE_PREFIX):]
    return int(digits) if digits.isdigit() else None


# -- /admin/* and /isr_change_notification -----------------------------------------------


def _encode_partitions(partitions: Iterable[TopicPartition]) -> bytes:
    parts = [{"topic": t, "partition": p} for t, p in sorted(set(partitions))]
    return dumps({"version": 1, "partitions": parts})


def _decode_partitions(data: bytes | None, what: str) -> frozenset[TopicPartition]:
    obj = json_object(data, what)
    return frozenset((p["topic"], p["partition"]) for p in json_partition_list(obj, what))


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode_partitions(partitions)


def decode_preferred_replica_election(data: bytes | None) -> frozenset[TopicPartition]:
    return _decode_partitions(data, PREFERRED_REPLICA_ELECTION)


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode_partitions(partitions)


def decode_isr_change(data: bytes | None) -> frozenset[TopicPartition]:
    return _decode_partitions(data, ISR_CHANGE_NOTIFICATION)


def encode_reassignment(moves: Mapping[TopicPartition, Iterable[int]]) -> bytes:
    parts = [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(moves.items())
    ]
    return dumps({"version": 1, "partitions": parts})


def decode_reassignment(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    what = REASSIGN_PARTITIONS
    obj = json_object(data, what)
    return {
        (p["topic"], p["partition"]): json_int_list(p.get("replicas"), f"{what} replicas")
        for p in json_partition_list(obj, what)
    }
