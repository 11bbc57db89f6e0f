"""The cluster controller (Kafka's ZooKeeper-mode KafkaController), I/O side.

One broker at a time is controller: the one whose ephemeral /controller znode exists.
Winning creates it and bumps /controller_epoch in one transaction; every later write
is fenced by that epoch's znode version (`ControllerContext.fenced`), so a deposed
controller - paused past its session, then resumed - fails its writes instead of
overwriting a newer decision, and resigns (ControllerMovedError).

Everyone watches /controller and tries to win when it goes. The active controller
watches /brokers/ids (broker death and arrival), /brokers/topics and each topic znode
(new topics, added partitions) and /admin/delete_topics, and turns each change into
partition state writes decided by `replication/controller_logic.py` (the base class
`ControllerReactions`, `controller_react.py`; this module has the election and the
event loop). Brokers learn leadership by watching their partitions' state znodes (no
LeaderAndIsr RPCs).

Threading: all work runs in one task draining an asyncio queue fed by `zk.py` (watch
events mean "re-read"; several pending events are handled as one pass). Session LOST
resigns; CONNECTED re-reads everything, since kazoo drops watches on disconnection.

Operations the broker asks for (controlled shutdown, ElectLeaders, partition
reassignments: `controller_calls.py`, `controller_ops.py`, `reassignments.py`) are queued
on the same queue and run by the same task, after the ZooKeeper events of their batch;
so is the automatic preferred-leader rebalance (`auto.leader.rebalance.enable`), every
`leader.imbalance.check.interval.seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Hashable

from tidegate.replication.controller_logic import ControllerContext, election_ops
from tidegate.replication.znodes import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    ControllerRegistration,
    MalformedZnodeError,
    TopicPartition,
    decode_controller_epoch,
    encode_controller_epoch,
)
from tidegate.server.cluster.controller_calls import Call
from tidegate.server.cluster.controller_ops import LeadershipOps, RebalanceSettings
from tidegate.server.cluster.controller_react import ControllerReactions
from tidegate.server.cluster.errors import (
    BadVersionError,
    ConnectionLossError,
    ControllerMovedError,
    NodeExistsError,
    SessionExpiredError,
    ZkClosedError,
    ZkError,
)
from tidegate.server.cluster.fenced_writes import FencedWriter
from tidegate.server.cluster.reads import ClusterReader
from tidegate.server.cluster.reassignments import Reassignments
from tidegate.server.cluster.zk import SessionEvent, SessionState, Watch, WatchEvent, ZkClient

__all__ = ["Controller"]

log = logging.getLogger(__name__)

_START = object()  # the first event: look at /controller
_RESYNC = object()  # re-read everything (after an unexpected failure)
_REBALANCE = object()  # time for the automatic preferred-leader rebalance
_RETRIES = 5


class Controller(ControllerReactions):
    """Takes part in controller election; acts as controller while elected."""

    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        *,
        unclean_leader_election: bool = False,
        delete_topic_enable: bool = True,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        on_active: Callable[[bool, int], None] | None = None,
        rebalance: RebalanceSettings | None = None,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.unclean_default = unclean_leader_election
        self.delete_topic_enable = delete_topic_enable
        self._now_ms = now_ms
        self._on_active = on_active
        self.ctx: ControllerContext | None = None
        self.controller_id = -1  # the controller as last seen (-1: none / unknown)
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.reads = ClusterReader(zk)
        self.writer = FencedWriter(zk, self.reads)
        self.rebalance = rebalance or RebalanceSettings(enabled=False)
        self.ops = LeadershipOps(broker_id, self.write_state)
        self.reassign = Reassignments(zk, self.reads, self.writer, self._watch)
        self._timer: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self.ctx is not None

    @property
    def epoch(self) -> int:
        return -1 if self.ctx is None else self.ctx.epoch

    async def start(self) -> None:
        self.zk.subscribe(self._events)
        self._events.put_nowait(_START)
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.broker_id}")
        if self.rebalance.enabled:
            self._timer = asyncio.create_task(self._rebalance_timer())

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.rebalance.interval_s)
            self._events.put_nowait(_REBALANCE)

    async def _stop_tasks(self) -> None:
        self.zk.unsubscribe(self._events)
        for task in (self._timer, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._timer = self._task = None
        self._fail_queued_calls()

    async def abandon(self) -> None:
        """Stop processing events without a word to ZooKeeper: what a frozen or dying
        process does (its session, and /controller with it, expires on its own)."""
        await self._stop_tasks()

    async def stop(self) -> None:
        """Stop taking part; if controller, give it up at once (delete our /controller)."""
        await self._stop_tasks()
        if self.ctx is not None:
            self._resign("shutting down")
            # Hand over at once rather than after the session ends; bounded, since
            # ZooKeeper may be unreachable while we shut down.
            with contextlib.suppress(ZkError, TimeoutError):
                async with asyncio.timeout(2.0):
                    got = await self.zk.get_or_none(CONTROLLER)
                    if got is not None and got[1].ephemeral_owner == self.zk.session_id:
                        await self.zk.delete(CONTROLLER, got[1].version)

    # -- the event loop -----------------------------------------------------------------

    def _watch(self, tag: Hashable) -> Watch:
        return self.zk.watch(self._events, tag)

    async def _run(self) -> None:
        while True:
            batch = [await self._events.get()]
            while not self._events.empty():
                batch.append(self._events.get_nowait())
            try:
                await self._handle(batch)
            except ControllerMovedError as e:
                self._resign(f"another broker is controller now ({e})")
                self._events.put_nowait(_START)
            except (ConnectionLossError, SessionExpiredError):
                # The session event that follows (CONNECTED or LOST) brings us back.
                log.info("controller %d: ZooKeeper unavailable, waiting", self.broker_id)
            except ZkClosedError:
                return
            except Exception:
                # Never crash the broker: log, then re-read everything a little later
                # (watches may not have been re-armed).
                log.exception("controller %d: event failed; re-reading soon", self.broker_id)
                asyncio.get_running_loop().call_later(1.0, self._events.put_nowait, _RESYNC)

    async def _handle(self, batch: list[object]) -> None:
        calls = [e for e in batch if isinstance(e, Call)]
        failure: Exception | None = None
        try:
            await self._handle_events([e for e in batch if not isinstance(e, Call)])
        except asyncio.CancelledError:
            self._fail_calls(calls)
            raise
        except Exception as e:  # the calls still get their answer (NOT_CONTROLLER, ...)
            failure = e
        await self._answer(calls)
        if failure is not None:
            raise failure

    async def _handle_events(self, batch: list[object]) -> None:
        elect = resync = brokers = topics = deletions = rebalance = False
        changed_topics: set[str] = set()
        reassigning: set[TopicPartition] = set()
        for event in batch:
            if event is _REBALANCE:
                rebalance = True
            elif event is _START:
                elect = True
            elif event is _RESYNC:
                elect = resync = True
            elif isinstance(event, SessionEvent):
                if event.state is SessionState.LOST and self.ctx is not None:
                    self._resign("ZooKeeper session expired")
                if event.state is SessionState.CONNECTED:
                    elect = resync = True
            elif isinstance(event, WatchEvent):
                if event.kind == "none":
                    continue  # connection dropped: CONNECTED re-reads everything
                tag = event.tag
                if tag == "controller":
                    elect = True
                elif tag == "brokers":
                    brokers = True
                elif tag == "topics":
                    topics = True
                elif tag == "delete_topics":
                    deletions = True
                elif isinstance(tag, tuple) and tag[0] == "topic":
                    changed_topics.add(str(tag[1]))
                elif isinstance(tag, tuple) and tag[0] == "reassign":
                    reassigning.add((str(tag[1]), int(tag[2])))
        if elect:
            became = await self._check_controller()
            if became or (resync and self.ctx is not None):
                await self._load_and_reconcile()
                return
        if self.ctx is None:
            return
        if brokers:
            await self._on_brokers_change()
        if topics or changed_topics:
            await self._on_topics_change(changed_topics)
        if deletions:
            await self._on_topic_deletions()
        for tp in sorted(reassigning):
            await self.reassign.on_isr_change(self._ctx(), tp)
        if rebalance:
            ctx = self._ctx()
            await self.ops.auto_rebalance(ctx, self.rebalance.percentage,
                                          bool(self.reassign.in_progress(ctx)))

    # -- election -----------------------------------------------------------------------

    async def _check_controller(self) -> bool:
        """Look at /controller (re-arming its watch); run for it if absent. True if we
        just became controller."""
        for _ in range(_RETRIES):
            got = await self.zk.get_or_none(CONTROLLER, self._watch("controller"))
            if got is None:
                if await self._try_elect():
                    return True
                continue
            data, stat = got
            try:
                holder = ControllerRegistration.decode(data).broker_id
            except MalformedZnodeError as e:
                self.reads.say_once(("controller-znode", stat.czxid), "%s", e)
                holder = -1
            self.controller_id = holder
            if holder == self.broker_id and stat.ephemeral_owner == self.zk.session_id:
                if self.ctx is None:  # we won, but the answer was lost with the connection
                    raw, epoch_stat = await self.zk.get(CONTROLLER_EPOCH)
                    self._become(decode_controller_epoch(raw), epoch_stat.version)
                    return True
                return False
            if self.ctx is not None:
                self._resign(f"/controller names broker {holder}")
            return False
        return False

    async def _try_elect(self) -> bool:
        got = await self.zk.get_or_none(CONTROLLER_EPOCH)
        if got is None:
            try:  # the very first controller: epoch 0 at version 0 (Kafka's initial values)
                await self.zk.create(CONTROLLER_EPOCH, encode_controller_epoch(0))
                epoch, version = 0, 0
            except NodeExistsError:
                return False
        else:
            epoch, version = decode_controller_epoch(got[0]), got[1].version
        try:
            results = await self.zk.transaction(
                election_ops(self.broker_id, self._now_ms(), epoch, version)
            )
        except (NodeExistsError, BadVersionError):
            return False  # someone else won: the caller looks again
        new_version = results[1].version  # type: ignore[union-attr]
        self._become(epoch + 1, new_version)
        # keep watching /controller even as controller (its deletion forces a re-election)
        await self.zk.exists(CONTROLLER, self._watch("controller"))
        return True

    def _become(self, epoch: int, epoch_zk_version: int) -> None:
        self.ctx = ControllerContext(self.broker_id, epoch, epoch_zk_version)
        self.controller_id = self.broker_id
        log.info("broker %d is now the controller (controller epoch %d)", self.broker_id, epoch)
        if self._on_active is not None:
            self._on_active(True, epoch)

    def _resign(self, why: str) -> None:
        if self.ctx is None:
            return
        epoch, self.ctx = self.ctx.epoch, None
        if self.controller_id == self.broker_id:
            self.controller_id = -1
        log.warning("broker %d resigns as controller (epoch %d): %s", self.broker_id, epoch, why)
        if self._on_active is not None:
            self._on_active(False, epoch)
