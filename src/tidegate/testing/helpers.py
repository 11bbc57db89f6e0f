"""Test helpers over Tidegate's own client: create topics, read a topic back.

They take a bootstrap string, so they work against any Kafka-compatible broker, and are
what `EmbeddedBroker.create_topic`/`read_topic` and the pytest fixtures call.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from tidegate.client import Admin, Consumer, NewTopic
from tidegate.client.types import ConsumerRecord, TopicPartition

__all__ = ["create_topics", "read_topic"]


def create_topics(bootstrap_servers: str, names: Iterable[str], *,
                  partitions: int | None = None,
                  config: Mapping[str, object] | None = None) -> None:
    """Create each topic (an error, TOPIC_ALREADY_EXISTS included, is raised). `partitions`
    None takes the broker's `num.partitions` (CreateTopics' -1)."""
    configs = {k: str(v).lower() if isinstance(v, bool) else str(v)
               for k, v in (config or {}).items()}
    with Admin({"bootstrap.servers": bootstrap_servers}) as admin:
        count = -1 if partitions is None else partitions  # -1: the broker's num.partitions
        results = admin.create_topics(
            [NewTopic(name, count, 1, dict(configs)) for name in names])
    for error in results.values():
        if error is not None:
            raise error
    # Metadata of a new topic is served at once by one broker; nothing to wait for.


def read_topic(bootstrap_servers: str, topic: str, *,
               isolation_level: str = "read_committed",
               timeout: float = 10.0) -> list[ConsumerRecord]:
    """Every record of `topic` from the start up to its end now, in partition then
    offset order. With read_committed (the default) the end is the last stable offset:
    records of open transactions are waited for, aborted ones never show.

    Raises TimeoutError when the end is not reached within `timeout` seconds (an open
    transaction that never finishes, for instance)."""
    config = {"bootstrap.servers": bootstrap_servers, "isolation.level": isolation_level,
              "enable.auto.commit": False}
    deadline = time.monotonic() + timeout
    with Consumer(config) as consumer:
        parts = [TopicPartition(topic, p)
                 for p in consumer.partitions_for_topic(topic, int(timeout * 1000))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out: list[ConsumerRecord] = []
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                behind = {f"{tp.topic}-{tp.partition}": (consumer.position(tp), end)
                          for tp, end in ends.items() if consumer.position(tp) < end}
                raise TimeoutError(f"read_topic({topic!r}): not at the end after {timeout} s "
                                   f"(position, end): {behind}")
            out.extend(r for r in consumer.poll(timeout=min(left, 0.5))
                       if r.offset < ends[TopicPartition(r.topic, r.partition)])
    out.sort(key=lambda r: (r.partition, r.offset))
    return out
