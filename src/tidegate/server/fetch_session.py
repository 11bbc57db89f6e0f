"""Fetch sessions (KIP-227): the broker remembers what a fetcher asks for, so that
each fetch lists only what changed and each answer only what is new.

A fetcher (a follower broker, the Java client, ...) opens a session with a full fetch at
epoch 0 and gets a session id back; then each request carries the id and the next epoch
and lists only the partitions it adds or whose fetch position, limits or epochs changed,
plus the ones it forgets. The broker keeps the session's partitions (in order) with the
fetch state last asked and the high watermark, last stable offset and log start last
answered, and answers an incremental fetch with only the partitions that have records,
an error, or one of those three offsets moved. With hundreds of partitions per follower
and a few changing per round, this is most of a replication round's CPU.

Requests, by (session id, epoch) as in Kafka's `FetchSession`/`FetchManager`:

| id   | epoch | meaning                                                        |
|------|-------|----------------------------------------------------------------|
| 0    | -1    | sessionless full fetch (librdkafka, aiokafka, old clients)      |
| id   | -1    | close session `id`; this fetch is sessionless and full          |
| 0    | 0     | full fetch opening a new session (id 0 back: no slot free)      |
| id   | 0     | close session `id` and open a new one                           |
| id   | n > 0 | incremental fetch: FETCH_SESSION_ID_NOT_FOUND if `id` is not    |
|      |       | cached, INVALID_FETCH_SESSION_EPOCH unless n is its next epoch   |
| 0    | n > 0 | INVALID_FETCH_SESSION_EPOCH                                     |

Cache: `max.incremental.fetch.session.cache.slots` sessions (Kafka's 1000). A new
session takes a free slot, else the least recently used session idle for longer than
`min.incremental.fetch.session.eviction.ms` (Kafka's 120 s), else none is created (the
fetcher goes on with full fetches). Partitions of an incremental answer that returned
records move to the end of the session's order, so a response-size limit cannot starve
the later ones (Kafka does the same).

Sans-IO: time comes from the caller (`now_ms`); ids from an injected random source.
The handler (server/handlers/fetch.py) reads the partitions and asks `sent` which ones an
answer carries. One instance per broker, used only from the event loop.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tidegate.common.errors import ErrorCode, KafkaError

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "PartitionState",
]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# (topic, partition): the topic is its name (Fetch v12 and older) or its id as text (v13+)
PartitionKey = tuple[str, int]


@dataclass(slots=True)
class PartitionState:
    """What the fetcher last asked for one partition, and what it was last told."""

    topic: str  # the name, or "" when the fetcher names topics by id
    topic_id: object  # uuid.UUID, or None before v13
    index: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    # last answered (-2: never answered, so the first answer carries the partition)
    high_watermark: int = -2
    last_stable_offset: int = -2
    answered_log_start: int = -2

    def update_from(self, other: PartitionState) -> None:
        self.fetch_offset = other.fetch_offset
        self.partition_max_bytes = other.partition_max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch
        self.log_start_offset = other.log_start_offset


@dataclass
class FetchSession:
    session_id: int
    privileged: bool  # a follower's (Kafka keeps those over consumers')
    epoch: int = 1  # the epoch the next incremental request must carry
    last_used_ms: int = 0
    partitions: OrderedDict[PartitionKey, PartitionState] = field(default_factory=OrderedDict)

    def apply(self, updates: Iterable[tuple[PartitionKey, PartitionState]],
              forgotten: Iterable[PartitionKey]) -> None:
        for key in forgotten:
            self.partitions.pop(key, None)
        for key, state in updates:
            held = self.partitions.get(key)
            if held is None:
                self.partitions[key] = state
            else:
                held.update_from(state)

    def sent(self, key: PartitionKey, *, high_watermark: int, last_stable_offset: int,
             log_start_offset: int, has_records: bool, has_error: bool,
             incremental: bool) -> bool:
        """Whether an answer carries this partition; notes what it tells the fetcher."""
        state = self.partitions.get(key)
        if state is None:
            return True
        changed = (state.high_watermark != high_watermark
                   or state.last_stable_offset != last_stable_offset
                   or state.answered_log_start != log_start_offset)
        state.high_watermark = high_watermark
        state.last_stable_offset = last_stable_offset
        state.answered_log_start = log_start_offset
        if incremental and has_records:
            self.partitions.move_to_end(key)  # fairness under the response size limit
        return not incremental or has_records or has_error or changed


class FetchSessionCache:
    """The broker's sessions (module docstring)."""

    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000,
                 rng: Callable[[int, int], int] | None = None) -> None:
        self.max_slots = max(0, max_slots)
        self.eviction_ms = eviction_ms
        self._rng = rng or random.SystemRandom().randint
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # LRU order
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def get(self, session_id: int, epoch: int, now_ms: int) -> FetchSession:
        """The session an incremental fetch (`epoch` > 0) continues; Kafka's errors."""
        if session_id == 0:
            raise KafkaError("an incremental fetch needs a session id",
                             code=ErrorCode.invalid_fetch_session_epoch)
        session = self._sessions.get(session_id)
        if session is None:
            raise KafkaError(f"fetch session {session_id} is not in the cache",
                             code=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            raise KafkaError(f"fetch session {session_id} expects epoch {session.epoch}, "
                             f"got {epoch}", code=ErrorCode.invalid_fetch_session_epoch)
        session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        return session

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def open(self, privileged: bool, now_ms: int) -> FetchSession | None:
        """A new session, or None when no slot is free (the fetch stays sessionless)."""
        if self.max_slots <= 0:
            return None
        if len(self._sessions) >= self.max_slots and not self._evict(privileged, now_ms):
            return None
        while True:
            session_id = self._rng(1, 2**31 - 1)
            if session_id not in self._sessions:
                break
        session = FetchSession(session_id, privileged, last_used_ms=now_ms)
        self._sessions[session_id] = session
        return session

    def _evict(self, privileged: bool, now_ms: int) -> bool:
        """Free one slot: the least recently used stale session; for a follower, else the
        least recently used consumer's session."""
        victim = next((s for s in self._sessions.values()
                       if now_ms - s.last_used_ms > self.eviction_ms), None)
        if victim is None and privileged:
            victim = next((s for s in self._sessions.values() if not s.privileged), None)
        if victim is None:
            return False
        del self._sessions[victim.session_id]
        self.evictions += 1
        return True
