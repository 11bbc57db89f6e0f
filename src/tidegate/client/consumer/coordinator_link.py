"""Finding the group coordinator and talking to it over a connection of its own.

`CoordinatorLink.ensure()` sends FindCoordinator (key type 0, the group id) to any
broker and opens a dedicated connection to the answer, as Kafka's clients do: a
JoinGroup can take up to the rebalance timeout to answer and brokers answer one
request per connection at a time, so group traffic must not queue behind fetches (or
fetches behind it). COORDINATOR_NOT_AVAILABLE (the offsets topic is still being
created or loaded) and connection failures are retried with ``retry.backoff.ms``
until the deadline.

`request()` sends a group API request at the highest version both sides speak within
`GROUP_VERSIONS` (these APIs are negotiated here rather than in the shared client
table because only the group code uses them). A connection failure, a timeout, or a
response error in `COORDINATOR_ERRORS` makes the caller call `mark_unknown()`, and the
next `ensure()` looks the coordinator up again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ConsumerConfig
from tidegate.client.errors import KafkaConnectionError
from tidegate.client.net import BrokerConnection, NetworkClient
from tidegate.client.types import BrokerInfo
from tidegate.common.errors import KafkaError, UnsupportedVersionError, error_for_code

__all__ = [
    "CONSUMER_GROUP_HEARTBEAT",
    "FIND_COORDINATOR",
    "GROUP_VERSIONS",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "OFFSET_COMMIT",
    "OFFSET_FETCH",
    "SYNC_GROUP",
    "CoordinatorLink",
]

log = logging.getLogger("tidegate.client.consumer.group")

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
CONSUMER_GROUP_HEARTBEAT = 68  # KIP-848 (group.protocol=consumer)

# The versions this code reads and writes (kio's ranges, minus the KIP-848-era
# OffsetCommit/OffsetFetch v10 and the JoinGroup versions Kafka 4 removed).
GROUP_VERSIONS: dict[int, tuple[int, int]] = {
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (2, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
}


def pick_version(conn: BrokerConnection, api_key: int) -> int:
    lo, hi = GROUP_VERSIONS[api_key]
    theirs = conn.broker_versions.get(api_key)
    if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
        raise UnsupportedVersionError(
            f"broker {conn.host}:{conn.port} does not support API {api_key} at versions "
            f"{lo}-{hi} (it supports {theirs or 'none'}); is this a broker with consumer "
            "groups?")
    return min(hi, theirs[1])


class CoordinatorLink:
    """The group coordinator's address and connection; see the module docstring."""

    def __init__(self, config: ConsumerConfig, net: NetworkClient, group_id: str) -> None:
        self.config = config
        self.net = net
        self.group_id = group_id
        self.coordinator: BrokerInfo | None = None
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def known(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def mark_unknown(self, reason: str) -> None:
        if self.coordinator is not None:
            log.info("group %s: coordinator %s:%d unusable (%s); looking it up again",
                     self.group_id, self.coordinator.host, self.coordinator.port, reason)
        self.coordinator = None
        conn, self._conn = self._conn, None
        if conn is not None:
            task = asyncio.get_running_loop().create_task(conn.close())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def ensure(self, deadline: float) -> BrokerConnection:
        """A connection to the coordinator, looking it up if needed, retrying until
        the monotonic `deadline`; after it, a retriable COORDINATOR_NOT_AVAILABLE error
        naming the last failure."""
        if self._conn is not None and not self._conn.closed:
            return self._conn
        async with self._lock:
            last: KafkaError | None = None
            backoff = self.config.retry_backoff_ms / 1000
            while True:
                if self._closed:
                    raise KafkaConnectionError("the consumer is closed")
                if self._conn is not None and not self._conn.closed:
                    return self._conn
                try:
                    return await self._find_and_connect()
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
                    log.debug("group %s: coordinator lookup: %s", self.group_id, e)
                if time.monotonic() + backoff > deadline:
                    # Retriable: callers with their own deadlines try again.
                    raise KafkaError(
                        f"could not reach the coordinator of group {self.group_id!r} in "
                        f"time: {last}", code=ErrorCode.coordinator_not_available)
                await asyncio.sleep(backoff)

    async def _find_and_connect(self) -> BrokerConnection:
        conn = await self.net.any_connection()
        version = pick_version(conn, FIND_COORDINATOR)
        resp = await conn.request(FIND_COORDINATOR, {
            "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]},
            version=version)
        entry = resp.coordinators[0] if getattr(resp, "coordinators", None) else resp
        if entry.error_code != ErrorCode.none:
            raise error_for_code(entry.error_code.value,
                                 f"FindCoordinator for group {self.group_id!r}: "
                                 f"{entry.error_code.name.upper()}")
        info = BrokerInfo(int(entry.node_id), entry.host, int(entry.port))
        self._conn = await BrokerConnection.open(
            info.host, info.port, client_id=self.config.client_id,
            request_timeout_ms=self.config.request_timeout_ms,
            connect_timeout_ms=self.config.socket_connection_setup_timeout_ms,
            node_id=info.node_id, security=self.net.security)
        self.coordinator = info
        log.debug("group %s: coordinator is broker %d at %s:%d", self.group_id,
                  info.node_id, info.host, info.port)
        return self._conn

    async def request(self, api_key: int, data: Mapping[str, Any], *,
                      timeout_ms: int | None = None, deadline: float | None = None) -> Any:
        """Send to the coordinator (finding it first if needed, until `deadline`).
        Connection failures mark it unknown and are raised (retriable)."""
        conn = await self.ensure(deadline if deadline is not None
                                 else time.monotonic() + self.config.request_timeout_ms / 1000)
        try:
            return await conn.request(api_key, data, version=pick_version(conn, api_key),
                                      timeout_ms=timeout_ms)
        except KafkaConnectionError as e:
            self.mark_unknown(str(e))
            raise
        except KafkaError as e:
            if e.code in (ErrorCode.request_timed_out, ErrorCode.network_exception):
                self.mark_unknown(str(e))
            raise

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
