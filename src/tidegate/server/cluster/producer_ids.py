"""Producer-id blocks reserved in ZooKeeper, shared by every broker of a cluster (seed 004).

Kafka's ZooKeeper-mode `ProducerIdManager`: `/latest_producer_id_block` holds the last
block handed out (`{"version":1,"broker":N,"block_start":"s","block_end":"e"}`); a broker
takes the next block with a write conditional on the znode's version, and retries from
a fresh read when another broker won the race. So no producer id is ever given to two
producers, whichever broker they asked.

`ZkProducerIdBlocks` is the `reserve` callable of `coordinator.producer_ids.
ProducerIdManager`, which calls it from a worker thread (InitProducerId runs `next_id`
off the event loop); the ZooKeeper calls run on the loop through the bridge. Failures
(ZooKeeper unreachable) raise COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
"""

from __future__ import annotations

import asyncio
import logging

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.znodes import PRODUCER_ID_BLOCK, MalformedZnodeError
from tidegate.replication.znodes_admin import ProducerIdBlock, first_producer_id_block
from tidegate.server.cluster.errors import BadVersionError, NodeExistsError, ZkError
from tidegate.server.cluster.zk import ZkClient

__all__ = ["ZkProducerIdBlocks"]

log = logging.getLogger(__name__)

_TIMEOUT_S = 15.0


class ProducerIdBlockUnavailableError(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class ZkProducerIdBlocks:
    def __init__(self, zk: ZkClient, broker_id: int, loop: asyncio.AbstractEventLoop) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.loop = loop

    def __call__(self, size: int) -> tuple[int, int]:
        """Reserve the next block (from a worker thread, never from the loop)."""
        future = asyncio.run_coroutine_threadsafe(self.reserve(size), self.loop)
        try:
            return future.result(_TIMEOUT_S)
        except (ZkError, MalformedZnodeError) as e:
            raise ProducerIdBlockUnavailableError(
                f"cannot reserve producer ids in ZooKeeper: {e}") from e
        except TimeoutError as e:
            future.cancel()
            raise ProducerIdBlockUnavailableError(
                "cannot reserve producer ids: ZooKeeper did not answer") from e

    async def reserve(self, size: int) -> tuple[int, int]:
        while True:
            got = await self.zk.get_or_none(PRODUCER_ID_BLOCK)
            if got is None:
                block = first_producer_id_block(self.broker_id, size)
                try:
                    await self.zk.create(PRODUCER_ID_BLOCK, block.encode(), makepath=True)
                except NodeExistsError:
                    continue  # another broker took the first block
            else:
                data, stat = got
                # empty: the persistent path exists (created at start, as Kafka does)
                # but no block was taken yet
                block = (first_producer_id_block(self.broker_id, size) if not data
                         else ProducerIdBlock.decode(data).next_block(self.broker_id, size))
                try:
                    await self.zk.set(PRODUCER_ID_BLOCK, block.encode(), stat.version)
                except BadVersionError:
                    continue  # another broker took this one: read again
            log.info("reserved producer ids %d-%d in ZooKeeper", block.block_start,
                     block.block_end)
            return block.block_start, block.block_end
