"""Topic administration: creating, deleting and growing topics, wherever topics live.

Handlers (CreateTopics, DeleteTopics, CreatePartitions, Metadata's auto-creation) call
the `TopicAdmin` port; they never touch the `LogManager` or ZooKeeper themselves.

- `EmbeddedTopicAdmin` (here): the local topics file is the truth; a topic exists, with
  every partition led here, as soon as the call returns. Replication factor 1 only.
- the cluster implementation (`server/cluster/topic_admin.py`): writes Kafka's
  `/brokers/topics/<t>` and `/config/topics/<t>` znodes (or `/admin/delete_topics/<t>`)
  and returns; the controller then elects leaders and the brokers open their replicas
  (CreateTopics and CreatePartitions with a timeout wait for the leaders in the
  handler, handlers/admin.py, as Kafka's broker does).

`find_topic` (by name) and `find_topic_ids` (by id) read the same truth the writes go
to. A cluster broker's metadata cache follows ZooKeeper a few milliseconds late, and
clients use a topic through any broker right after creating it through one: handlers
whose answer is only "does the topic (or partition) exist" ask the port when their cache
says no (handlers/common.py's `partition_counts` and `topic_names`), handlers that
describe a topic (Metadata, DescribeTopicPartitions) ask it too and then wait for their
cache (handlers/new_topics.py), and CreatePartitions counts the partitions it extends
from the znode it rewrites, as Kafka's ZooKeeper-mode broker does.

Topic config overrides (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs on a
topic) go through the same port: embedded, the local topics file; in a cluster,
`/config/topics/<t>` plus a `/config/changes` notification every broker applies
(`server/cluster/topic_configs.py`), so any broker describes the same configs.

Validation every implementation shares (names, partition counts, configs) stays in the
handlers; each implementation checks what only it knows (live brokers, replication).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from tidegate.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

Assignment = Mapping[int, Sequence[int]]  # partition -> replicas, preferred leader first
# A topic's current overrides -> its new ones (validating them; raises a KafkaError).
ConfigChange = Callable[[dict[str, str]], dict[str, str]]


class FoundTopic(NamedTuple):
    """A topic as its source of truth has it."""

    topic_id: uuid.UUID
    partitions: int
    # each partition's replicas, by index, where the truth says (a cluster's znode)
    replicas: tuple[tuple[int, ...], ...] = ()


class TopicAdmin(Protocol):
    def check_replication(self, factor: int, assignments: Sequence[Sequence[int]]) -> None:
        """What can be refused before anything else (INVALID_REPLICATION_FACTOR,
        INVALID_REPLICA_ASSIGNMENT naming unknown brokers)."""
        ...

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int,
        assignment: Assignment | None, configs: Mapping[str, str], *, validate_only: bool,
    ) -> tuple[uuid.UUID, int]:
        """Create (or only validate) a topic; returns its id and replication factor."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(
        self, name: str, total: int, assignment: Sequence[Sequence[int]] | None, *,
        validate_only: bool,
    ) -> int:
        """Grow topic `name` to `total` partitions (UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT as `check_partition_increase`);
        returns how many it had."""
        ...

    async def find_topic(self, name: str) -> FoundTopic | None:
        """Topic `name` at the source of truth, not a cache (None: no such topic)."""
        ...

    async def find_topic_ids(self, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The names of the topics with these ids at the source of truth, for the ids a
        cache lacks (an id no topic has is left out)."""
        ...

    async def topic_config(self, name: str) -> dict[str, str]:
        """The topic's config overrides (UNKNOWN_TOPIC_OR_PARTITION if there is no such
        topic)."""
        ...

    async def alter_topic_config(
        self, name: str, change: ConfigChange, *, validate_only: bool
    ) -> dict[str, str]:
        """Replace the topic's overrides with `change(current)`, atomically with respect
        to concurrent alters; returns the new overrides (not stored if `validate_only`)."""
        ...


def invalid_assignment(message: str) -> KafkaError:
    return KafkaError(message, code=ErrorCode.invalid_replica_assignment)


def check_assignment_shape(assignments: Sequence[Sequence[int]]) -> None:
    """Kafka's checks of an explicit assignment that need no broker list."""
    for ids in assignments:
        if not ids:
            raise invalid_assignment("a partition's replica assignment is empty")
        if len(set(ids)) != len(ids):
            raise invalid_assignment(f"duplicate brokers in replica assignment {list(ids)}")


def check_partition_increase(
    name: str, have: int, total: int, assignments: Sequence[Sequence[int]] | None
) -> None:
    """CreatePartitions' checks once the current count is known (Kafka's order)."""
    if total <= have:
        raise InvalidPartitionsError(
            f"topic {name} has {have} partitions; the new count must be larger, got {total}")
    if assignments and len(assignments) != total - have:
        raise invalid_assignment(
            f"Increasing the number of partitions by {total - have} "
            f"but {len(assignments)} assignments provided.")
    check_assignment_shape(assignments or ())


class EmbeddedTopicAdmin:
    """Topics of the single embedded broker (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def check_replication(self, factor: int, assignments: Sequence[Sequence[int]]) -> None:
        """A replication factor this one node can hold, and assignments naming only it.

        As in Kafka, an assignment naming an unknown broker, naming one twice, or naming
        none is INVALID_REPLICA_ASSIGNMENT; too large a factor is INVALID_REPLICATION_FACTOR.
        """
        if factor not in (-1, 1):
            raise InvalidReplicationFactorError(
                f"replication factor {factor} is larger than the 1 available broker"
            )
        check_assignment_shape(assignments)
        node = self.broker.node_id
        for ids in assignments:
            unknown = sorted(set(ids) - {node})
            if unknown:
                raise invalid_assignment(
                    f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))} "
                    f"(the only broker is {node})"
                )

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int,
        assignment: Assignment | None, configs: Mapping[str, str], *, validate_only: bool,
    ) -> tuple[uuid.UUID, int]:
        if validate_only:
            self.broker.logs.validate_new_topic(name, partitions, configs)
            return uuid.UUID(int=0), 1
        return self.broker.create_topic(name, partitions, dict(configs)), 1

    async def delete_topic(self, name: str) -> None:
        self.broker.delete_topic(name)

    async def create_partitions(
        self, name: str, total: int, assignment: Sequence[Sequence[int]] | None, *,
        validate_only: bool,
    ) -> int:
        found = await self.find_topic(name)
        if found is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        check_partition_increase(name, found.partitions, total, assignment)
        self.check_replication(1, assignment or ())
        self.broker.logs.create_partitions(name, total, validate_only=validate_only)
        return found.partitions

    async def find_topic(self, name: str) -> FoundTopic | None:
        meta = self.broker.logs.topics.get(name)
        return None if meta is None else FoundTopic(meta.topic_id, meta.partitions)

    async def find_topic_ids(self, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
        logs = self.broker.logs
        return {i: meta.name for i in ids if (meta := logs.topic_by_id(i)) is not None}

    async def topic_config(self, name: str) -> dict[str, str]:
        meta = self.broker.logs.topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return dict(meta.configs)

    async def alter_topic_config(
        self, name: str, change: ConfigChange, *, validate_only: bool
    ) -> dict[str, str]:
        # topic_config never suspends: nothing alters the topic between read and write
        new = change(await self.topic_config(name))
        self.broker.logs.alter_topic_configs(name, new, incremental=False,
                                             validate_only=validate_only)
        return new
