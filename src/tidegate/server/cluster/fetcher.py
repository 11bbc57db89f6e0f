"""Replica fetchers: followers copy their leaders' logs with Fetch, as Kafka's do.

One `ReplicaFetcher` task per leader broker this broker follows partitions of
(`num.replica.fetchers` = 1 connection per leader). Each round sends one Fetch (v12,
`replica_id` = this broker) for its partitions, each at the follower's log end with
its `current_leader_epoch` and `last_fetched_epoch`, and waits up to
`replica.fetch.wait.max.ms` at the leader for new data. The fetch is incremental
(KIP-227, protocol/incremental_fetch.py): after the first round of a session it lists
only the partitions whose position or epochs moved, and the leader answers only the
partitions with records or a moved high watermark or log start, so a round costs what
changed, not the number of partitions followed. For each partition answered:

- records: appended with `Log.append_as_follower` (the leader's bytes, offsets and
  epochs kept; producer state and transactions rebuilt as the leader's), then made
  durable (group commit; every partition of one answer fsynced side by side) *before*
  the next fetch reports the new position, so the leader's high watermark only counts
  fsynced data when every write is fsynced;
- the leader's high watermark and log start, capped by what the follower holds;
- a diverging epoch (KIP-595-style fetch truncation, Kafka 2.7+): the follower
  truncates to where its log and the leader's agree (`replication.follower`) and
  fetches again from there: no divergent record survives;
- OFFSET_OUT_OF_RANGE: the follower asks the leader its log end and log start
  (ListOffsets latest and earliest with `replica_id`, as Kafka's fetcher does) and
  truncates to the leader's end, or empties its log and restarts at the leader's log
  start when retention removed what it missed (`replication.follower`);
- NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH /
  UNKNOWN_TOPIC_OR_PARTITION: the partition waits `replica.fetch.backoff.ms` (the
  metadata watcher will move it to the right leader); a connection failure backs the
  whole fetcher off as long.

Partitions come and go with `on_role_change` (the replica manager's hook). A fetch
answer for a partition whose leader epoch changed meanwhile is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.protocol.incremental_fetch import FetchSessionHandler
from tidegate.protocol.messages import build, request_class
from tidegate.replication.follower import (
    follower_high_watermark,
    out_of_range_action,
    truncation_offset,
)
from tidegate.server.cluster.inter_broker import InterBrokerConnection, InterBrokerError
from tidegate.server.cluster.metadata import ClusterMetadata
from tidegate.server.partition import Partition
from tidegate.server.replica_manager import ReplicaManager

__all__ = ["ReplicaFetcherManager"]

log = logging.getLogger(__name__)

FETCH_KEY, FETCH_VERSION = 1, 12
LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION = 2, 7
LATEST, EARLIEST = -1, -2
_RETRY_LATER = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
    ErrorCode.kafka_storage_error,
}
_SESSION_ERRORS = {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}


class ReplicaFetcherManager:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager,
                 metadata: ClusterMetadata) -> None:
        self.config = config
        self.node_id = config.node_id
        self.replicas = replicas
        self.metadata = metadata
        self.listener = config.get("inter.broker.listener.name") or \
            config.advertised_listeners()[0].name
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def on_role_change(self, part: Partition) -> None:
        for f in self.fetchers.values():
            f.remove(part)
        if (not part.is_leader and part.leader_id >= 0 and part.leader_id != self.node_id
                and self.replicas.partition(part.topic, part.index) is part):
            fetcher = self.fetchers.get(part.leader_id)
            if fetcher is None:
                fetcher = self.fetchers[part.leader_id] = ReplicaFetcher(self, part.leader_id)
                fetcher.start()
            fetcher.add(part)

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        info = self.metadata.brokers_info.get(broker_id)
        if info is None:
            return None
        ep = info.endpoint(self.listener) or (info.endpoints[0] if info.endpoints else None)
        return None if ep is None else (ep.host, ep.port)

    async def stop(self) -> None:
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self.m = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._delayed: dict[tuple[str, int], float] = {}  # tp -> loop time to retry at
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: InterBrokerConnection | None = None
        cfg = manager.config
        self.wait_ms = cfg.get_int("replica.fetch.wait.max.ms", 500) or 500
        self.max_bytes = cfg.get_int("replica.fetch.max.bytes", 1048576) or 1048576
        self.response_max = cfg.get_int("replica.fetch.response.max.bytes", 10485760) or 10485760
        self.backoff = (cfg.get_int("replica.fetch.backoff.ms", 1000) or 1000) / 1000
        self.session: FetchSessionHandler[tuple[str, int]] = FetchSessionHandler()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def add(self, part: Partition) -> None:
        self.partitions[part.tp] = part
        self._delayed.pop(part.tp, None)
        self._changed.set()

    def remove(self, part: Partition) -> None:
        if self.partitions.get(part.tp) is part:
            del self.partitions[part.tp]
            self._delayed.pop(part.tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            await self._conn.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ready = [p for tp, p in self.partitions.items() if self._delayed.get(tp, 0) <= now]
            if not ready:
                self._changed.clear()
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
                # cancel that stops this fetcher (stop() would then wait forever)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.backoff):
                        await self._changed.wait()
                continue
            try:
                await self._round(ready)
            except InterBrokerError as e:
                log.info("replica fetcher for leader %d: %s; retrying in %.1f s",
                         self.leader_id, e, self.backoff)
                await asyncio.sleep(self.backoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for leader %d failed; retrying", self.leader_id)
                await asyncio.sleep(self.backoff)

    def _connection(self) -> InterBrokerConnection:
        ep = self.m.endpoint(self.leader_id)
        if ep is None:
            raise InterBrokerError(f"broker {self.leader_id} is not registered")
        conn = self._conn
        if conn is None or (conn.host, conn.port) != ep:
            self.session = FetchSessionHandler()  # another broker: no session there
            conn = self._conn = InterBrokerConnection(
                ep[0], ep[1], f"broker-{self.m.node_id}-fetcher-{self.leader_id}")
        return conn

    async def _round(self, parts: list[Partition]) -> None:
        conn = self._connection()
        epochs = {p.tp: p.leader_epoch for p in parts}
        wanted: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
        for p in parts:
            lg = p.log
            latest = lg.latest_epoch
            wanted[p.tp] = (p.leader_epoch, lg.log_end_offset,
                            -1 if latest is None else latest, lg.log_start_offset,
                            self.max_bytes)
        # KIP-227: after the first round only what changed is listed (and answered)
        nxt = self.session.next_request(wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in nxt.send:
            leader_epoch, fetch_offset, last_epoch, log_start, max_bytes = wanted[tp]
            by_topic.setdefault(tp[0], []).append({
                "partition": tp[1],
                "current_leader_epoch": leader_epoch,
                "fetch_offset": fetch_offset,
                "last_fetched_epoch": last_epoch,
                "log_start_offset": log_start,
                "partition_max_bytes": max_bytes,
            })
        forgotten: dict[str, list[int]] = {}
        for tp in nxt.forgotten:
            forgotten.setdefault(tp[0], []).append(tp[1])
        req = build(request_class(FETCH_KEY, FETCH_VERSION), {
            "cluster_id": None,
            "replica_id": self.m.node_id,
            "max_wait": self.wait_ms,
            "min_bytes": 1,
            "max_bytes": self.response_max,
            "isolation_level": 0,
            "session_id": nxt.session_id,
            "session_epoch": nxt.epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                      for t, ps in forgotten.items()],
            "rack_id": "",
        })
        try:
            resp = await conn.request(FETCH_KEY, FETCH_VERSION, req,
                                      timeout=self.wait_ms / 1000 + 30)
        except BaseException:
            self.session.on_failure()
            raise
        self.session.on_response(int(resp.error_code), int(resp.session_id))
        if resp.error_code in _SESSION_ERRORS:
            log.info("replica fetcher for leader %d: fetch session %d: %s; opening a new one",
                     self.leader_id, nxt.session_id, ErrorCode(resp.error_code).name)
            return
        if resp.error_code != ErrorCode.none:
            raise InterBrokerError(f"fetch failed: {ErrorCode(resp.error_code).name}")
        # Append every partition's records first, then wait for their fsyncs together:
        # one after another, a response carrying k partitions (a transaction's data,
        # its coordinator's record, markers) waited k fsyncs in turn before the next
        # fetch could report the new positions and move the leaders' high watermarks.
        appended: list[tuple[Partition, Any]] = []
        for topic in resp.responses:
            for pd in topic.partitions:
                tp = (str(topic.topic), int(pd.partition_index))
                part = self.partitions.get(tp)
                if part is None or part.leader_epoch != epochs.get(tp) or part.is_leader:
                    continue  # moved while we fetched: the answer is stale
                if await self._apply(part, pd):
                    appended.append((part, pd))
        if not appended:
            return
        replicas = self.m.replicas
        done = await asyncio.gather(
            *(replicas.wait_local_durable(p.log, p.log.log_end_offset) for p, _ in appended),
            return_exceptions=True)
        for (part, pd), result in zip(appended, done, strict=True):
            if isinstance(result, BaseException):
                # a failed fsync fails the round, as before: the fetcher backs off and
                # the group commit reports it and flushes again later
                raise result
            if self.partitions.get(part.tp) is part and part.leader_epoch == epochs[part.tp] \
                    and not part.is_leader:
                self._follow_high_watermark(part, pd)

    async def _apply(self, part: Partition, pd: Any) -> bool:
        """One partition of a fetch answer; True when its records were appended (the
        caller makes them durable, then `_follow_high_watermark`)."""
        lg = part.log
        code = ErrorCode(pd.error_code)
        if code in _RETRY_LATER:
            log.debug("%s-%d: leader %d answered %s", part.topic, part.index,
                      self.leader_id, code.name)
            self._delayed[part.tp] = asyncio.get_running_loop().time() + self.backoff
            return False
        if code == ErrorCode.offset_out_of_range:
            await self._out_of_range(part)
            return False
        if code != ErrorCode.none:
            log.warning("%s-%d: fetch from leader %d failed: %s", part.topic, part.index,
                        self.leader_id, code.name)
            self._delayed[part.tp] = asyncio.get_running_loop().time() + self.backoff
            return False
        div = pd.diverging_epoch
        if div is not None and (int(div.epoch) >= 0 or int(div.end_offset) >= 0):
            point = truncation_offset(lg.leader_epoch_cache, lg.log_end_offset, int(div.epoch),
                                      int(div.end_offset), high_watermark=lg.high_watermark)
            if point.offset < lg.log_end_offset:
                log.warning("%s-%d: diverged from leader %d (its epoch %d ends at %d); "
                            "truncating from %d to %d", part.topic, part.index,
                            self.leader_id, div.epoch, div.end_offset, lg.log_end_offset,
                            point.offset)
            if point.offset <= lg.log_end_offset:
                # at the log end too: an epoch this replica led without writing (and the
                # leader never had) must leave its epoch cache, or every fetch diverges
                await asyncio.get_running_loop().run_in_executor(
                    None, lg.truncate_to, point.offset)
            return False
        records = pd.records
        if records:
            lg.append_as_follower(bytes(records))
            return True
        self._follow_high_watermark(part, pd)
        return False

    def _follow_high_watermark(self, part: Partition, pd: Any) -> None:
        """The leader's high watermark and log start, capped by what this replica holds
        (its records already durable here)."""
        lg = part.log
        hw = follower_high_watermark(int(pd.high_watermark), lg.log_end_offset,
                                     lg.log_start_offset)
        lg.maybe_increment_log_start_as_follower(int(pd.log_start_offset))
        lg.set_high_watermark_as_follower(hw)
        self.m.replicas.notify(part.tp)

    async def _out_of_range(self, part: Partition) -> None:
        """The follower's log end is outside the leader's log: ask the leader for its
        log end and start, then truncate or restart the log (replication.follower)."""
        epoch = part.leader_epoch
        end = await self._leader_offset(part, LATEST)
        start = await self._leader_offset(part, EARLIEST) if end is not None else None
        if end is None or start is None:
            self._delayed[part.tp] = asyncio.get_running_loop().time() + self.backoff
            return
        if self.partitions.get(part.tp) is not part or part.leader_epoch != epoch \
                or part.is_leader:
            return  # moved while we asked: the answer is stale
        lg = part.log
        action = out_of_range_action(lg.log_end_offset, start, end)
        loop = asyncio.get_running_loop()
        if action.truncate_to is not None:
            log.warning("%s-%d: log end %d is past leader %d's log end %d; truncating to it",
                        part.topic, part.index, lg.log_end_offset, self.leader_id, end)
            await loop.run_in_executor(None, lg.truncate_to, action.truncate_to)
        elif action.start_at is not None:
            log.warning("%s-%d: log end %d is below leader %d's log start %d (deleted while "
                        "this replica was away); restarting the log there", part.topic,
                        part.index, lg.log_end_offset, self.leader_id, start)
            await loop.run_in_executor(None, lg.truncate_fully_and_start_at, action.start_at)
        self.m.replicas.notify(part.tp)

    async def _leader_offset(self, part: Partition, timestamp: int) -> int | None:
        """ListOffsets to the leader as this replica (latest = its log end); None if
        the leader refused (the partition then backs off)."""
        req = build(request_class(LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION), {
            "replica_id": self.m.node_id,
            "isolation_level": 0,
            "topics": [{"name": part.topic, "partitions": [{
                "partition_index": part.index,
                "current_leader_epoch": part.leader_epoch,
                "timestamp": timestamp,
            }]}],
        })
        resp = await self._connection().request(LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION, req)
        for topic in resp.topics:
            for pd in topic.partitions:
                if int(pd.partition_index) != part.index:
                    continue
                if pd.error_code != ErrorCode.none or int(pd.offset) < 0:
                    log.info("%s-%d: leader %d answered ListOffsets with %s", part.topic,
                             part.index, self.leader_id, ErrorCode(pd.error_code).name)
                    return None
                return int(pd.offset)
        return None
