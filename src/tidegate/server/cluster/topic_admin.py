"""Topic administration in cluster mode, Kafka's way (`AdminZkClient`): the broker that
receives CreateTopics/DeleteTopics only writes ZooKeeper, and the controller acts.

- `create_topic_in_zk`: the replica assignment (given, or Kafka's rack-aware one over
  the live brokers) in /brokers/topics/<t> with a new topic id, and the topic's config
  overrides in /config/topics/<t>, both in one transaction. The controller, watching
  /brokers/topics, then writes the partition states (leader, ISR).
- `request_topic_deletion`: /admin/delete_topics/<t>; the controller deletes the topic's
  znodes and brokers drop their replicas when they see the topic gone.
- topic configs: /config/topics/<t> and a /config/changes notification
  (server/cluster/topic_configs.py).

Errors are Kafka's, with Kafka's messages: TOPIC_ALREADY_EXISTS,
INVALID_REPLICATION_FACTOR ("Replication factor: 3 larger than available brokers: 2."),
INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Collection, Container, Mapping, Sequence

from tidegate.common.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidegate.replication.assignment import (
    assign_additional_partitions,
    assign_replicas_to_brokers,
    validate_replica_assignment,
)
from tidegate.replication.zk_ops import Create, SetData, ZkOp
from tidegate.replication.znodes import (
    BROKER_IDS,
    TOPICS,
    BrokerInfo,
    MalformedZnodeError,
    TopicAssignment,
    broker_path,
    delete_topic_path,
    topic_config_path,
    topic_path,
)
from tidegate.replication.znodes_admin import encode_entity_config
from tidegate.server.cluster.errors import NodeExistsError, NoNodeError, ZkError
from tidegate.server.cluster.topic_configs import alter_topic_config_in_zk, read_topic_config
from tidegate.server.cluster.zk import ZkClient
from tidegate.server.topic_admin import ConfigChange, FoundTopic, check_partition_increase

log = logging.getLogger(__name__)

# find_topic backs up a cache that said "no": a ZooKeeper that does not answer by then
# leaves that answer standing rather than holding the request
FIND_TIMEOUT_S = 5.0
# find_topic_ids lists /brokers/topics and reads the znodes of the topics the cache does
# not know (a few, the ones created in the last milliseconds, once the cache is in
# sync): at most this many per lookup
FIND_IDS_MAX_READS = 64
# an id found nowhere is not looked for again for this long (ids are never reused; a
# client repeating a wrong one costs one listing per interval), nor are more remembered
ID_MISS_TTL_S = 2.0
ID_MISSES_MAX = 1024

__all__ = [
    "ClusterTopicAdmin",
    "add_partitions_in_zk",
    "create_topic_in_zk",
    "live_broker_racks",
    "request_topic_deletion",
]


async def live_broker_racks(zk: ZkClient) -> dict[int, str | None]:
    """broker id -> rack (None without one) of every registered broker."""
    out: dict[int, str | None] = {}
    for child in await zk.get_children(BROKER_IDS):
        if not child.isdigit():
            continue
        try:
            data, _ = await zk.get(broker_path(int(child)))
            out[int(child)] = BrokerInfo.decode(int(child), data).rack
        except NoNodeError:
            continue  # went away meanwhile
        except MalformedZnodeError:
            out[int(child)] = None  # registered, hence alive; rack unknown
    return out


async def create_topic_in_zk(
    zk: ZkClient,
    name: str,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    assignment: Mapping[int, Sequence[int]] | None = None,
    configs: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
    validate_only: bool = False,
) -> TopicAssignment:
    """Create topic `name`: either `partitions` x `replication_factor` assigned over the
    live brokers, or an explicit `assignment` (partition -> replicas, preferred leader
    first). Returns what was (or, with `validate_only`, would be) written."""
    if await zk.exists(topic_path(name)) is not None:
        raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
    if await zk.exists(delete_topic_path(name)) is not None:
        raise TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
    brokers = await live_broker_racks(zk)
    if assignment is None:
        if partitions is None or replication_factor is None:
            raise InvalidPartitionsError("Give partitions and replication_factor, or assignment.")
        if not brokers:
            raise InvalidReplicationFactorError(
                f"Replication factor: {replication_factor} larger than available brokers: 0."
            )
        chosen = assign_replicas_to_brokers(brokers, partitions, replication_factor, rng)
    else:
        validate_replica_assignment(assignment, brokers)
        chosen = {p: list(r) for p, r in assignment.items()}
    topic = TopicAssignment(
        name, {p: tuple(r) for p, r in sorted(chosen.items())}, topic_id=uuid.uuid4()
    )
    if validate_only:
        return topic
    config_path = topic_config_path(name)
    # A config znode may be left over from an older topic of the same name: overwrite it.
    stale = await zk.exists(config_path)
    config_data = encode_entity_config(configs or {})
    ops: list[ZkOp] = [
        Create(config_path, config_data)
        if stale is None
        else SetData(config_path, config_data, stale.version),
        Create(topic_path(name), topic.encode()),
    ]
    try:
        await zk.transaction(ops)
    except NodeExistsError as e:
        if e.path == topic_path(name):
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.") from None
        raise TopicAlreadyExistsError(f"Topic '{name}' is being created.") from None
    return topic


async def request_topic_deletion(zk: ZkClient, name: str) -> None:
    """Ask the controller to delete topic `name` (idempotent while it is pending)."""
    if await zk.exists(topic_path(name)) is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    try:
        await zk.create(delete_topic_path(name), makepath=True)
    except NodeExistsError:
        pass  # already marked for deletion


async def add_partitions_in_zk(
    zk: ZkClient, name: str, total: int,
    assignment: Sequence[Sequence[int]] | None = None, *, validate_only: bool = False,
) -> int:
    """CreatePartitions: extend /brokers/topics/<t> (conditional on its version); the
    controller, watching the topic znode, writes the new partitions' states. The count
    to grow from is the znode's, not a broker's metadata cache (which may not have seen
    a topic created through another broker moments ago). Returns that count."""
    try:
        data, stat = await zk.get(topic_path(name))
    except NoNodeError:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.") from None
    current = TopicAssignment.decode(name, data)
    have = len(current.partitions)
    check_partition_increase(name, have, total, assignment)
    brokers = await live_broker_racks(zk)
    if assignment:
        extra = {have + i: list(r) for i, r in enumerate(assignment)}
        validate_replica_assignment(extra, brokers, first_partition=have)
    else:
        extra = assign_additional_partitions(brokers, current.partitions, total)
    merged = {**{p: tuple(r) for p, r in current.partitions.items()},
              **{p: tuple(r) for p, r in extra.items()}}
    new = TopicAssignment(name, merged, topic_id=current.topic_id,
                          adding_replicas=current.adding_replicas,
                          removing_replicas=current.removing_replicas)
    if not validate_only:
        await zk.transaction([SetData(topic_path(name), new.encode(), stat.version)])
    return have


class ClusterTopicAdmin:
    """The `TopicAdmin` port (server/topic_admin.py) of a cluster: ZooKeeper writes."""

    def __init__(self, zk: ZkClient, default_replication_factor: int,
                 cached: Container[str] = ()) -> None:
        self.zk = zk
        self.default_replication_factor = default_replication_factor
        self.cached = cached  # the topics the metadata cache has: their ids are known
        self._misses: dict[uuid.UUID, float] = {}  # id -> not looked for until then

    def check_replication(self, factor: int, assignments: Sequence[Sequence[int]]) -> None:
        if factor == 0 or factor < -1:
            raise InvalidReplicationFactorError(
                f"Replication factor must be larger than 0, or -1 to use the default, "
                f"got {factor}.")

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int,
        assignment: Mapping[int, Sequence[int]] | None, configs: Mapping[str, str], *,
        validate_only: bool,
    ) -> tuple[uuid.UUID, int]:
        factor = (self.default_replication_factor if replication_factor == -1
                  else replication_factor)
        topic = await create_topic_in_zk(
            self.zk, name,
            partitions=None if assignment else partitions,
            replication_factor=None if assignment else factor,
            assignment=assignment, configs=configs, validate_only=validate_only)
        first = topic.partitions.get(0, ())
        assert topic.topic_id is not None
        return topic.topic_id, len(first) or factor

    async def delete_topic(self, name: str) -> None:
        await request_topic_deletion(self.zk, name)

    async def create_partitions(
        self, name: str, total: int, assignment: Sequence[Sequence[int]] | None, *,
        validate_only: bool,
    ) -> int:
        return await add_partitions_in_zk(self.zk, name, total, assignment,
                                          validate_only=validate_only)

    async def find_topic(self, name: str) -> FoundTopic | None:
        """The topic's znode (the metadata cache follows it through a watch); None if
        ZooKeeper cannot be read within FIND_TIMEOUT_S."""
        try:
            async with asyncio.timeout(FIND_TIMEOUT_S):
                data, _ = await self.zk.get(topic_path(name))
            topic = TopicAssignment.decode(name, data)
        except (NoNodeError, MalformedZnodeError):
            return None  # a malformed znode: as the metadata cache sees it
        except (ZkError, TimeoutError) as e:
            log.warning("could not read topic %s from ZooKeeper: %s", name, e or "timed out")
            return None
        if topic.topic_id is None:
            return None  # the cache does not show a topic without an id either
        return FoundTopic(topic.topic_id, len(topic.partitions),
                          tuple(tuple(topic.partitions[p]) for p in sorted(topic.partitions)))

    async def find_topic_ids(self, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Ids the metadata cache lacks, looked for among the topic znodes of the topics
        it does not know (a topic created through another broker moments ago): one
        listing of /brokers/topics and up to FIND_IDS_MAX_READS znode reads side by side,
        within FIND_TIMEOUT_S (else nothing is found). An id found nowhere is not looked
        for again for ID_MISS_TTL_S. A topic deleted and recreated under a name the
        cache still holds with the old id is not found until the cache has it."""
        now = time.monotonic()
        wanted = {i for i in ids if self._misses.get(i, 0.0) <= now}
        if not wanted:
            return {}
        try:
            async with asyncio.timeout(FIND_TIMEOUT_S):
                names = [n for n in await self.zk.get_children(TOPICS) if n not in self.cached]
                if len(names) > FIND_IDS_MAX_READS:
                    log.info("looking up topic ids: %d topics not in the metadata cache; "
                             "reading %d", len(names), FIND_IDS_MAX_READS)
                    names = names[:FIND_IDS_MAX_READS]
                found = await asyncio.gather(*map(self._topic_id, names))
        except (ZkError, TimeoutError) as e:
            log.warning("could not look up topic ids in ZooKeeper: %s", e or "timed out")
            return {}
        out = {i: name for name, i in zip(names, found, strict=True) if i in wanted}
        if len(self._misses) >= ID_MISSES_MAX:
            self._misses = {i: t for i, t in self._misses.items() if t > now}
        if len(self._misses) < ID_MISSES_MAX:
            self._misses.update(dict.fromkeys(wanted - out.keys(), now + ID_MISS_TTL_S))
        return out

    async def _topic_id(self, name: str) -> uuid.UUID | None:
        try:
            data, _ = await self.zk.get(topic_path(name))
            return TopicAssignment.decode(name, data).topic_id
        except (NoNodeError, MalformedZnodeError):
            return None  # deleted meanwhile; malformed: as the metadata cache sees it

    async def topic_config(self, name: str) -> dict[str, str]:
        return await read_topic_config(self.zk, name)

    async def alter_topic_config(
        self, name: str, change: ConfigChange, *, validate_only: bool
    ) -> dict[str, str]:
        return await alter_topic_config_in_zk(self.zk, name, change, validate_only=validate_only)
