"""The transactional producer's requests to coordinators, with Kafka's retry rules.

`CoordinatorClient.call` sends one request to the coordinator of a key — the
transaction coordinator (FindCoordinator key type 1, the transactional id) or a group
coordinator (key type 0, the group id) — over a connection of its own per coordinator,
and retries until the monotonic deadline what `transactions.classify` calls retriable
(CONCURRENT_TRANSACTIONS with a short backoff, as Kafka's 20 ms) or a coordinator move
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, a lost
connection or a timeout: look the coordinator up again). It returns the first response
with no such error; the caller judges the rest (abortable or fatal). After the deadline
it raises KafkaTimeoutError: the request's outcome may be unknown (a commit, for one),
so the caller must keep its state and let the user call again.

`transaction_version` reads the broker's finalized `transaction.version` feature
(ApiVersions v3+, KIP-584).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ProducerConfig
from tidegate.client.errors import KafkaConnectionError, KafkaTimeoutError
from tidegate.client.net import BrokerConnection, NetworkClient
from tidegate.client.producer.transactions import ErrorKind, classify
from tidegate.common.errors import KafkaError, UnsupportedVersionError, error_for_code

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "END_TXN",
    "GROUP_KEY",
    "INIT_PRODUCER_ID",
    "TRANSACTION_KEY",
    "TXN_OFFSET_COMMIT",
    "VERSIONS",
    "CoordinatorClient",
    "transaction_version",
]

log = logging.getLogger("tidegate.client.producer.txn")

API_VERSIONS, FIND_COORDINATOR, INIT_PRODUCER_ID = 18, 10, 22
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
GROUP_KEY, TRANSACTION_KEY = 0, 1
# The versions this code reads and writes. AddPartitionsToTxn v4+ is the brokers'
# verification form, never a client's; the top of the others is transaction version 2
# (EndTxn v5, TxnOffsetCommit v5) or KIP-939 (InitProducerId v6).
VERSIONS: dict[int, tuple[int, int]] = {
    FIND_COORDINATOR: (1, 6), INIT_PRODUCER_ID: (0, 6), ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 4), END_TXN: (0, 5), TXN_OFFSET_COMMIT: (0, 5),
}
# Transaction version 1 must not use the versions that mean version 2 to the broker.
TV1_MAX = {END_TXN: 4, TXN_OFFSET_COMMIT: 4}
CONCURRENT_BACKOFF_S = 0.02

# The error codes of a response, for the retry decision.
Codes = Callable[[Any], Iterable[ErrorCode]]


def pick_version(conn: BrokerConnection, api: int, *, least: int = 0,
                 most: int | None = None) -> int:
    lo, hi = VERSIONS[api]
    lo, hi = max(lo, least), hi if most is None else min(hi, most)
    theirs = conn.broker_versions.get(api)
    if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
        raise UnsupportedVersionError(
            f"broker {conn.host}:{conn.port} does not support API {api} at versions "
            f"{lo}-{hi} (it supports {theirs or 'none'}); does it support transactions?")
    return min(hi, theirs[1])


async def transaction_version(net: NetworkClient) -> int:
    """The broker's finalized `transaction.version` (0 when it advertises none)."""
    conn = await net.any_connection()
    theirs = conn.broker_versions.get(API_VERSIONS)
    if theirs is None or theirs[1] < 3:
        return 0
    resp = await conn.request(API_VERSIONS, {
        "client_software_name": "tidegate-python", "client_software_version": "0"},
        version=min(theirs[1], 4))
    for f in getattr(resp, "finalized_features", ()) or ():
        if str(f.name) == "transaction.version":
            return int(f.max_version_level)
    return 0


class CoordinatorClient:
    """Connections to coordinators by (key type, key); see the module docstring."""

    def __init__(self, config: ProducerConfig, net: NetworkClient) -> None:
        self.config = config
        self.net = net
        self._conns: dict[tuple[int, str], BrokerConnection] = {}
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}

    def forget(self, key_type: int, key: str, reason: str) -> None:
        conn = self._conns.pop((key_type, key), None)
        if conn is not None:
            log.info("coordinator %s:%d of %r unusable (%s); looking it up again",
                     conn.host, conn.port, key, reason)
            task = asyncio.get_running_loop().create_task(conn.close())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def connection(self, key_type: int, key: str) -> BrokerConnection:
        """The coordinator's connection, found with FindCoordinator if needed."""
        k = (key_type, key)
        conn = self._conns.get(k)
        if conn is not None and not conn.closed:
            return conn
        async with self._locks.setdefault(k, asyncio.Lock()):
            conn = self._conns.get(k)
            if conn is not None and not conn.closed:
                return conn
            any_conn = await self.net.any_connection()
            resp = await any_conn.request(FIND_COORDINATOR, {
                "key": key, "key_type": key_type, "coordinator_keys": [key]},
                version=pick_version(any_conn, FIND_COORDINATOR))
            entry = resp.coordinators[0] if getattr(resp, "coordinators", None) else resp
            if entry.error_code != ErrorCode.none:
                what = "transactional id" if key_type == TRANSACTION_KEY else "group"
                raise error_for_code(entry.error_code.value,
                                     f"FindCoordinator for {what} {key!r}: "
                                     f"{entry.error_code.name.upper()}")
            cfg = self.config
            conn = await BrokerConnection.open(
                entry.host, int(entry.port), client_id=cfg.client_id,
                request_timeout_ms=cfg.request_timeout_ms,
                connect_timeout_ms=cfg.socket_connection_setup_timeout_ms,
                node_id=int(entry.node_id), security=self.net.security)
            self._conns[k] = conn
            return conn

    async def call(self, key_type: int, key: str, api: int, data: Mapping[str, Any], *,
                   deadline: float, what: str, codes: Codes, least: int = 0,
                   most: int | None = None) -> Any:
        """Send `data` as API `api` to the coordinator of `key`, retrying (see the
        module docstring); return the first response without a retried error."""
        backoff = self.config.retry_backoff_ms / 1000
        last: BaseException | None = None
        while True:
            wait = backoff
            try:
                conn = await self.connection(key_type, key)
                version = pick_version(conn, api, least=least, most=most)
                resp = await conn.request(api, data, version=version)
                found = set(codes(resp))
                kinds = {classify(c) for c in found if c != ErrorCode.none}
                if ErrorKind.REDISCOVER in kinds:
                    bad = next(c for c in found if classify(c) is ErrorKind.REDISCOVER)
                    self.forget(key_type, key, bad.name.upper())
                    last = error_for_code(bad.value, f"{what}: {bad.name.upper()}")
                elif ErrorKind.RETRIABLE in kinds and not (
                        ErrorKind.FATAL in kinds or ErrorKind.ABORTABLE in kinds):
                    bad = next(c for c in found if classify(c) is ErrorKind.RETRIABLE)
                    last = error_for_code(bad.value, f"{what}: {bad.name.upper()}")
                    if bad == ErrorCode.concurrent_transactions:
                        wait = CONCURRENT_BACKOFF_S
                else:
                    return resp
            except (TimeoutError, KafkaConnectionError) as e:
                self.forget(key_type, key, str(e))
                last = e
            except KafkaError as e:
                if classify(e.code) is ErrorKind.REDISCOVER or e.code in (
                        ErrorCode.request_timed_out, ErrorCode.network_exception):
                    self.forget(key_type, key, str(e))
                elif not e.retriable:
                    raise
                last = e
            log.debug("%s: retrying after %s", what, last)
            if time.monotonic() + wait > deadline:
                raise KafkaTimeoutError(f"{what} did not complete in time; last error: "
                                        f"{last}")
            await asyncio.sleep(wait)

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()
