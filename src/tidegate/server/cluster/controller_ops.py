"""The controller's leadership operations, I/O side: controlled shutdown, ElectLeaders and
the automatic preferred-leader rebalance (decisions in replication/controller_ops.py).

Each runs inside the controller's event task (`Controller._call`), so it never races the
controller's own reactions to broker and topic changes, and each partition write goes
through `Controller.write_state`: fenced by the controller epoch, conditional on the
state znode's version, the decision taken again on the state as re-read (a leader may
have changed the ISR meanwhile). Brokers learn the outcome from the state znodes they
watch, as for every other leadership change.

- `controlled_shutdown(broker, epoch)`: Kafka's `doControlledShutdown` — refuse a stale
  broker epoch (STALE_BROKER_EPOCH) or an unknown broker (BROKER_NOT_AVAILABLE), mark the
  broker as shutting down (it is never elected again until its registration goes or
  changes), move its leaderships, take it out of the ISRs of what it follows, and return
  the partitions it still leads (no other in-sync replica was available).
- `elect(type, partitions)`: per partition the new leader, or ELECTION_NOT_NEEDED /
  PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE /
  UNKNOWN_TOPIC_OR_PARTITION with Kafka's messages.
- `auto_rebalance()`: every `leader.imbalance.check.interval.seconds`, preferred
  elections for the partitions of brokers whose imbalance exceeds
  `leader.imbalance.per.broker.percentage`; skipped while a reassignment runs (Kafka).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.replication.controller_logic import ControllerContext
from tidegate.replication.controller_ops import (
    PREFERRED,
    ElectionRefused,
    acts_on,
    admin_election,
    controlled_shutdown_decision,
    imbalanced_partitions,
    still_led,
)
from tidegate.replication.znodes import PartitionState, TopicPartition

__all__ = ["ElectionResult", "LeadershipOps", "RebalanceSettings", "ShutdownResult"]

log = logging.getLogger(__name__)

WriteState = Callable[[TopicPartition, Callable[[PartitionState], PartitionState | None]],
                      Awaitable[PartitionState | None]]


@dataclass(frozen=True)
class RebalanceSettings:
    """auto.leader.rebalance.enable and its two knobs."""

    enabled: bool = True
    interval_s: float = 300.0
    percentage: int = 10

    @classmethod
    def from_config(cls, config: BrokerConfig) -> RebalanceSettings:
        return cls(config.get_bool("auto.leader.rebalance.enable"),
                   float(config.get_int("leader.imbalance.check.interval.seconds", 300) or 300),
                   config.get_int("leader.imbalance.per.broker.percentage", 10) or 0)


@dataclass(frozen=True)
class ShutdownResult:
    error: ErrorCode
    message: str | None = None
    remaining: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class ElectionResult:
    error: ErrorCode
    message: str | None = None
    leader: int = -1  # the leader elected (error NONE)


class LeadershipOps:
    def __init__(self, broker_id: int, write_state: WriteState) -> None:
        self.broker_id = broker_id
        self.write_state = write_state

    async def controlled_shutdown(self, ctx: ControllerContext, broker: int,
                                  broker_epoch: int) -> ShutdownResult:
        cached = ctx.broker_epochs.get(broker)
        if broker_epoch != -1 and cached is not None and broker_epoch < cached:
            msg = (f"Received controlled shutdown request from an old broker epoch "
                   f"{broker_epoch} for broker {broker}. Current broker epoch is {cached}.")
            log.info("%s", msg)
            return ShutdownResult(ErrorCode.stale_broker_epoch, msg)
        if broker not in ctx.live_brokers:
            return ShutdownResult(ErrorCode.broker_not_available,
                                  f"Broker id {broker} does not exist.")
        log.info("controller %d: shutting down broker %d", self.broker_id, broker)
        ctx.shutting_down.add(broker)
        live, going = ctx.live_ids(), set(ctx.shutting_down)
        hosted = [tp for tp in ctx.partitions()
                  if acts_on(broker, ctx.assignment(tp), _state(ctx, tp))]
        led = [tp for tp in hosted if _leader(ctx, tp) == broker]
        followed = [tp for tp in hosted if _leader(ctx, tp) != broker]

        def decide(tp: TopicPartition) -> Callable[[PartitionState], PartitionState | None]:
            return lambda cur: controlled_shutdown_decision(
                broker, ctx.assignment(tp), cur, live, going, ctx.epoch)

        # leaderships first: the followers' ISR changes then go to the new leaders
        await asyncio.gather(*(self.write_state(tp, decide(tp)) for tp in led))
        await asyncio.gather(*(self.write_state(tp, decide(tp)) for tp in followed))
        remaining = tuple(tp for tp in ctx.partitions()
                          if still_led(broker, ctx.assignment(tp), _state(ctx, tp)))
        log.info("controller %d: broker %d shutting down: moved %d leaderships, left the ISR "
                 "of %d partitions, still leads %d %s", self.broker_id, broker,
                 len(led) - len(remaining), len(followed), len(remaining),
                 [f"{t}-{p}" for t, p in remaining][:10])
        return ShutdownResult(ErrorCode.none, None, remaining)

    async def elect(self, ctx: ControllerContext, election_type: int,
                    partitions: list[TopicPartition] | None) -> dict[TopicPartition,
                                                                   ElectionResult]:
        tps = ctx.partitions() if partitions is None else list(dict.fromkeys(partitions))
        live = ctx.live_ids()
        out: dict[TopicPartition, ElectionResult] = {}
        todo = []
        for tp in tps:
            if not ctx.assignment(tp):
                out[tp] = ElectionResult(ErrorCode.unknown_topic_or_partition,
                                         "The partition does not exist.")
            else:
                todo.append(tp)
        refused: dict[TopicPartition, ElectionRefused] = {}

        def decide(tp: TopicPartition) -> Callable[[PartitionState], PartitionState | None]:
            def run(cur: PartitionState) -> PartitionState | None:
                got = admin_election(election_type, ctx.assignment(tp), cur, live, ctx.epoch, tp)
                if isinstance(got, ElectionRefused):
                    refused[tp] = got
                    return None
                refused.pop(tp, None)
                return got
            return run

        written = await asyncio.gather(*(self.write_state(tp, decide(tp)) for tp in todo))
        for tp, new in zip(todo, written, strict=True):
            if new is not None:
                out[tp] = ElectionResult(ErrorCode.none, None, new.leader)
            elif tp in refused:
                out[tp] = ElectionResult(refused[tp].code, refused[tp].message)
            else:  # no state (not created yet, or the topic is going)
                code = (ErrorCode.preferred_leader_not_available if election_type == PREFERRED
                        else ErrorCode.eligible_leaders_not_available)
                out[tp] = ElectionResult(code, f"{tp[0]}-{tp[1]} has no leader state yet")
        elected = {tp: r.leader for tp, r in out.items() if r.error == ErrorCode.none}
        if elected:
            log.info("controller %d: %s election moved %s", self.broker_id,
                     "preferred" if election_type == PREFERRED else "unclean",
                     {f"{t}-{p}": leader for (t, p), leader in sorted(elected.items())})
        return out

    async def auto_rebalance(self, ctx: ControllerContext, percentage: int,
                             reassigning: bool) -> list[TopicPartition]:
        """One pass of the automatic rebalance; the partitions moved."""
        if reassigning:
            return []
        assignments = {tp: ctx.assignment(tp) for tp in ctx.partitions()}
        # Leaders in the context are current (only the controller changes them); ISRs
        # may not be (leaders change them): `elect` decides on each state as re-read,
        # so a preferred replica not (yet) in sync is simply left alone.
        leaders = {tp: vs.state.leader for tp, vs in ctx.states.items() if tp in assignments}
        candidates = imbalanced_partitions(assignments, leaders, percentage)
        if not candidates:
            return []
        results = await self.elect(ctx, PREFERRED, candidates)
        return [tp for tp, r in results.items() if r.error == ErrorCode.none]


def _state(ctx: ControllerContext, tp: TopicPartition) -> PartitionState | None:
    vs = ctx.states.get(tp)
    return None if vs is None else vs.state


def _leader(ctx: ControllerContext, tp: TopicPartition) -> int:
    vs = ctx.states.get(tp)
    return -1 if vs is None else vs.state.leader
