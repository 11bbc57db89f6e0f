"""`GroupCoordinator`: this node's group coordinator, `__consumer_offsets` and its groups.

It owns a `CoordinatorRuntime` of `GroupShard`s behind a `CoordinatorShell`, and gives
the handlers typed async methods, one per group operation; a group's requests go to
the partition `abs(hashCode(group)) % offsets.topic.num.partitions`. It also runs
offset expiry every `offsets.retention.check.interval.ms` and drops the offsets of
deleted topics (`on_topic_deleted`, called by the broker).

Transactions: `txn_commit` (TxnOffsetCommit) writes offsets pending on the producer's
transaction; `write_marker` is how a transaction's COMMIT/ABORT reaches a
`__consumer_offsets` partition (the shard then applies or drops the pending offsets);
`has_pending` tells whether a producer still has pending offsets in a partition.

`__consumer_offsets` is created compacted, with `offsets.topic.segment.bytes` segments.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, TypeVar

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import CONSUMER_OFFSETS
from tidegate.coordinator.group import (
    admin,
    consumer,
    consumer_classic,
    membership,
    offsets,
    rebalance,
)
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.consumer_model import ConsumerGroup
from tidegate.coordinator.group.consumer_regex import TopicNames
from tidegate.coordinator.group.messages import (
    DescribedGroup,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncRequest,
    SyncResponse,
    TxnOffsetCommitRequest,
)
from tidegate.coordinator.group.model import TopicPartition
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.runtime import (
    CoordinatorLoadInProgressError,
    CoordinatorRuntime,
    NotCoordinatorError,
    Result,
)
from tidegate.protocol.consumer_group_records import TopicMetadata
from tidegate.server.coordinator import CoordinatorShell

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

R = TypeVar("R")

OFFSETS_TOPIC = CONSUMER_OFFSETS

Op = Callable[[GroupShard, int, int], Result[R]]

_COORDINATOR_ERRORS = frozenset({
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
})


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.config = GroupConfig.from_broker(cfg.get_int, cfg.get)
        partitions = cfg.get_int("offsets.topic.num.partitions", 50) or 50
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            OFFSETS_TOPIC,
            partitions,
            lambda p: GroupShard(p, self.config),
            broker.clock,
            load_buffer_bytes=cfg.get_int("offsets.load.buffer.size", 5242880) or 5242880,
        )
        segment = cfg.get_int("offsets.topic.segment.bytes", 104857600) or 104857600
        self.shell = CoordinatorShell(broker, self.runtime, {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment),
            "compression.type": "producer",
        })
        self._tasks: set[asyncio.Task[object]] = set()
        self._names_base = broker.clock.now_ms()
        self._names = TopicNames(self._names_base, frozenset())

    @property
    def available(self) -> bool:
        return self.shell.started

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    async def ensure_topic(self) -> bool:
        """Cluster mode: create __consumer_offsets in ZooKeeper if it does not exist yet
        (Kafka does it on the first FindCoordinator), with offsets.topic.num.partitions
        and offsets.topic.replication.factor. False while it cannot exist yet (fewer live
        brokers than the replication factor: logged once, with what to do)."""
        return await self.shell.ensure_topic(
            self.broker.config.get_int("offsets.topic.replication.factor", 3) or 3,
            "offsets.topic.replication.factor")

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.shell.start()
        self._spawn(self._expire_forever())

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.shell.stop()

    def _spawn(self, coro: Coroutine[object, object, object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire_forever(self) -> None:
        interval = max(self.config.offsets_retention_check_interval_ms, 1) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    async def expire_offsets(self) -> int:
        removed = sum(await self.shell.each_partition(lambda s, now, _t: offsets.expire(s, now)))
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed

    def on_topic_deleted(self, topic: str) -> None:
        """Called by the broker after DeleteTopics: drop the topic's committed offsets
        in every group (in the background; the broker's call is synchronous)."""
        if topic == OFFSETS_TOPIC or not self.shell.started:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (offline tools): nothing is coordinating
        doomed = frozenset({topic})
        self._spawn(self.shell.each_partition(
            lambda s, now, _t: offsets.remove_topics(s, doomed, now)))

    # -- one group ------------------------------------------------------------------------

    async def _run(self, group_id: str, op: Op[R]) -> R:
        if not self.shell.started:
            raise KafkaError("the group coordinator is starting",
                             code=ErrorCode.coordinator_not_available)
        partition = self.partition_for(group_id)
        try:
            return await self.shell.run(partition, op)
        except NotCoordinatorError:
            if not self._taking_up(partition):
                raise
            # cluster mode: FindCoordinator answers from the metadata, which names the
            # leader as soon as the controller writes the partition's state; the leader
            # takes the partition up a moment later (on a new cluster, one partition of
            # __consumer_offsets after the other), and its own metadata may see the
            # state a few ms after the broker that answered. Meanwhile, as Kafka while
            # it loads: retry here (NOT_COORDINATOR sends clients back to
            # FindCoordinator, which names this broker again; librdkafka's committed()
            # gives up on it)
            raise CoordinatorLoadInProgressError(
                f"{CONSUMER_OFFSETS}-{partition} is not taken up here yet") from None

    def _taking_up(self, partition: int) -> bool:
        """This broker does not hold `partition`, and the metadata does not name another
        leader: it names this broker, or has no state for the partition yet."""
        if self.runtime.state(partition) is not None:
            return False  # held (loading, failed, being given up): its own answer
        t = self.broker.metadata.topic(CONSUMER_OFFSETS)
        if t is None or partition >= len(t.partitions):
            return True
        p = t.partitions[partition]
        return p.leader == self.broker.node_id or (p.leader < 0 and p.leader_epoch < 0)

    # Classic requests for a consumer group with members (a mixed group) are served by
    # the consumer group (consumer_classic.py), unless group.consumer.migration.policy
    # is "disabled".

    def _mixed(self, s: GroupShard, group_id: str) -> ConsumerGroup | None:
        if self.config.consumer_migration_policy == "disabled":
            return None
        return consumer_classic.serves(s, group_id)

    async def join(self, req: JoinRequest) -> JoinResponse:
        def op(s: GroupShard, now: int, t: int) -> Result[JoinResponse]:
            if (cg := self._mixed(s, req.group_id)) is not None:
                return consumer_classic.join(s, cg, req, self._topic, self._topic_names, now)
            return rebalance.join(s, req, t, now)

        return await self._run(req.group_id, op)

    async def sync(self, req: SyncRequest) -> SyncResponse:
        def op(s: GroupShard, now: int, t: int) -> Result[SyncResponse]:
            if (cg := self._mixed(s, req.group_id)) is not None:
                return consumer_classic.sync(s, cg, req, now)
            return membership.sync(s, req, t, now)

        return await self._run(req.group_id, op)

    async def heartbeat(self, req: HeartbeatRequest) -> ErrorCode:
        def op(s: GroupShard, now: int, _t: int) -> Result[ErrorCode]:
            if (cg := self._mixed(s, req.group_id)) is not None:
                return consumer_classic.heartbeat(s, cg, req, now)
            return membership.heartbeat(s, req, now)

        return await self._run(req.group_id, op)

    async def leave(self, req: LeaveRequest) -> LeaveResponse:
        def op(s: GroupShard, now: int, _t: int) -> Result[LeaveResponse]:
            if (cg := self._mixed(s, req.group_id)) is not None:
                return consumer_classic.leave(s, cg, req, now)
            return membership.leave(s, req, now)

        return await self._run(req.group_id, op)

    def _topic(self, name: str) -> TopicMetadata | None:
        t = self.broker.metadata.topic(name)
        return None if t is None else TopicMetadata(t.topic_id, name, len(t.partitions))

    async def consumer_heartbeat(self, req: consumer.HeartbeatRequest,
                                 visible: Callable[[str], bool] = lambda _t: True
                                 ) -> consumer.HeartbeatResponse:
        """ConsumerGroupHeartbeat (KIP-848); topic metadata from the broker's view.
        `visible`: the topics the member's principal may DESCRIBE (regex results)."""
        return await self._run(
            req.group_id, lambda s, now, _t: consumer.heartbeat(
                s, req, self._topic, now, self._topic_names, visible))

    def _topic_names(self) -> TopicNames:
        """The broker's topic names, with a version that changes when they do (asked
        only by groups with regex subscriptions). Versions start at the wall clock so
        they never repeat one a previous run wrote into a regex record."""
        names = frozenset(self.broker.metadata.topic_names())
        if names != self._names.names:
            self._names = TopicNames(max(self._names.version + 1, self._names_base), names)
        return self._names

    async def consumer_describe(self, group_ids: list[str]) -> list[dict[str, object]]:
        found: dict[str, dict[str, object]] = {}
        for gids in self._by_partition(group_ids).values():
            def op(s: GroupShard, _now: int, _t: int, gids: list[str] = gids
                   ) -> Result[list[dict[str, object]]]:
                return admin.describe_consumer(s, gids)

            try:
                for d in await self._run(gids[0], op):
                    found[str(d["group_id"])] = d
            except KafkaError as e:
                for gid in gids:
                    found[gid] = {"group_id": gid, "error_code": e.code, "members": []}
        return [found[g] for g in group_ids]

    async def commit(self, req: OffsetCommitRequest) -> list[tuple[TopicPartition, ErrorCode]]:
        return await self._run(req.group_id, lambda s, now, _t: offsets.commit(s, req, now))

    async def txn_commit(self, req: TxnOffsetCommitRequest
                         ) -> list[tuple[TopicPartition, ErrorCode]]:
        """TxnOffsetCommit: an error per partition. A producer epoch the log refuses
        (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ...) is answered for every
        partition; coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
        COORDINATOR_NOT_AVAILABLE) are raised, as for `commit`."""
        try:
            return await self._run(
                req.group_id, lambda s, now, _t: offsets.txn_commit(s, req, now))
        except KafkaError as e:
            if e.code in _COORDINATOR_ERRORS:
                raise
            log.info("TxnOffsetCommit of %r (producer %d epoch %d) for group %r refused: %s",
                     req.transactional_id, req.producer_id, req.producer_epoch,
                     req.group_id, e)
            return [((p.topic, p.partition), e.code) for p in req.partitions]

    async def write_marker(self, partition: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool) -> None:
        """Write a transaction marker to `__consumer_offsets`-`partition`, returning once
        it is fsynced (see `CoordinatorShell.write_marker` for the errors)."""
        if not self.shell.started:
            raise CoordinatorLoadInProgressError("the group coordinator is starting")
        await self.shell.write_marker(
            partition, producer_id, producer_epoch, coordinator_epoch, commit)

    def has_pending(self, partition: int, producer_id: int) -> bool:
        """Whether `producer_id` has offsets pending on its transaction in the partition
        (raises the coordinator error if the partition is not active here)."""
        return self.runtime.shard(partition).pending.has_producer(producer_id)

    async def fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._run(req.group_id, lambda s, now, _t: offsets.fetch(s, req, now))

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, list[tuple[TopicPartition, ErrorCode]]]:
        return await self._run(
            group_id, lambda s, now, _t: offsets.delete_offsets(s, group_id, partitions, now))

    # -- several groups -------------------------------------------------------------------

    def _by_partition(self, group_ids: Iterable[str]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for gid in group_ids:
            out.setdefault(self.partition_for(gid), []).append(gid)
        return out

    async def describe(self, group_ids: list[str], *, not_found_error: bool = False
                       ) -> list[DescribedGroup]:
        found: dict[str, DescribedGroup] = {}
        for gids in self._by_partition(group_ids).values():
            def op(s: GroupShard, now: int, _t: int, gids: list[str] = gids
                   ) -> Result[list[DescribedGroup]]:
                return admin.describe(s, gids, now, not_found_error=not_found_error)

            try:
                for d in await self._run(gids[0], op):
                    found[d.group_id] = d
            except KafkaError as e:
                for gid in gids:
                    found[gid] = DescribedGroup(gid, e.code, state="")
        return [found[g] for g in group_ids]

    async def list_groups(self, states: list[str], types: list[str]
                          ) -> tuple[ErrorCode, list[ListedGroup]]:
        """Every group of every partition this broker coordinates; the error of one that
        cannot answer (loading, failed) is reported with the groups of the others. A
        partition another broker leads is left out, not an error (Kafka's broker lists
        only its own groups; admin clients ask every broker)."""
        if not self.shell.started:
            return ErrorCode.coordinator_not_available, []
        code = ErrorCode.none
        out: list[ListedGroup] = []
        for p in range(self.runtime.num_partitions):
            try:
                out += await self.shell.run(
                    p, lambda s, _now, _t: Result(admin.list_groups(s, states, types)))
            except NotCoordinatorError:
                continue
            except KafkaError as e:
                code = e.code
        return code, out

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, ErrorCode]]:
        found: dict[str, ErrorCode] = {}
        for gids in self._by_partition(group_ids).values():
            def op(s: GroupShard, now: int, _t: int, gids: list[str] = gids
                   ) -> Result[list[tuple[str, ErrorCode]]]:
                return admin.delete_groups(s, gids, now)

            try:
                for gid, code in await self._run(gids[0], op):
                    found[gid] = code
            except KafkaError as e:
                for gid in gids:
                    found[gid] = e.code
        return [(g, found[g]) for g in group_ids]

