"""Describing a topic the metadata view has not seen yet: cluster mode's catch-up.

A cluster broker's metadata view follows ZooKeeper a few milliseconds late (the
watcher reads the topic znode, then the partition states the controller writes), and
clients describe a topic through any broker right after creating it through another:
the Java admin's `describeTopics` by id gives up on UNKNOWN_TOPIC_ID, and Metadata with
auto-creation would try to create the topic again. Metadata and DescribeTopicPartitions
therefore hand the names their view lacks, or has without any partition state yet
(`unsettled`), to `catch_up`, the principal being authorized for them (the caller checks
first, so refused topics cost ZooKeeper nothing):

- names not known to exist are looked up at the topic admin's truth (the topic znode),
  side by side, at most FIND_NAMES_MAX per request; ids were already resolved to names
  by `handlers/common.topic_names` (`TopicAdmin.find_topic_ids`: bounded, misses
  remembered);
- for the topics found, it waits up to CATCH_UP_S for the view to show them with the
  state of every partition (a leader, unless none of its replicas is alive), so the
  answer is the full one (leaders, ISR, replicas) every broker gives a moment later;
  it looks again each time the view changes (`ChangingView.changed`: the metadata
  watcher wakes it), not on a timer;
- a partition still without a state then is answered as the view has it
  (LEADER_NOT_AVAILABLE, which clients retry); a topic the view still lacks, from the
  znode with no leader anywhere: never a leader the view has not seen.

Name misses are not remembered: a remembered miss would answer "no such topic" for a
name created through another broker since (the very case handled here), and a miss
costs one small read, only for names the principal may describe. Embedded (no
`zookeeper.connect`), the view is the truth and `catch_up` returns at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from tidegate.server.broker import Broker
from tidegate.server.metadata_view import PartitionView, TopicView, next_change
from tidegate.server.topic_admin import FoundTopic

log = logging.getLogger(__name__)

# how long a request waits for the view to show a topic ZooKeeper has, with leaders
CATCH_UP_S = 1.0
# how often a view that cannot say when it changed is looked at (the cluster view can)
CATCH_UP_POLL_S = 0.01
# names one request looks up at most (the others: the view's answer)
FIND_NAMES_MAX = 64


def _stateless(tv: TopicView) -> bool:
    """A partition whose state the view has not read yet: no leader at leader epoch -1
    (the controller has not elected one; a partition gone offline keeps its epoch, and
    is answered as it is)."""
    return any(p.leader < 0 and p.leader_epoch < 0 for p in tv.partitions)


def _settled(tv: TopicView | None) -> bool:
    return tv is not None and not _stateless(tv)


def unsettled(broker: Broker, tv: TopicView) -> bool:
    """Whether a handler should hand a topic its view has to `catch_up` all the same: in
    a cluster, one with a partition whose state the view has not read yet."""
    return broker.replicas.cluster and _stateless(tv)


def leaderless_view(name: str, found: FoundTopic) -> TopicView:
    """The topic as its znode has it, no partition led yet: what the view shows for a
    partition whose state it has not read (`ClusterMetadata.topic`)."""
    parts = []
    for p in range(found.partitions):
        replicas = found.replicas[p] if p < len(found.replicas) else ()
        parts.append(PartitionView(p, -1, -1, replicas, (), replicas))
    return TopicView(name, found.topic_id, tuple(parts))


async def catch_up(broker: Broker, names: Collection[str],
                   known: Collection[str] = ()) -> dict[str, TopicView]:
    """Views of the topics `names` (and `known`: names the truth is known to have, found
    by id) that the metadata view lacked; names no topic has are left out. See the
    module docstring."""
    if not broker.replicas.cluster or not (names or known):
        return {}
    md, admin = broker.metadata, broker.topic_admin
    ask = [n for n in dict.fromkeys(names) if n not in known and md.topic(n) is None]
    if len(ask) > FIND_NAMES_MAX:
        log.info("describing %d topics this broker has not seen: looking up %d",
                 len(ask), FIND_NAMES_MAX)
        ask = ask[:FIND_NAMES_MAX]
    found: dict[str, FoundTopic | None] = dict.fromkeys(known)
    found.update({n: f for n, f in zip(ask, await asyncio.gather(*map(admin.find_topic, ask)),
                                       strict=True) if f is not None})
    found.update({n: None for n in names if n not in found and md.topic(n) is not None})
    if not found:
        return {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CATCH_UP_S
    while not all(_settled(md.topic(n)) for n in found) and (
            left := deadline - loop.time()) > 0:
        await next_change(md, left, CATCH_UP_POLL_S)
    out = {n: tv for n in found if (tv := md.topic(n)) is not None}
    unread = [n for n in found if n not in out and found[n] is None]
    for n, f in zip(unread, await asyncio.gather(*map(admin.find_topic, unread)), strict=True):
        found[n] = f
    out.update({n: leaderless_view(n, f) for n, f in found.items()
                if n not in out and f is not None})
    return out
