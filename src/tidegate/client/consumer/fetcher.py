"""The consumer's background fetcher: keeps one fetch in flight per broker.

A single task loops: reset positions that need it (ListOffsets, per
``auto.offset.reset`` or an explicit seek to beginning/end), then for every broker that
leads a fetchable partition (assigned, not paused, position known, nothing buffered)
and has no fetch outstanding, send a Fetch request in a task of its own. Results land
in `buffered` as `PartitionRecords`; errors that the application must see
(OFFSET_OUT_OF_RANGE with ``auto.offset.reset=none``, corrupt data, authorization)
are queued in `errors` for `poll()` to raise.

This is what prefetching means here: as soon as `poll()` takes a partition's last
buffered record, the loop is woken and fetches more while the application works.

One fetch covers all of a broker's fetchable partitions, and a broker has at most one
fetch outstanding (as in Kafka: a broker serves a connection's requests in order). A
fetch that could only long-poll (every partition in it caught up) is held back while
another partition of that broker is still being read from the buffer, for at most
``fetch.max.wait.ms``: otherwise a backlogged partition next to idle ones would be
fetched once per ``fetch.max.wait.ms`` (see `Fetcher._draining_nodes`).

``isolation.level`` is passed to the broker; control batches are always dropped, and
with read_committed so are the batches of aborted transactions (`aborted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.aborted import aborted_from_response
from tidegate.client.consumer.state import (
    EARLIEST,
    LATEST,
    Assignment,
    PartitionRecords,
    parse_partition_records,
)
from tidegate.client.errors import NoOffsetForPartitionError
from tidegate.client.metadata import REFRESH_ERRORS, ZERO_UUID, MetadataClient
from tidegate.client.offsets import list_offsets
from tidegate.client.types import TopicPartition
from tidegate.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    OffsetOutOfRangeError,
    error_for_code,
)

__all__ = ["Fetcher"]

log = logging.getLogger("tidegate.client.consumer")

FETCH = 1


class Fetcher:
    """See the module docstring."""

    def __init__(
        self, config: ConsumerConfig, metadata: MetadataClient, assignment: Assignment
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.assignment = assignment
        self.buffered: dict[TopicPartition, PartitionRecords] = {}
        self.errors: deque[BaseException] = deque()
        self.data_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._fetching: set[TopicPartition] = set()
        # node -> when a fetch to it was first held back (see `_draining_nodes`)
        self._deferred: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def wakeup(self) -> None:
        self._wake.set()

    def discard(self, tp: TopicPartition) -> None:
        """Forget buffered data of `tp` (after a seek or unassignment)."""
        self.buffered.pop(tp, None)

    async def close(self) -> None:
        # The flag, not only cancel(): on Python 3.11 `asyncio.wait_for` swallows a
        # cancellation that arrives together with the wake-up that a cancelled fetch
        # sends from its `finally`, and `_run` would then loop on forever.
        self._closing = True
        tasks = [t for t in (self._task, *self._in_flight.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t

    def _report(self, exc: BaseException) -> None:
        self.errors.append(exc)
        self.data_ready.set()

    async def _run(self) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while not self._closing:
            delay: float | None = None
            try:
                await self.reset_positions()
                delay = self._send_fetches()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                if not e.retriable:
                    self._report(e)
                log.debug("fetcher: %s", e)
                delay = backoff
            except Exception as e:  # a bug: surface it through poll() rather than hang
                log.exception("consumer fetcher crashed")
                self._report(e)
                delay = backoff
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()

    async def reset_positions(self) -> None:
        """Look up positions for partitions that have none."""
        need = self.assignment.needs_reset()
        if not need:
            return
        strategy = self.config.auto_offset_reset
        query: dict[TopicPartition, int] = {}
        for tp in need:
            st = self.assignment.partitions[tp]
            where = st.reset_to
            if where is None:
                if strategy == "none":
                    st.blocked = True
                    self._report(
                        NoOffsetForPartitionError(
                            f"{tp.topic}-{tp.partition} has no position and "
                            "auto.offset.reset=none; seek() to an offset or set "
                            "auto.offset.reset to earliest or latest"
                        )
                    )
                    continue
                where = EARLIEST if strategy == "earliest" else LATEST
            query[tp] = where
        if not query:
            return
        found = await list_offsets(
            self.metadata,
            query,
            isolation_level=self.config.isolation,
            timeout_ms=self.config.default_api_timeout_ms,
            retry_backoff_ms=self.config.retry_backoff_ms,
        )
        for tp, where in query.items():
            now = self.assignment.partitions.get(tp)
            # Skip partitions unassigned or seeked while we were asking.
            if now is None or now.position is not None or now.reset_to not in (None, where):
                continue
            value = found.get(tp)
            if value is not None:
                now.position = value.offset
                now.reset_to = None

    def _send_fetches(self) -> float | None:
        if self._closing:
            return None
        cache = self.metadata.cache
        by_node: dict[int, list[TopicPartition]] = {}
        missing_leader = False
        for tp in self.assignment.fetchable():
            if tp in self.buffered or tp in self._fetching:
                continue
            leader = cache.leader_for(tp)
            if leader is None:
                missing_leader = True
                continue
            by_node.setdefault(leader, []).append(tp)
        if missing_leader:
            cache.request_update()
        if cache.needs_update(self.metadata.now_ms()) and -1 not in self._in_flight:
            self.metadata.tracked |= {tp.topic for tp in self.assignment.partitions}
            self._in_flight[-1] = asyncio.get_running_loop().create_task(self._refresh())
        delay = self.config.retry_backoff_ms / 1000 if missing_leader else None
        draining = self._draining_nodes() if by_node else set()
        now = time.monotonic()
        for node, tps in by_node.items():
            if node in self._in_flight:
                continue
            if node in draining and all(self._caught_up(tp) for tp in tps):
                # See `_draining_nodes`: wait for the buffered partition instead of
                # parking this broker's connection in a long poll.
                since = self._deferred.setdefault(node, now)
                left = since + self.config.fetch_max_wait_ms / 1000 - now
                if left > 0:
                    delay = left if delay is None else min(delay, left)
                    continue
            self._deferred.pop(node, None)
            self._fetching.update(tps)
            task = asyncio.get_running_loop().create_task(self._fetch(node, tps))
            self._in_flight[node] = task
        return delay

    def _draining_nodes(self) -> set[int]:
        """Brokers leading a partition whose buffered records the application is still
        reading (not paused).

        A fetch for only caught-up partitions waits ``fetch.max.wait.ms`` in the broker,
        and while it does no other fetch goes to that broker: a partition with a backlog
        that is drained meanwhile would sit idle until the long poll ends (one fetch per
        ``fetch.max.wait.ms``). So such a fetch is held back until the buffered
        partition is drained, then all of the broker's partitions go in one request,
        which the backlog answers at once. The hold lasts at most
        ``fetch.max.wait.ms``, so new data in the caught-up partitions of a slowly read
        broker is still seen about as soon as a long poll would have brought it."""
        cache = self.metadata.cache
        partitions = self.assignment.partitions
        nodes: set[int] = set()
        for tp in self.buffered:
            st = partitions.get(tp)
            if st is not None and not st.paused:
                leader = cache.leader_for(tp)
                if leader is not None:
                    nodes.add(leader)
        return nodes

    def _caught_up(self, tp: TopicPartition) -> bool:
        """True if the last fetch said `tp` has nothing beyond its position (a fetch for
        it alone would wait in the broker). Unknown (never fetched) counts as not."""
        st = self.assignment.partitions[tp]
        end = st.high_watermark
        if self.config.isolation and st.last_stable_offset >= 0:
            end = st.last_stable_offset  # read_committed stops at the LSO
        return st.position is not None and 0 <= end <= st.position

    async def _refresh(self) -> None:
        try:
            await self.metadata.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._in_flight.pop(-1, None)
            self.wakeup()

    def _request(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[str, Any], dict[TopicPartition, int]]:
        cfg = self.config
        offsets: dict[TopicPartition, int] = {}
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in tps:
            pos = self.assignment.partitions[tp].position
            assert pos is not None
            offsets[tp] = pos
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": -1,
                    "fetch_offset": pos,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": cfg.max_partition_fetch_bytes,
                }
            )
        cache = self.metadata.cache
        data = {
            "replica_id": -1,
            "max_wait": cfg.fetch_max_wait_ms,
            "min_bytes": cfg.fetch_min_bytes,
            "max_bytes": cfg.fetch_max_bytes,
            "isolation_level": cfg.isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {"topic": t, "topic_id": cache.topic_id(t), "partitions": ps}
                for t, ps in topics.items()
            ],
            "forgotten_topics_data": [],
            "rack_id": cfg.client_rack,
        }
        return data, offsets

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        try:
            data, offsets = self._request(tps)
            timeout = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
            resp = await self.metadata.net.request(node, FETCH, data, timeout_ms=timeout)
            self._handle(resp, offsets)
        except KafkaError as e:
            log.debug("fetch from broker %d failed: %s", node, e)
            self.metadata.cache.request_update()
            if not e.retriable:
                self._report(e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._fetching.difference_update(tps)
            self._in_flight.pop(node, None)
            self.wakeup()

    def _handle(self, resp: Any, offsets: dict[TopicPartition, int]) -> None:
        code = getattr(resp, "error_code", ErrorCode.none)
        if code != ErrorCode.none:
            raise error_for_code(code.value, f"fetch failed: {code.name.upper()}")
        names = self.metadata.cache.names_by_id
        got_data = False
        for t in resp.responses:
            topic = getattr(t, "topic", None) or names.get(getattr(t, "topic_id", ZERO_UUID))
            if topic is None:
                continue
            for p in t.partitions:
                tp = TopicPartition(topic, int(p.partition_index))
                fetch_offset = offsets.get(tp)
                st = self.assignment.partitions.get(tp)
                if fetch_offset is None or st is None or st.position != fetch_offset:
                    continue  # unassigned or seeked meanwhile: the data is stale
                code = p.error_code
                if code == ErrorCode.none:
                    st.high_watermark = int(p.high_watermark)
                    st.last_stable_offset = int(getattr(p, "last_stable_offset", -1))
                    st.log_start_offset = int(getattr(p, "log_start_offset", -1))
                    try:
                        records = parse_partition_records(
                            tp, fetch_offset, p.records, self.config.check_crcs,
                            aborted_from_response(getattr(p, "aborted_transactions", None))
                            if self.config.isolation else None,
                        )
                    except (CorruptRecordError, InvalidRecordError) as e:
                        # As Kafka's consumer: raise from poll until the app seeks past.
                        st.blocked = True
                        self._report(
                            type(e)(
                                f"{tp.topic}-{tp.partition} at offset {fetch_offset}: {e}; "
                                "seek() past the bad record to continue"
                            )
                        )
                        continue
                    if records.next_offset > fetch_offset:
                        self.buffered[tp] = records
                        got_data = True
                elif code == ErrorCode.offset_out_of_range:
                    self._out_of_range(tp, fetch_offset)
                elif code in REFRESH_ERRORS:
                    self.metadata.cache.request_update()
                elif not code.retriable:
                    self._report(
                        error_for_code(
                            code.value, f"fetching {tp.topic}-{tp.partition}: {code.name.upper()}"
                        )
                    )
        if got_data:
            self.data_ready.set()

    def _out_of_range(self, tp: TopicPartition, offset: int) -> None:
        strategy = self.config.auto_offset_reset
        if strategy == "none":
            self._report(
                OffsetOutOfRangeError(
                    f"fetch offset {offset} is out of range for {tp.topic}-{tp.partition} and "
                    "auto.offset.reset=none; seek() to a valid offset"
                )
            )
            self.assignment.partitions[tp].blocked = True
            return
        log.info(
            "offset %d out of range for %s-%d; resetting to %s",
            offset,
            tp.topic,
            tp.partition,
            strategy,
        )
        self.assignment.request_reset(tp, EARLIEST if strategy == "earliest" else LATEST)
