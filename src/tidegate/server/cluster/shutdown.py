"""A broker's controlled shutdown (`controlled.shutdown.enable`, Kafka's
`KafkaServer.controlledShutdown`): before it stops, the broker asks the controller to
move its leaderships to other in-sync replicas, so clients are sent elsewhere at once
instead of waiting `zookeeper.session.timeout.ms` for the controller to notice it is
gone, and acknowledged writes never wait on a replica that is stopping.

`BrokerApp.stop` runs it while the listener still serves (the controller may be this
broker, reached through its own listener, and clients in flight get
NOT_LEADER_OR_FOLLOWER and move to the new leaders):

1. new follower roles start no fetcher any more: a replica that fetched again would be
   put back into the ISR by its new leader, and acks=all writes would then wait for it
   until its registration goes;
2. send ControlledShutdown (v3: broker id, broker epoch) to the controller, up to
   `controlled.shutdown.max.retries` attempts `controlled.shutdown.retry.backoff.ms`
   apart; an attempt fails on NOT_CONTROLLER (the controller moved), a connection error,
   or remaining partitions (no other in-sync replica could take them yet, e.g. a
   follower still catching up). Retrying is pointless, and skipped, when no other
   replica of a remaining partition is alive;
3. wait (briefly) until this broker's metadata shows it leads no partition that has
   another replica, then stop fetching altogether.

If every attempt fails the broker says so and stops anyway ("unclean shutdown": its
partitions move when its ZooKeeper session ends, as after a crash). Nothing is tried
while ZooKeeper is unreachable: the controller could not act, nor could we see it act.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.protocol.controlled_shutdown import (
    API_KEY,
    MAX_VERSION,
    ControlledShutdownResponse,
    request_for,
)
from tidegate.replication.znodes import (
    CONTROLLER,
    ControllerRegistration,
    MalformedZnodeError,
    TopicPartition,
)
from tidegate.server.cluster.errors import ZkError
from tidegate.server.cluster.inter_broker import InterBrokerConnection, InterBrokerError
from tidegate.server.cluster.metadata import ClusterMetadata
from tidegate.server.cluster.zk import ZkClient

__all__ = ["ControlledShutdown"]

log = logging.getLogger(__name__)

_SETTLE_S = 5.0  # how long the metadata may take to show the moves
_POLL_S = 0.02
_ELECTION_WAIT_S = 2.0  # a controller that just stopped is replaced within milliseconds


class ControlledShutdown:
    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata, zk: ZkClient,
                 broker_epoch: Callable[[], int],
                 endpoint: Callable[[int], tuple[str, int] | None]) -> None:
        self.node_id = config.node_id
        self.metadata = metadata
        self.zk = zk
        self.broker_epoch = broker_epoch
        self.endpoint = endpoint  # broker id -> (host, port) on the inter-broker listener
        self.enabled = config.get_bool("controlled.shutdown.enable")
        self.attempts = max(1, config.get_int("controlled.shutdown.max.retries", 3) or 1)
        self.backoff_s = (config.get_int("controlled.shutdown.retry.backoff.ms", 5000)
                          or 0) / 1000
        self.timeout_s = (config.get_int("controller.socket.timeout.ms", 30000) or 30000) / 1000

    async def run(self) -> bool:
        """True if the controller moved every leadership it could (see module doc)."""
        if not self.enabled:
            return False
        if not self.zk.connected:
            log.warning("controlled shutdown skipped: ZooKeeper is unreachable; this "
                        "broker's partitions move when its session expires")
            return False
        started = asyncio.get_running_loop().time()
        for attempt in range(1, self.attempts + 1):
            remaining = await self._attempt(attempt)
            if remaining is not None and not remaining:
                await self._settle()
                took = asyncio.get_running_loop().time() - started
                log.info("controlled shutdown succeeded in %.0f ms", took * 1000)
                return True
            if remaining and not self._worth_retrying(remaining):
                log.warning("controlled shutdown: no other replica of %s is alive to take "
                            "over; stopping without moving them", _names(remaining))
                return False
            if attempt < self.attempts:
                log.info("retrying controlled shutdown in %.1f s (%d attempts left)",
                         self.backoff_s, self.attempts - attempt)
                await asyncio.sleep(self.backoff_s)
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown "
                    "attempts failed")
        return False

    async def _controller(self) -> int:
        """The controller, read from ZooKeeper (fresher than the metadata cache, which
        a controller change just before shutdown may not have reached)."""
        try:
            got = await self.zk.get_or_none(CONTROLLER)
            return -1 if got is None else ControllerRegistration.decode(got[0]).broker_id
        except (ZkError, MalformedZnodeError):
            return self.metadata.controller_id

    async def _attempt(self, attempt: int) -> list[TopicPartition] | None:
        """One request: the partitions still led here, or None if the attempt failed."""
        controller = await self._controller()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _ELECTION_WAIT_S
        while controller < 0 and loop.time() < deadline:  # an election is under way
            await asyncio.sleep(_POLL_S * 5)
            controller = await self._controller()
        where = self.endpoint(controller) if controller >= 0 else None
        if where is None:
            log.info("controlled shutdown attempt %d: no controller known", attempt)
            return None
        conn = InterBrokerConnection(where[0], where[1],
                                     f"broker-{self.node_id}-controlled-shutdown",
                                     timeout=self.timeout_s)
        try:
            resp = await conn.request(API_KEY, MAX_VERSION,
                                      request_for(MAX_VERSION, self.node_id, self.broker_epoch()))
        except InterBrokerError as e:
            log.info("controlled shutdown attempt %d: controller %d unreachable: %s",
                     attempt, controller, e)
            return None
        finally:
            await conn.close()
        if not isinstance(resp, ControlledShutdownResponse):
            return None
        if resp.error_code != ErrorCode.none:
            log.info("controlled shutdown attempt %d: controller %d answered %s", attempt,
                     controller, ErrorCode(resp.error_code).name.upper())
            return None
        remaining = [(rp.topic_name, rp.partition_index) for rp in resp.remaining_partitions]
        if remaining:
            log.info("controlled shutdown attempt %d: remaining partitions to move: %s",
                     attempt, _names(remaining))
        return remaining

    def _worth_retrying(self, remaining: list[TopicPartition]) -> bool:
        """Whether a remaining partition has another live replica that may catch up."""
        live = set(self.metadata.brokers_info) - {self.node_id}
        for topic, index in remaining:
            assignment = self.metadata.topics.get(topic)
            replicas = () if assignment is None else assignment.partitions.get(index, ())
            if live & set(replicas):
                return True
        return False

    def led_here(self) -> list[TopicPartition]:
        """Partitions this broker's metadata shows it leading, with another replica."""
        md = self.metadata
        out = []
        for tp, vs in md.states.items():
            assignment = md.topics.get(tp[0])
            replicas = () if assignment is None else assignment.partitions.get(tp[1], ())
            if vs.state.leader == self.node_id and len(replicas) > 1:
                out.append(tp)
        return out

    async def _settle(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SETTLE_S
        while self.led_here():
            if loop.time() >= deadline:
                log.warning("controlled shutdown: metadata still shows this broker leading "
                            "%s; stopping anyway", _names(self.led_here()))
                return
            await asyncio.sleep(_POLL_S)


def _names(tps: list[TopicPartition]) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in sorted(tps)[:10])
    return shown + (f" and {len(tps) - 10} more" if len(tps) > 10 else "")
