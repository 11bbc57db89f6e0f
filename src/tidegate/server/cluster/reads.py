"""Reading the cluster's znodes into values, for the controller and (later) the brokers'
metadata cache: live brokers, topic assignments, partition states, topic configs.

Each read may arm a watch (the caller's `Watch`) and never raises on bad data: a znode
that does not decode is logged once (per znode version) and read as "absent", except a
broker registration, which still means "alive" (its endpoints unknown). NoNode is
"absent" too: znodes come and go between listing and reading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

from tidegate.replication.controller_logic import VersionedState
from tidegate.replication.znodes import (
    BROKER_IDS,
    BrokerInfo,
    MalformedZnodeError,
    PartitionState,
    TopicAssignment,
    TopicPartition,
    broker_path,
    partition_state_path,
    topic_config_path,
    topic_path,
)
from tidegate.replication.znodes_admin import decode_entity_config
from tidegate.server.cluster.errors import NoNodeError
from tidegate.server.cluster.zk import Watch, ZkClient

__all__ = ["ClusterReader"]

log = logging.getLogger(__name__)


class ClusterReader:
    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self._said: set[Hashable] = set()

    def say_once(self, key: Hashable, msg: str, *args: object) -> None:
        """Log a warning the first time `key` is seen (bad data is logged once)."""
        if key not in self._said:
            self._said.add(key)
            log.warning(msg, *args)

    async def brokers(
        self, watch: Watch | None = None
    ) -> tuple[dict[int, BrokerInfo], dict[int, int]]:
        """Registered brokers and their broker epochs (registration czxid); `watch` is
        armed on /brokers/ids' children."""
        children = await self.zk.get_children(BROKER_IDS, watch)
        ids = [int(c) for c in children if c.isdigit()]
        infos: dict[int, BrokerInfo] = {}
        epochs: dict[int, int] = {}
        for bid, got in zip(ids, await asyncio.gather(*(self.broker(b) for b in ids))):
            if got is not None:
                infos[bid], epochs[bid] = got
        return infos, epochs

    async def broker(self, broker_id: int) -> tuple[BrokerInfo, int] | None:
        try:
            data, stat = await self.zk.get(broker_path(broker_id))
        except NoNodeError:
            return None
        try:
            info = BrokerInfo.decode(broker_id, data)
        except MalformedZnodeError as e:
            self.say_once(("broker-znode", broker_id, stat.czxid), "%s", e)
            info = BrokerInfo(broker_id, ())  # registered, so alive, even if unreadable
        return info, stat.czxid

    async def topic(self, name: str, watch: Watch | None = None) -> TopicAssignment | None:
        try:
            data, stat = await self.zk.get(topic_path(name), watch)
        except NoNodeError:
            return None
        try:
            return TopicAssignment.decode(name, data)
        except MalformedZnodeError as e:
            self.say_once(("topic-znode", name, stat.mzxid), "%s; ignoring the topic", e)
            return None

    async def state(self, tp: TopicPartition, watch: Watch | None = None) -> VersionedState | None:
        path = partition_state_path(*tp)
        try:
            data, stat = await self.zk.get(path, watch)
        except NoNodeError:
            return None
        try:
            return VersionedState(PartitionState.decode(data, path), stat.version)
        except MalformedZnodeError as e:
            self.say_once(("state-znode", tp, stat.mzxid), "%s; leaving it alone", e)
            return None

    async def states(self, tps: list[TopicPartition]) -> dict[TopicPartition, VersionedState]:
        got = await asyncio.gather(*(self.state(tp) for tp in tps))
        return {tp: vs for tp, vs in zip(tps, got) if vs is not None}

    async def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's config overrides (/config/topics/<t>); {} if none or unreadable."""
        path = topic_config_path(topic)
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return {}
        try:
            return decode_entity_config(data, path)
        except MalformedZnodeError as e:
            self.say_once(("config-znode", topic, stat.mzxid), "%s; using defaults", e)
            return {}

    async def tree(self, root: str) -> list[str]:
        """Every znode under and including `root` (empty if absent)."""
        try:
            children = await self.zk.get_children(root)
        except NoNodeError:
            return []
        out = [root]
        for sub in await asyncio.gather(*(self.tree(f"{root}/{c}") for c in children)):
            out.extend(sub)
        return out
