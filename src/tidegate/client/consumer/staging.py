"""`StagedPolls`: the blocking consumer's next poll, drained ahead on its loop thread.

The blocking `sync.Consumer` runs `AsyncConsumer` on a private loop thread, and a poll
that goes there and back costs two thread wake-ups (the loop's epoll and self-pipe,
the caller's futex), 50-120 us of CPU per poll. So after each poll, and when a fetch
brings data, the loop drains the next polls' records from the fetch buffer ahead
(`stage`, up to `MAX_STAGED` polls), and the application's next poll of the same
kind and ``max_records`` takes the first of them on its own thread (`take`), only
posting a note to the loop to stage again.

Correctness rests on these rules:
- Draining moves the loop's positions, as a poll does (so the fetcher goes on from
  there), but the positions before it are kept in `Assignment.held` until the
  application takes that poll: commits (explicit, auto-commit, on revocation, on close)
  and `position()` use `Assignment.consumed`, so only records handed to the
  application count. Errors of fetches behind held records wait as for a fetch ahead
  (`FetchBuffer.released`).
- A staged poll records each drained partition's `PartitionState` and epoch. `take`
  refuses it (the poll then goes to the loop) if one of them was unassigned,
  sought, reset or paused since, if an error waits for the application, if the
  group has work (its wake-up is set), once timed group work is due (the
  auto-commit, a topic scan: they run only in a poll on the loop, so they run on
  time), or if the loop has not run a poll's group work for `GROUP_WORK_S` (the
  checks every poll makes, such as a partition count changed in the metadata);
  `take` tells the group the application polled (`polled`, for
  ``max.poll.interval.ms``).
- A poll on the loop (`poll`) runs the group work first, then hands over the next
  staged poll if it is still valid; else `unstage` drops them all and puts the
  partitions' positions back where the application is, as a seek would (their
  buffered data is fetched again). The facade calls `unstage` before every
  operation that changes what the next poll returns (seek, pause, assign,
  unsubscribe, use_columns).
- Memory: a staged poll that drained a fetch to its end carries that fetch's bytes
  (`FetchBuffer.drained_bytes`) in `FetchBuffer.staged_bytes` until the application
  has it (`_release_taken`, or handed over / dropped on the loop), so the fetcher's
  ``queued.max.messages.kbytes`` budget covers staged records too; a partition with
  staged records (`held`) is fetched again only as a fetch ahead (within the budget).
- The staged polls and `held` change under a lock (once per poll, never per
  record), so a `take` and an `unstage` never both get one.

Only the blocking facade uses this: its `AsyncConsumer` is private to it, so nothing
else polls the same consumer. Of the consumer it uses only the staging interface
(`staging_host.StagingHost`, `AsyncConsumer.drainer` and `AsyncConsumer.poll_with`);
of the fetcher its data (`buffered`, `errors`) and the hooks made for staging
(`released`, `on_data`, `staged_bytes`, `drained_bytes`, `discard`, `wakeup`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass

from tidegate.client.consumer.consumer import AsyncConsumer, PollResult
from tidegate.client.consumer.fetcher import Fetcher
from tidegate.client.consumer.state import PartitionState
from tidegate.client.types import TopicPartition

__all__ = ["GROUP_WORK_S", "StagedPolls"]

# A staged poll is taken on the application's thread for at most this long after the
# loop last ran a poll's group work (auto-commit, topic scans happen there).
GROUP_WORK_S = 0.1
# Polls staged ahead at most: the application takes several before the loop stages
# again (the loop waits for the GIL, which a busy application thread keeps for up to
# the switch interval, 5 ms): 4 left a quarter of the polls to the loop at 100 B, 8
# an eighth. Memory: the staged polls count against ``queued.max.messages.kbytes``
# (`FetchBuffer.staged_bytes`: each fetch's bytes until its last records are taken).
MAX_STAGED = 8


@dataclass(slots=True)
class _Staged:
    kind: str  # "poll", "batches" or "columns" (`AsyncConsumer.drainer`)
    limit: int
    out: PollResult
    marks: tuple[tuple[TopicPartition, PartitionState, int], ...]  # (tp, state, epoch)
    # `Assignment.held` once this poll is taken: each partition's start in the first
    # later staged poll that has it
    held_after: dict[TopicPartition, int]
    # bytes of the fetches whose last records this poll holds (`FetchBuffer.staged_bytes`)
    nbytes: int = 0


class StagedPolls:
    """See the module docstring; `take` runs on the application's thread, the rest on
    the loop thread."""

    def __init__(self, consumer: AsyncConsumer, loop: asyncio.AbstractEventLoop) -> None:
        self._c = consumer
        self._assignment = consumer.staging_assignment
        self._loop = loop
        self._lock = threading.Lock()  # guards the next four
        self._staged: deque[_Staged] = deque()
        self._taken: list[_Staged] = []  # taken on the application's thread, not yet seen
        self._notified = False  # `_on_taken` is scheduled
        # until when a staged poll may be taken without the group work of a poll on
        # the loop: GROUP_WORK_S after the last, or the group's timed work if sooner
        self._take_until = 0.0
        self._last: tuple[str, int] | None = None  # the last poll's kind and limit
        self.closed = False

    def _valid(self, st: _Staged, kind: str, limit: int) -> bool:
        if st.kind != kind or st.limit != limit:
            return False
        parts = self._assignment.partitions
        for tp, ps, epoch in st.marks:
            if parts.get(tp) is not ps or ps.epoch != epoch or ps.paused:
                return False
        return True

    # -- the application's thread ------------------------------------------------------

    def take(self, kind: str, limit: int) -> PollResult | None:
        """The next staged poll if it may be handed out now, else None (poll on the
        loop)."""
        c = self._c
        fetcher = c.staging_fetcher()
        if (not self._staged or self.closed or fetcher is None or fetcher.errors
                or self._assignment.errors):  # a stopped partition raises on the loop
            return None
        if c.in_group and (c.group_work_waits() or
                           time.monotonic() > self._take_until):
            return None
        with self._lock:
            if not self._staged or not self._valid(self._staged[0], kind, limit):
                return None
            st = self._staged.popleft()
            self._assignment.held = st.held_after
            self._taken.append(st)
            # the loop is woken when half the staged polls are gone, not for each
            notify = not self._notified and len(self._staged) <= MAX_STAGED // 2
            self._notified |= notify
        c.group_polled()
        if notify:
            self._loop.call_soon_threadsafe(self._on_taken)
        return st.out

    # -- the loop thread ---------------------------------------------------------------

    async def poll(self, kind: str, timeout_ms: int, limit: int) -> PollResult:
        """A poll on the loop: `AsyncConsumer`'s, handing over the next staged poll if
        it is still valid after the group work; then polls are staged again."""
        c = self._c
        normal = c.drainer(kind, limit)
        self._last = (kind, limit)
        fetcher = c.started_fetcher()
        if fetcher.on_data is None:  # stage as soon as data arrives, too
            fetcher.on_data = self._on_data

        def drain(fetcher: Fetcher) -> PollResult:
            self._take_until = min(time.monotonic() + GROUP_WORK_S,
                                   c.group_timed_work_at())
            self._release_taken()
            with self._lock:
                st = self._staged.popleft() if self._staged and \
                    self._valid(self._staged[0], kind, limit) else None
                if st is not None:
                    self._assignment.held = st.held_after
            if st is not None:
                fetcher.staged_bytes -= st.nbytes
                fetcher.released(tp for tp, _, _ in st.marks)
                return st.out
            self.unstage()
            return normal(fetcher)

        out: PollResult = await c.poll_with(timeout_ms, drain)  # type: ignore[type-var]
        if out:  # staged once the application has its answer (two turns of the loop)
            self._loop.call_soon(self._loop.call_soon, self.stage, kind, limit)
        return out

    def _on_data(self) -> None:
        if self._last is not None:
            self.stage(*self._last)

    def _release_taken(self) -> list[_Staged]:
        """Tell the fetcher which held records the application took since last time."""
        with self._lock:
            taken, self._taken = self._taken, []
            self._notified = False
        fetcher = self._c.staging_fetcher()
        if fetcher is not None and taken:
            fetcher.staged_bytes -= sum(st.nbytes for st in taken)
            fetcher.released(tp for st in taken for tp, _, _ in st.marks)
        return taken

    def _on_taken(self) -> None:
        taken = self._release_taken()
        if taken:
            self.stage(taken[-1].kind, taken[-1].limit)

    def stage(self, kind: str, limit: int) -> None:
        """Drain polls ahead (up to `MAX_STAGED`), if there is data and nothing in the
        way."""
        c = self._c
        fetcher = c.staging_fetcher()
        while len(self._staged) < MAX_STAGED:
            if self.closed or fetcher is None or fetcher.errors or self._assignment.errors \
                    or not fetcher.buffered \
                    or c.group_work_waits() or (kind == "columns") != c.reads_columns:
                return
            if self._staged and (self._staged[-1].kind, self._staged[-1].limit) != (kind, limit):
                return
            try:
                parts = self._assignment.partitions
                before = {tp: (parts[tp], parts[tp].position) for tp in fetcher.buffered
                          if tp in parts}
                fetcher.drained_bytes = 0
                out = c.drainer(kind, limit)(fetcher)
            except Exception as e:  # a bug: surface it through poll() rather than lose it
                fetcher.report(e)
                return
            if not out:  # positions moved past control or aborted batches only, as a
                return   # poll's drain moves them
            starts: dict[TopicPartition, int] = {}
            marks: list[tuple[TopicPartition, PartitionState, int]] = []
            for tp, (ps, position) in before.items():
                if ps.position != position and position is not None:
                    starts[tp] = position
                    marks.append((tp, ps, ps.epoch))
            with self._lock:
                for st in self._staged:  # earlier staged polls hold their starts first
                    st.held_after = _merged(st.held_after, starts)
                self._assignment.held = _merged(self._assignment.held, starts)
                self._staged.append(_Staged(kind, limit, out, tuple(marks), {},
                                            fetcher.drained_bytes))
            fetcher.staged_bytes += fetcher.drained_bytes

    def unstage(self) -> None:
        """Give up the staged polls: each of their partitions still as staged goes back
        to where the application is (its fetched data is dropped and fetched again)."""
        with self._lock:
            staged, self._staged = self._staged, deque()
            held = self._assignment.held
            self._assignment.held = {}
        if not staged:
            return
        fetcher = self._c.staging_fetcher()
        if fetcher is not None:
            fetcher.staged_bytes -= sum(st.nbytes for st in staged)
        parts = self._assignment.partitions
        marks = {tp: (ps, epoch) for st in reversed(staged) for tp, ps, epoch in st.marks}
        for tp, (ps, epoch) in marks.items():
            if tp in held and parts.get(tp) is ps and ps.epoch == epoch:
                ps.position = held[tp]
                ps.epoch += 1
                if fetcher is not None:
                    fetcher.discard(tp)
        if fetcher is not None:
            fetcher.wakeup()


def _merged(held: dict[TopicPartition, int], starts: dict[TopicPartition, int]
            ) -> dict[TopicPartition, int]:
    """`held` with the `starts` of a later staged poll for partitions it lacks."""
    if all(tp in held for tp in starts):
        return held
    return {**starts, **held}
