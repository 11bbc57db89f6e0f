"""A fake of the topic admin's truth for handler tests of cluster mode's topic lookups.

`TopicTruth` answers the `TopicAdmin` port (server/topic_admin.py) the way ZooKeeper's
topic znodes would (test_topic_catch_up.py, test_topic_lookup_order.py): topics by name
with their partition counts, topic ids by id. Every lookup and write is recorded, each
takes `delay` s, and `most_in_flight` says how many ran side by side. `Denying` is an
authorizer that refuses the topics it is given.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tidegate.common.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from tidegate.server.topic_admin import FoundTopic, check_partition_increase


class TopicTruth:
    """`topics`: name -> partition count; `ids`: topic id -> name (what `find_topic_ids`
    finds; a name without one has an id made from the name); `replicas`: each
    partition's replicas as `find_topic` reports them."""

    def __init__(self, topics: dict[str, int] | None = None,
                 ids: dict[uuid.UUID, str] | None = None, *,
                 replicas: tuple[tuple[int, ...], ...] = (), delay: float = 0.05) -> None:
        self.topics, self.ids = dict(topics or {}), dict(ids or {})
        self.replicas, self.delay = replicas, delay
        self.asked: list[str] = []
        self.asked_ids: list[set[uuid.UUID]] = []
        self.written: list[str] = []
        self.created: list[str] = []
        self.in_flight = self.most_in_flight = 0

    @classmethod
    def with_ids(cls, topics: dict[str, uuid.UUID], replicas: tuple[tuple[int, ...], ...],
                 delay: float = 0.05) -> TopicTruth:
        """Topics named with their ids, one partition per entry of `replicas`."""
        return cls(dict.fromkeys(topics, len(replicas)), {i: n for n, i in topics.items()},
                   replicas=replicas, delay=delay)

    def topic_id(self, name: str) -> uuid.UUID:
        return next((i for i, n in self.ids.items() if n == name),
                    uuid.uuid5(uuid.NAMESPACE_URL, name))

    async def _round_trip(self) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1

    async def find_topic(self, name: str) -> FoundTopic | None:
        self.asked.append(name)
        await self._round_trip()
        n = self.topics.get(name)
        return None if n is None else FoundTopic(self.topic_id(name), n, self.replicas)

    async def find_topic_ids(self, ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        self.asked_ids.append(set(ids))
        return {i: self.ids[i] for i in ids if i in self.ids}

    async def create_topic(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.created.append(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")

    async def delete_topic(self, name: str) -> None:
        self.written.append(name)
        await self._round_trip()
        self.topics.pop(name, None)

    async def create_partitions(self, name: str, total: int, assignment: Any, *,
                                validate_only: bool) -> int:
        self.written.append(name)
        await self._round_trip()
        had = self.topics.get(name)
        if had is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        check_partition_increase(name, had, total, assignment)
        self.topics[name] = total
        return had


class Denying:
    """An authorizer allowing everything but the topics in `denied`."""

    def __init__(self, denied: set[str]) -> None:
        self.denied = denied

    def authorize(self, principal: str, host: str, op: Any, rtype: Any, name: str) -> bool:
        return not (int(rtype) == 2 and name in self.denied)  # 2: TOPIC

    def authorized_operations(self, *args: Any) -> int:
        return 0
