"""The cluster metadata cache: ZooKeeper's view of brokers, topics and leaders.

`ClusterMetadata` is the `MetadataView` (server/metadata_view.py) handlers read in
cluster mode. `MetadataWatcher` keeps it current: it watches /controller,
/brokers/ids, /brokers/topics, every topic znode and every partition state znode, and
re-reads what a watch says changed (watches are one-shot and coalesce: an event only
means "re-read X"). After each pass it hands the partitions whose assignment or state
changed to `on_partitions`, which makes this broker lead, follow or drop its replicas
(server/cluster/node.py).

Every broker watches every partition's state, so any broker answers Metadata for the
whole cluster, as Kafka's brokers do from their UpdateMetadata cache. The cost is one
watch per partition per broker: fine for the clusters Tidegate targets (thousands of
partitions), the known limit of Kafka's ZooKeeper mode too.

A state znode is the truth for leadership: leader, leader epoch, ISR and the znode
version; a broker acts on a state only if its leader epoch is not older than the one it
acted on (a stale read after a newer one is ignored).

Requests that wait for the view to show something (handlers/new_topics.py: a topic
created through another broker) await `changed()`, a future set by the next update. The
watcher applies every update on the event loop thread (its task reads ZooKeeper through
the asyncio bridge; kazoo's threads only post events to the loop, server/cluster/zk.py),
so the future is set there, with no thread hop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable, Sequence

from tidegate.replication.controller_logic import VersionedState
from tidegate.replication.znodes import (
    CONTROLLER,
    TOPICS,
    BrokerInfo,
    ControllerRegistration,
    MalformedZnodeError,
    TopicAssignment,
    TopicPartition,
    partition_state_path,
)
from tidegate.server.cluster.config_changes import RESYNC, WatchLoop
from tidegate.server.cluster.reads import ClusterReader
from tidegate.server.cluster.zk import SessionEvent, SessionState, Watch, WatchEvent, ZkClient
from tidegate.server.metadata_view import BrokerEndpoint, PartitionView, TopicView

__all__ = ["ClusterMetadata", "MetadataWatcher", "PartitionChange"]

log = logging.getLogger(__name__)


class PartitionChange:
    """What a hosted (or formerly hosted) partition looks like now."""

    __slots__ = ("assignment", "state", "topic_id", "tp")

    def __init__(self, tp: TopicPartition, topic_id: uuid.UUID | None,
                 assignment: tuple[int, ...], state: VersionedState | None) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.assignment = assignment  # () when the topic or partition is gone
        self.state = state

    def __repr__(self) -> str:
        return f"PartitionChange({self.tp}, {self.assignment}, {self.state})"


class ClusterMetadata:
    """A MetadataView over the latest ZooKeeper reads (see the module docstring)."""

    def __init__(self, node_id: int, listener: str, cluster_id: str) -> None:
        self.node_id = node_id
        self.listener = listener  # whose endpoints clients get (the one they came in on)
        self._cluster_id = cluster_id
        self._controller_id = -1
        self.brokers_info: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicAssignment] = {}  # written through set_topic only
        self._names: dict[uuid.UUID, str] = {}  # topic id -> name, as `topics` has them
        self.states: dict[TopicPartition, VersionedState] = {}
        self._views: dict[str, TopicView] = {}
        self._change: asyncio.Future[None] | None = None  # set by the next update

    # -- MetadataView -------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._controller_id

    def brokers(self) -> Sequence[BrokerEndpoint]:
        out = []
        for bid in sorted(self.brokers_info):
            ep = self._endpoint(self.brokers_info[bid])
            if ep is not None:
                out.append(ep)
        return out

    def brokers_on(self, listener: str) -> Sequence[BrokerEndpoint]:
        """Each live broker's endpoint on `listener`, the one the client came in on; as
        in Kafka, a broker without that listener is left out (its other endpoints speak
        another security protocol)."""
        out = []
        for bid in sorted(self.brokers_info):
            info = self.brokers_info[bid]
            ep = info.endpoint(listener)
            if ep is not None:
                out.append(BrokerEndpoint(bid, ep.host, ep.port, info.rack))
        return out

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        info = self.brokers_info.get(node_id)
        return None if info is None else self._endpoint(info)

    def _endpoint(self, info: BrokerInfo) -> BrokerEndpoint | None:
        ep = info.endpoint(self.listener) or (info.endpoints[0] if info.endpoints else None)
        if ep is None:
            return None
        return BrokerEndpoint(info.broker_id, ep.host, ep.port, info.rack)

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def topic(self, name: str) -> TopicView | None:
        cached = self._views.get(name)
        if cached is not None:
            return cached
        assignment = self.topics.get(name)
        if assignment is None or assignment.topic_id is None:
            return None
        live = set(self.brokers_info)
        parts = []
        for p in sorted(assignment.partitions):
            replicas = assignment.partitions[p]
            vs = self.states.get((name, p))
            if vs is None:  # the controller has not written it yet
                parts.append(PartitionView(p, -1, -1, replicas, (), replicas))
                continue
            st = vs.state
            leader = st.leader if st.leader in live else -1
            offline = tuple(r for r in replicas if r not in live)
            parts.append(PartitionView(p, leader, st.leader_epoch, replicas, st.isr, offline))
        view = TopicView(name, assignment.topic_id, tuple(parts))
        self._views[name] = view
        return view

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None:
        name = self._names.get(topic_id)
        return None if name is None else self.topic(name)

    # -- waiting for updates -------------------------------------------------------------

    def changed(self) -> asyncio.Future[None]:
        """A future done at the next update (brokers, a topic, a partition state), shared
        by every waiter: wait on it with `asyncio.wait` (which does not cancel it), not
        `wait_for`. Call on the event loop."""
        if self._change is None or self._change.done():
            self._change = asyncio.get_running_loop().create_future()
        return self._change

    def _wake(self) -> None:
        change, self._change = self._change, None
        if change is not None and not change.done():
            change.set_result(None)

    # -- updates (MetadataWatcher, on the event loop) ------------------------------------

    def set_controller(self, controller_id: int) -> None:
        self._controller_id = controller_id

    def set_brokers(self, infos: dict[int, BrokerInfo]) -> None:
        self.brokers_info = infos
        self._views.clear()  # leaders and offline replicas depend on who is alive
        self._wake()

    def set_topic(self, name: str, assignment: TopicAssignment | None) -> None:
        old = self.topics.get(name)
        if old is not None and old.topic_id is not None:
            self._names.pop(old.topic_id, None)
        if assignment is None:
            self.topics.pop(name, None)
            for tp in [tp for tp in self.states if tp[0] == name]:
                del self.states[tp]
        else:
            self.topics[name] = assignment
            if assignment.topic_id is not None:
                self._names[assignment.topic_id] = name
        self._views.pop(name, None)
        self._wake()

    def set_state(self, tp: TopicPartition, vs: VersionedState | None) -> bool:
        """Record a partition state; False if it is older than the one we have."""
        old = self.states.get(tp)
        if vs is None:
            self.states.pop(tp, None)
        elif old is not None and vs.zk_version < old.zk_version:
            return False
        else:
            self.states[tp] = vs
        self._views.pop(tp[0], None)
        self._wake()
        return True


class MetadataWatcher(WatchLoop):
    """Keeps a `ClusterMetadata` current from ZooKeeper watches (one task)."""

    what = "metadata"
    task_name = "metadata-watcher"

    def __init__(
        self,
        zk: ZkClient,
        metadata: ClusterMetadata,
        on_partitions: Callable[[list[PartitionChange]], Awaitable[None]],
    ) -> None:
        super().__init__(zk)
        self.md = metadata
        self.reads = ClusterReader(zk)
        self.on_partitions = on_partitions

    def _watch(self, tag: Hashable) -> Watch:
        return self.zk.watch(self._events, tag)

    async def handle(self, batch: list[object]) -> None:
        resync = controller = brokers = topics = False
        topic_names: set[str] = set()
        states: set[TopicPartition] = set()
        for event in batch:
            if event is RESYNC:
                resync = True
            elif isinstance(event, SessionEvent):
                if event.state is SessionState.CONNECTED:
                    resync = True  # kazoo dropped every watch: re-read and re-arm
            elif isinstance(event, WatchEvent):
                tag = event.tag
                if event.kind == "none":
                    continue
                if tag == "controller":
                    controller = True
                elif tag == "brokers":
                    brokers = True
                elif tag == "topics":
                    topics = True
                elif isinstance(tag, tuple) and tag[0] == "topic":
                    topic_names.add(str(tag[1]))
                elif isinstance(tag, tuple) and tag[0] == "state":
                    states.add((str(tag[1]), int(tag[2])))
        changed: set[TopicPartition] = set()
        if resync:
            controller = brokers = topics = True
        if controller:
            await self._read_controller()
        if brokers:
            infos, _ = await self.reads.brokers(self._watch("brokers"))
            self.md.set_brokers(infos)
        if topics:
            names = await self.zk.get_children(TOPICS, self._watch("topics"))
            gone = set(self.md.topics) - set(names)
            for name in gone:
                changed |= self._forget_topic(name)
            topic_names |= set(names) if resync else set(names) - set(self.md.topics)
        for name in sorted(topic_names):
            changed |= await self._read_topic(name, resync)
        # read at once, not one round trip after the other: a broker's controlled
        # shutdown or a preferred election changes ~50 states (__consumer_offsets)
        pending = [tp for tp in sorted(states - changed) if tp[0] in self.md.topics]
        for tp, vs in zip(pending, await asyncio.gather(
                *(self.reads.state(tp, self._watch(("state", *tp))) for tp in pending)),
                strict=True):
            if self.md.set_state(tp, vs):
                changed.add(tp)
        if changed:
            await self.on_partitions([self._change(tp) for tp in sorted(changed)])
        self.synced.set()

    async def _read_controller(self) -> None:
        try:
            # get_or_none: /controller may be created between a failed read and the
            # exists() that arms the watch; that watch then waits for a change, so the
            # new controller would go unseen until the next one
            got = await self.zk.get_or_none(CONTROLLER, self._watch("controller"))
            self.md.set_controller(
                -1 if got is None else ControllerRegistration.decode(got[0]).broker_id)
        except MalformedZnodeError as e:
            self.reads.say_once(("controller", str(e)), "%s", e)
            self.md.set_controller(-1)

    def _forget_topic(self, name: str) -> set[TopicPartition]:
        old = self.md.topics.get(name)
        self.md.set_topic(name, None)
        return set() if old is None else {(name, p) for p in old.partitions}

    async def _read_topic(self, name: str, all_states: bool) -> set[TopicPartition]:
        """Re-read a topic znode, and the states of its new partitions (all if asked)."""
        old = self.md.topics.get(name)
        assignment = await self.reads.topic(name, self._watch(("topic", name)))
        if assignment is None:
            return self._forget_topic(name)
        self.md.set_topic(name, assignment)
        changed = {(name, p) for p in assignment.partitions
                   if old is None or old.partitions.get(p) != assignment.partitions[p]}
        if old is not None and old.topic_id != assignment.topic_id:
            changed |= {(name, p) for p in assignment.partitions}
        to_read = [(name, p) for p in assignment.partitions] if all_states else sorted(changed)
        got = await asyncio.gather(
            *(self.reads.state(tp, self._watch(("state", *tp))) for tp in to_read))
        # a new topic's states are not written yet: watch for their creation, all at once
        absent = [tp for tp, vs in zip(to_read, got, strict=True) if vs is None]
        late = dict(zip(absent, await asyncio.gather(*(self._state_once_created(tp)
                                                        for tp in absent)), strict=True))
        for tp, vs in zip(to_read, got, strict=True):
            if self.md.set_state(tp, late.get(tp) if vs is None else vs):
                changed.add(tp)
        return changed

    async def _state_once_created(self, tp: TopicPartition) -> VersionedState | None:
        """Arm a watch for the creation of `tp`'s state znode; it may have appeared since
        the read (then the watch is on its data, so read it now)."""
        watch = self._watch(("state", *tp))
        if await self.zk.exists(partition_state_path(*tp), watch) is not None:
            return await self.reads.state(tp, watch)
        return None

    def _change(self, tp: TopicPartition) -> PartitionChange:
        assignment = self.md.topics.get(tp[0])
        replicas = () if assignment is None else tuple(assignment.partitions.get(tp[1], ()))
        topic_id = None if assignment is None else assignment.topic_id
        return PartitionChange(tp, topic_id, replicas, self.md.states.get(tp))

