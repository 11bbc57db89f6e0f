"""The consumer's background fetcher: keeps fetches in flight to every broker it reads.

A single task loops: reset positions that need it (ListOffsets, per
``auto.offset.reset`` or an explicit seek to beginning/end), then for every broker that
leads a fetchable partition (assigned, not paused, position known, room in its queue)
and has room for another fetch, send a Fetch request in a task of its own. Results land
in `buffered` as `PartitionRecords`; errors that the application must see
(OFFSET_OUT_OF_RANGE with ``auto.offset.reset=none``, corrupt data, authorization)
are queued in `errors` for `poll()` to raise (see `fetch_buffer`).

Fetching ahead (pipelining, as librdkafka does): a partition whose records from one
fetch are still waiting in `buffered` is fetched again from where that fetch ended,
and the answer waits in `_ahead` until `poll()` has read the first (`drained`). So the
broker serves the next fetch while the application reads the last one, instead of the
client idling for a round trip after each. At most one fetch per partition waits ahead,
and none is sent while the consumer holds ``queued.max.messages.kbytes`` of fetched
data or more (0 turns fetching ahead off): memory stays bounded by about two fetches
per partition. The blocking consumer's staged polls (`staging.StagedPolls`) count as
held: their fetches' bytes (`staged_bytes`) until the application takes them, and a
partition with staged records is fetched only as one fetched ahead.

What an answer does (which answers are stale, errors, fetched-ahead data) is
`fetch_buffer.FetchBuffer`, this class's base, which also holds the fetched data.

One fetch covers all of a broker's fetchable partitions. A broker has at most
`MAX_FETCHES_PER_BROKER` (2) fetches outstanding, for different partitions, and a
second only when both will be answered at once (a partition in each is not caught up):
a broker serves a connection's requests in order, so a fetch behind a long poll would
wait ``fetch.max.wait.ms`` (with ``queued.max.messages.kbytes=0`` it is one, as in
Kafka's consumer). A fetch that could only long-poll (every partition in it caught up)
is held back while another partition of that broker is still being read from the
buffer, for at most
``fetch.max.wait.ms``: otherwise a backlogged partition next to idle ones would be
fetched once per ``fetch.max.wait.ms`` (see `Fetcher._draining_nodes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.fetch_buffer import FetchBuffer, Sent
from tidegate.client.consumer.state import EARLIEST, LATEST, Assignment
from tidegate.client.errors import NoOffsetForPartitionError
from tidegate.client.metadata import MetadataClient
from tidegate.client.offsets import list_offsets
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError

__all__ = ["Fetcher"]

log = logging.getLogger("tidegate.client.consumer")

FETCH = 1

# Fetches in flight to one broker: a second one (for other partitions) is written while
# the broker still works on the first, so it never waits for a round trip in between.
MAX_FETCHES_PER_BROKER = 2


class Fetcher(FetchBuffer):
    """See the module docstring; the fetched data and answer handling are in the base
    class (`fetch_buffer.FetchBuffer`)."""

    def __init__(
        self, config: ConsumerConfig, metadata: MetadataClient, assignment: Assignment
    ) -> None:
        super().__init__(config, metadata, assignment)
        self._ahead_limit = config.queued_max_messages_kbytes * 1024
        # node -> its fetches in flight, each with whether the broker answers it at once
        # (`_eager`); at most MAX_FETCHES_PER_BROKER, see the module docstring
        self._in_flight: dict[int, list[tuple[asyncio.Task[None], bool]]] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._fetching: set[TopicPartition] = set()
        # node -> when a fetch to it was first held back (see `_draining_nodes`)
        self._deferred: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        # The flag, not only cancel(): on Python 3.11 `asyncio.wait_for` swallows a
        # cancellation that arrives together with the wake-up that a cancelled fetch
        # sends from its `finally`, and `_run` would then loop on forever.
        self._closing = True
        fetches = [t for running in self._in_flight.values() for t, _ in running]
        tasks = [t for t in (self._task, self._refreshing, *fetches) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t

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
                    self.report(e)
                log.debug("fetcher: %s", e)
                delay = backoff
            except Exception as e:  # a bug: surface it through poll() rather than hang
                log.exception("consumer fetcher crashed")
                self.report(e)
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
                    self._block(tp, NoOffsetForPartitionError(
                        f"{tp.topic}-{tp.partition} has no position and "
                        "auto.offset.reset=none; seek() to an offset or set "
                        "auto.offset.reset to earliest or latest"))
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
        room: bool | None = None  # below queued.max.messages.kbytes (computed lazily)
        for tp in self.assignment.fetchable():
            if tp in self._fetching or tp in self._ahead:
                continue
            # fetch ahead of the application? (records buffered, or staged: `held`)
            if tp in self.buffered or tp in self.assignment.held:
                if tp in self._no_ahead:
                    continue  # an error waits behind them (`FetchBuffer.released`)
                if room is None:
                    room = self._held_bytes() < self._ahead_limit
                if not room:
                    continue
            leader = cache.leader_for(tp)
            if leader is None:
                missing_leader = True
                continue
            by_node.setdefault(leader, []).append(tp)
        if missing_leader:
            cache.request_update()
        if cache.needs_update(self.metadata.now_ms()) and self._refreshing is None:
            self.metadata.tracked |= {tp.topic for tp in self.assignment.partitions}
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())
        delay = self.config.retry_backoff_ms / 1000 if missing_leader else None
        draining = self._draining_nodes() if by_node else set()
        now = time.monotonic()
        for node, tps in by_node.items():
            eager = not all(self._caught_up(tp) for tp in tps)
            running = self._in_flight.get(node)
            if running:
                # A second fetch queues behind the first in the broker: only when both
                # are answered at once (never behind, nor as, a long poll).
                if len(running) >= MAX_FETCHES_PER_BROKER or not self._ahead_limit or \
                        not eager or not all(e for _, e in running):
                    continue
            elif node in draining and not eager:
                # See `_draining_nodes`: wait for the buffered partition instead of
                # parking this broker's connection in a long poll.
                since = self._deferred.setdefault(node, now)
                left = since + self.config.fetch_max_wait_ms / 1000 - now
                if left > 0:
                    delay = left if delay is None else min(delay, left)
                    continue
            self._deferred.pop(node, None)
            parts = self._split(tps) if eager and not running and self._ahead_limit else [tps]
            for part in parts:
                # The offsets are taken now, not when the task first runs: by then the
                # application may have unassigned or reset a partition of it.
                request = self._request(part)
                self._fetching.update(part)
                task = asyncio.get_running_loop().create_task(
                    self._fetch(node, part, request))
                self._in_flight.setdefault(node, []).append((task, eager))
        return delay

    def _split(self, tps: list[TopicPartition]) -> list[list[TopicPartition]]:
        """A broker's partitions as two fetches, each with a partition not caught up
        (so both are answered at once), if they make two: while the client reads one
        answer, the broker already works on the other, and from then on each answer's
        fetch ahead goes out while the other is in flight. Else as one fetch."""
        if len(tps) < 2:
            return [tps]
        ready = [tp for tp in tps if not self._caught_up(tp)]
        if len(ready) < 2:
            return [tps]
        waiting = set(ready)
        rest = [tp for tp in tps if tp not in waiting]
        first, second = ready[0::2], ready[1::2]
        return [first + rest, second]

    def _held_bytes(self) -> int:
        return sum(pr.nbytes for pr in self.buffered.values()) + \
            sum(pr.nbytes for pr in self._ahead.values()) + self.staged_bytes

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
        """True if the last fetch said `tp` has nothing beyond where its next fetch
        starts (a fetch for it alone would wait in the broker). Unknown (never fetched)
        counts as not."""
        st = self.assignment.partitions[tp]
        end = st.high_watermark
        if self.config.isolation and st.last_stable_offset >= 0:
            end = st.last_stable_offset  # read_committed stops at the LSO
        start = self._fetch_offset(tp, st)
        return start is not None and 0 <= end <= start

    async def _refresh(self) -> None:
        try:
            await self.metadata.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._refreshing = None
            self.wakeup()

    def _request(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[str, Any], dict[TopicPartition, Sent]]:
        cfg = self.config
        offsets: dict[TopicPartition, Sent] = {}
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in tps:
            st = self.assignment.partitions[tp]
            pos = self._fetch_offset(tp, st)
            assert pos is not None
            offsets[tp] = (pos, st, st.epoch)
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

    async def _fetch(
        self, node: int, tps: list[TopicPartition],
        request: tuple[dict[str, Any], dict[TopicPartition, Sent]],
    ) -> None:
        try:
            data, offsets = request
            timeout = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
            resp = await self.metadata.net.request(node, FETCH, data, timeout_ms=timeout)
            self._handle(resp, offsets)
        except KafkaError as e:
            log.debug("fetch from broker %d failed: %s", node, e)
            self.metadata.cache.request_update()
            if not e.retriable:
                self.report(e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._fetching.difference_update(tps)
            me = asyncio.current_task()
            running = [r for r in self._in_flight.get(node, ()) if r[0] is not me]
            if running:
                self._in_flight[node] = running
            else:
                self._in_flight.pop(node, None)
            self.wakeup()
