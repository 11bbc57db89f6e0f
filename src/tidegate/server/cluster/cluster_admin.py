"""The `ClusterAdmin` port (server/cluster_admin.py) of a broker in a ZooKeeper cluster.

This broker's controller does the work when it is the active controller; any other
broker answers as a ZooKeeper-mode Kafka broker does (it does not forward): ElectLeaders
gets NOT_CONTROLLER for every partition asked about (clients then refresh metadata and
retry on the controller), the reassignment APIs and ControlledShutdown a top-level
NOT_CONTROLLER.

ElectLeaders answers once this broker's metadata shows the elected leaders (Kafka's
DelayedElectLeader), or REQUEST_TIMED_OUT for those it does not show within the
request's timeout. A ZooKeeper failure during an operation is UNKNOWN_SERVER_ERROR, and
logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.server.cluster.errors import ZkError
from tidegate.server.cluster_admin import (
    OngoingReassignment,
    PartitionResult,
    ShutdownAnswer,
    TopicPartition,
)

if TYPE_CHECKING:
    from tidegate.server.cluster.controller import Controller
    from tidegate.server.cluster.node import ClusterNode

__all__ = ["ClusterNodeAdmin"]

log = logging.getLogger(__name__)

T = TypeVar("T")
SHUTDOWN_TIMEOUT_S = 30.0  # a controlled shutdown is ZooKeeper writes only
_POLL_S = 0.02


class ClusterNodeAdmin:
    def __init__(self, node: ClusterNode) -> None:
        self.node = node

    def _controller(self) -> Controller | None:
        controller = self.node.controller
        return controller if controller is not None and controller.active else None

    async def _run(self, what: str, op: Awaitable[T], timeout_s: float) -> T:
        """Await a controller call; ZooKeeper failures and timeouts as Kafka errors."""
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: it may swallow a cancel
                return await op
        except TimeoutError:
            raise KafkaError(f"{what} did not finish within {timeout_s:.0f} s",
                             code=ErrorCode.request_timed_out) from None
        except ZkError as e:
            log.warning("%s failed: %s", what, e)
            raise KafkaError(f"{what} failed: {e}", code=ErrorCode.unknown_server_error) from e

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ShutdownAnswer:
        controller = self._controller()
        if controller is None:
            return ShutdownAnswer(ErrorCode.not_controller)
        try:
            got = await self._run(f"controlled shutdown of broker {broker_id}",
                                  controller.controlled_shutdown(broker_id, broker_epoch),
                                  SHUTDOWN_TIMEOUT_S)
        except KafkaError as e:
            return ShutdownAnswer(e.code)
        return ShutdownAnswer(got.error, got.remaining)

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None,
                            timeout_ms: int) -> dict[TopicPartition, PartitionResult]:
        controller = self._controller()
        if controller is None:
            md = self.node.metadata
            if partitions is None:
                partitions = [] if md is None else [
                    (t, p) for t, a in sorted(md.topics.items()) for p in sorted(a.partitions)]
            return {tp: PartitionResult(ErrorCode.not_controller) for tp in partitions}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        try:
            results = await self._run("leader election",
                                      controller.elect_leaders(election_type, partitions),
                                      max(timeout_ms, 1) / 1000)
        except KafkaError as e:
            asked = partitions or []
            return {tp: PartitionResult(e.code, str(e)) for tp in asked}
        out = {tp: PartitionResult(r.error, r.message) for tp, r in results.items()}
        waiting = {tp: r.leader for tp, r in results.items() if r.error == ErrorCode.none}
        while waiting and loop.time() < deadline:
            waiting = {tp: leader for tp, leader in waiting.items()
                       if self._leader(tp) != leader}
            if waiting:
                await asyncio.sleep(_POLL_S)
        for tp in waiting:
            out[tp] = PartitionResult(ErrorCode.request_timed_out)
        return out

    def _leader(self, tp: TopicPartition) -> int:
        md = self.node.metadata
        vs = None if md is None else md.states.get(tp)
        return -1 if vs is None else vs.state.leader

    async def alter_reassignments(self, requests: Mapping[TopicPartition, Sequence[int] | None],
                                  timeout_ms: int) -> dict[TopicPartition, PartitionResult]:
        controller = self._controller()
        if controller is None:
            raise KafkaError(code=ErrorCode.not_controller)
        results = await self._run("partition reassignment",
                                  controller.alter_reassignments(requests),
                                  max(timeout_ms, 1) / 1000)
        return {tp: PartitionResult(code, msg) for tp, (code, msg) in results.items()}

    async def list_reassignments(self, partitions: list[TopicPartition] | None,
                                 timeout_ms: int) -> dict[TopicPartition, OngoingReassignment]:
        controller = self._controller()
        if controller is None:
            raise KafkaError(code=ErrorCode.not_controller)
        got = await self._run("listing reassignments",
                              controller.list_reassignments(partitions),
                              max(timeout_ms, 1) / 1000)
        return {tp: OngoingReassignment(ra.replicas, ra.adding, ra.removing)
                for tp, ra in got.items()}
