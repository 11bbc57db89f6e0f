"""The admin client's transaction tools (KIP-664): ListTransactions, DescribeTransactions,
DescribeProducers, and aborting one partition's open transaction with WriteTxnMarkers.

Where each request goes, as in Kafka's Admin:

- ListTransactions to every broker (each is the coordinator of some
  `__transaction_state` partitions), the listings merged;
- DescribeTransactions to each transactional id's coordinator, found with
  FindCoordinator (key type 1, TRANSACTION);
- DescribeProducers and WriteTxnMarkers to each partition's leader.

Coordinator moves and loads (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE), leadership errors and lost connections are retried with
``retry.backoff.ms`` until ``default.api.timeout.ms``; every other error is raised as the
typed KafkaError of its code, naming what failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from tidegate.client.errors import KafkaTimeoutError
from tidegate.client.metadata import MetadataClient
from tidegate.client.net import BrokerConnection
from tidegate.client.types import (
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from tidegate.common.errors import KafkaError, UnsupportedVersionError, error_for_code
from tidegate.protocol.messages import ms

__all__ = ["TxnAdmin"]

TXN_STATE_TOPIC = "__transaction_state"

WRITE_TXN_MARKERS, FIND_COORDINATOR, DESCRIBE_PRODUCERS = 27, 10, 61
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
TRANSACTION_KEY = 1
# The versions this module reads and writes (WriteTxnMarkers v0 predates flexible
# versions and kio lacks it; ListTransactions v1 adds the duration filter).
VERSIONS: dict[int, tuple[int, int]] = {
    FIND_COORDINATOR: (1, 6), LIST_TRANSACTIONS: (0, 1), DESCRIBE_TRANSACTIONS: (0, 0),
    DESCRIBE_PRODUCERS: (0, 0), WRITE_TXN_MARKERS: (1, 1),
}
_COORDINATOR_MOVED = {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                      ErrorCode.coordinator_not_available}
T = TypeVar("T")


def _version(conn: BrokerConnection, api: int, *, least: int = 0) -> int:
    lo, hi = VERSIONS[api]
    lo = max(lo, least)
    theirs = conn.broker_versions.get(api)
    if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
        raise UnsupportedVersionError(
            f"broker {conn.host}:{conn.port} does not support API {api} at versions "
            f"{lo}-{hi} (it supports {theirs or 'none'}); is it a broker with KIP-664's "
            "transaction tools?")
    return min(hi, theirs[1])


def _raise(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise error_for_code(code.value, f"{what}: {message or code.name.upper()}")


class TxnAdmin:
    """The four operations over an admin client's metadata and connections."""

    def __init__(self, metadata: MetadataClient, timeout_ms: int, retry_backoff_ms: int
                 ) -> None:
        self._metadata = metadata
        self._timeout_ms = timeout_ms
        self._backoff = retry_backoff_ms / 1000

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt` until it returns or raises a non-retriable error."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            try:
                return await attempt()
            except KafkaError as e:
                if e.code == ErrorCode.unknown_topic_or_partition or not (
                        e.retriable or e.code in _COORDINATOR_MOVED):
                    raise
                if time.monotonic() + self._backoff > deadline:
                    raise KafkaTimeoutError(
                        f"{what} did not succeed within {self._timeout_ms} ms "
                        f"(default.api.timeout.ms): {e}") from e
                self._metadata.cache.request_update()
            await asyncio.sleep(self._backoff)

    async def _node(self, node: int) -> BrokerConnection:
        return await self._metadata.net.connect(node)

    # -- ListTransactions --------------------------------------------------------------

    async def list_transactions(self, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                duration_filter_ms: int = -1) -> list[TransactionListing]:
        wanted_states, pids = list(states), [int(p) for p in producer_ids]

        async def ask(node: int) -> list[TransactionListing]:
            conn = await self._node(node)
            version = _version(conn, LIST_TRANSACTIONS,
                               least=1 if duration_filter_ms >= 0 else 0)
            resp = await conn.request(LIST_TRANSACTIONS, {
                "state_filters": wanted_states, "producer_id_filters": pids,
                "duration_filter": duration_filter_ms}, version=version)
            _raise(resp.error_code, f"cannot list the transactions of broker {node}")
            if resp.unknown_state_filters:
                raise ValueError(
                    f"unknown transaction state(s) {', '.join(resp.unknown_state_filters)}"
                    "; the states are Empty, Ongoing, PrepareCommit, PrepareAbort, "
                    "CompleteCommit, CompleteAbort, Dead, PrepareEpochFence")
            return [TransactionListing(str(t.transactional_id), int(t.producer_id),
                                       str(t.transaction_state), node)
                    for t in resp.transaction_states]

        async def every_broker() -> list[TransactionListing]:
            # One pass over the brokers of fresh metadata; any retriable failure
            # restarts the whole pass. Retrying only the failing broker would wait for
            # a dead one forever (it stays in the metadata until its ZooKeeper session
            # expires, then leaves it) and, once it left, would miss the coordinator
            # shards that moved to brokers already asked. A `__transaction_state`
            # partition without a live leader is a shard no broker would list: wait.
            md = await self._metadata.refresh([TXN_STATE_TOPIC])
            state = md.topic(TXN_STATE_TOPIC)
            orphans = [] if state is None else sorted(
                p for p in state.partitions
                if md.leader_for(TopicPartition(TXN_STATE_TOPIC, p)) is None)
            if orphans:
                raise error_for_code(
                    ErrorCode.coordinator_not_available.value,
                    f"{TXN_STATE_TOPIC} partitions {orphans[:5]} have no live leader")
            out: list[TransactionListing] = []
            for node in sorted(md.brokers):
                out += await ask(node)
            return out

        found = await self._retrying("listing the transactions of every broker", every_broker)
        return sorted(found, key=lambda t: t.transactional_id)

    # -- DescribeTransactions ----------------------------------------------------------

    async def _coordinator(self, transactional_id: str) -> int:
        conn = await self._metadata.net.any_connection()
        resp = await conn.request(FIND_COORDINATOR, {
            "key": transactional_id, "key_type": TRANSACTION_KEY,
            "coordinator_keys": [transactional_id]},
            version=_version(conn, FIND_COORDINATOR))
        entry = resp.coordinators[0] if getattr(resp, "coordinators", None) else resp
        _raise(entry.error_code,
               f"cannot find the coordinator of transactional id {transactional_id!r}",
               getattr(entry, "error_message", None))
        node = int(entry.node_id)
        if node not in self._metadata.cache.brokers:
            await self._metadata.refresh([])
        return node

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        async def ask() -> TransactionDescription:
            node = await self._coordinator(transactional_id)
            conn = await self._node(node)
            resp = await conn.request(DESCRIBE_TRANSACTIONS,
                                      {"transactional_ids": [transactional_id]},
                                      version=_version(conn, DESCRIBE_TRANSACTIONS))
            d = resp.transaction_states[0]
            _raise(d.error_code, f"cannot describe transactional id {transactional_id!r}")
            start = ms(d.transaction_start_time)
            return TransactionDescription(
                str(d.transactional_id), node, str(d.transaction_state), int(d.producer_id),
                int(d.producer_epoch), ms(d.transaction_timeout), start if start >= 0 else -1,
                tuple(sorted(TopicPartition(str(t.topic), int(p))
                             for t in d.topics for p in t.partitions)))
        return await self._retrying(f"describing transactional id {transactional_id!r}", ask)

    # -- DescribeProducers and WriteTxnMarkers (to the partitions' leaders) -------------

    async def _leader(self, tp: TopicPartition) -> int:
        await self._metadata.refresh([tp.topic])
        leader = self._metadata.cache.leader_for(tp)
        if leader is not None:
            return leader
        info = self._metadata.cache.topic(tp.topic)
        if info is None or tp.partition not in info.partitions:
            raise error_for_code(ErrorCode.unknown_topic_or_partition.value,
                                 f"{tp.topic}-{tp.partition} does not exist")
        raise error_for_code(ErrorCode.leader_not_available.value,
                             f"no leader known for {tp.topic}-{tp.partition}")

    async def describe_producers(self, partitions: Iterable[TopicPartition]
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        out: dict[TopicPartition, list[ProducerState]] = {}
        for tp in dict.fromkeys(partitions):
            async def ask(tp: TopicPartition = tp) -> list[ProducerState]:
                conn = await self._node(await self._leader(tp))
                resp = await conn.request(DESCRIBE_PRODUCERS, {"topics": [
                    {"name": tp.topic, "partition_indexes": [tp.partition]}]},
                    version=_version(conn, DESCRIBE_PRODUCERS))
                p = resp.topics[0].partitions[0]
                _raise(p.error_code, f"cannot describe the producers of "
                       f"{tp.topic}-{tp.partition}", p.error_message)
                return sorted((ProducerState(
                    int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                    int(s.last_timestamp), int(s.coordinator_epoch),
                    int(s.current_txn_start_offset)) for s in p.active_producers),
                    key=lambda s: s.producer_id)
            out[tp] = await self._retrying(
                f"describing the producers of {tp.topic}-{tp.partition}", ask)
        return out

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        tp = TopicPartition(topic, partition)

        async def ask() -> None:
            conn = await self._node(await self._leader(tp))
            data: dict[str, Any] = {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
            resp = await conn.request(WRITE_TXN_MARKERS, data,
                                      version=_version(conn, WRITE_TXN_MARKERS))
            for m in resp.markers:
                for t in m.topics:
                    for p in t.partitions:
                        _raise(p.error_code, f"cannot abort the transaction of producer "
                               f"{producer_id} in {topic}-{partition}")
        await self._retrying(f"aborting the transaction of producer {producer_id} in "
                             f"{topic}-{partition}", ask)
