"""What the rest of the broker may ask of the controller, and how it is answered.

ControlledShutdown, ElectLeaders, AlterPartitionReassignments and
ListPartitionReassignments reach the controller from request handlers (through
`server/cluster/cluster_admin.py`). Each becomes a `Call` queued on the controller's own
event queue and run by its event task between ZooKeeper events, so an operation never
interleaves with the controller's reaction to a broker dying or a topic changing, and
reads a context no one else is changing.

A call made while this broker is not the controller, or that finds it deposed
(ControllerMovedError), fails with `NotControllerError` (NOT_CONTROLLER); a ZooKeeper
failure reaches the caller as its exception. Calls still queued or running when the
controller stops fail with NOT_CONTROLLER too, so no caller waits forever.

`ControllerCalls` is a mixin of `Controller` (server/cluster/controller.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.controller_logic import ControllerContext
from tidegate.replication.reassignment import ReplicaAssignment
from tidegate.replication.znodes import TopicPartition
from tidegate.server.cluster.controller_ops import ElectionResult, LeadershipOps, ShutdownResult
from tidegate.server.cluster.errors import ControllerMovedError
from tidegate.server.cluster.reassignments import Outcome, Reassignments

__all__ = ["Call", "ControllerCalls", "NotControllerError"]

T = TypeVar("T")


class NotControllerError(KafkaError):
    code = ErrorCode.not_controller


@dataclass
class Call:
    run: Callable[[ControllerContext], Awaitable[Any]]
    done: asyncio.Future[Any]


def _fail(call: Call, exc: BaseException) -> None:
    if not call.done.done():
        call.done.set_exception(exc)


class ControllerCalls:
    """Mixin: the public operations of `Controller` (see the module docstring)."""

    broker_id: int
    ctx: ControllerContext | None
    ops: LeadershipOps
    reassign: Reassignments
    _events: asyncio.Queue[object]

    async def _call(self, run: Callable[[ControllerContext], Awaitable[T]]) -> T:
        if self.ctx is None:  # fast path; checked again when the call runs
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._events.put_nowait(Call(run, fut))
        return cast(T, await fut)

    async def controlled_shutdown(self, broker: int, broker_epoch: int) -> ShutdownResult:
        return await self._call(lambda ctx: self.ops.controlled_shutdown(ctx, broker,
                                                                         broker_epoch))

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                            ) -> dict[TopicPartition, ElectionResult]:
        return await self._call(lambda ctx: self.ops.elect(ctx, election_type, partitions))

    async def alter_reassignments(self, requests: Mapping[TopicPartition, Sequence[int] | None]
                                  ) -> dict[TopicPartition, Outcome]:
        return await self._call(lambda ctx: self.reassign.alter(ctx, requests))

    async def list_reassignments(self, partitions: list[TopicPartition] | None
                                 ) -> dict[TopicPartition, ReplicaAssignment]:
        async def run(ctx: ControllerContext) -> dict[TopicPartition, ReplicaAssignment]:
            return self.reassign.in_progress(ctx, partitions)
        return await self._call(run)

    async def _answer(self, calls: list[Call]) -> None:
        """Run the calls of one batch of events, in order (the controller's task)."""
        moved: ControllerMovedError | None = None
        try:
            for call in calls:
                if call.done.done():  # the caller gave up
                    continue
                if self.ctx is None or moved is not None:
                    _fail(call, NotControllerError(
                        f"broker {self.broker_id} is no longer the controller"))
                    continue
                try:
                    result = await call.run(self.ctx)
                except ControllerMovedError as e:
                    moved = e
                    _fail(call, NotControllerError(f"the controller moved: {e}"))
                    continue
                except Exception as e:
                    _fail(call, e)
                    continue
                if not call.done.done():
                    call.done.set_result(result)
        finally:  # cancelled (the controller stops): nobody may wait forever
            for call in calls:
                _fail(call, NotControllerError("the controller is stopping"))
        if moved is not None:
            raise moved

    @staticmethod
    def _fail_calls(calls: list[Call]) -> None:
        for call in calls:
            _fail(call, NotControllerError("the controller is stopping"))

    def _fail_queued_calls(self) -> None:
        """The controller stops: answer the calls still queued."""
        kept: list[object] = []
        while not self._events.empty():
            event = self._events.get_nowait()
            if isinstance(event, Call):
                _fail(event, NotControllerError("the controller is stopping"))
            else:
                kept.append(event)
        for event in kept:
            self._events.put_nowait(event)
