"""`StagingHost`: what the blocking consumer's staged polls may use of `AsyncConsumer`.

`staging.StagedPolls` drains polls ahead on the loop thread and hands them out on the
application's thread; it needs the consumer's assignment state, its fetcher and a few
facts about its group, and nothing else of the consumer's insides. This base class of
`AsyncConsumer` (after `positions.ConsumerPositions`) is that interface, so staging
reads no private attribute of the consumer; `AsyncConsumer.drainer` and
`AsyncConsumer.poll_with` are the rest of it.
"""

from __future__ import annotations

import math

from tidegate.client.consumer.fetcher import Fetcher
from tidegate.client.consumer.positions import ConsumerPositions
from tidegate.client.consumer.state import Assignment

__all__ = ["StagingHost"]


class StagingHost(ConsumerPositions):
    """See the module docstring. The state is `AsyncConsumer`'s (declared here and in
    `ConsumerPositions` for the type checker)."""

    _closed: bool
    _columns: bool | None  # see `AsyncConsumer.use_columns`

    @property
    def staging_assignment(self) -> Assignment:
        """The consumer's `Assignment` (the same object for the consumer's life)."""
        return self._assignment

    def staging_fetcher(self) -> Fetcher | None:
        """The running fetcher; None before the consumer starts and once it closed."""
        return None if self._closed else self._fetcher

    def started_fetcher(self) -> Fetcher:
        """The fetcher, started if it was not (ClientClosedError once closed)."""
        return self._started()

    @property
    def in_group(self) -> bool:
        """True with ``group.id`` set (group work runs in polls on the loop)."""
        return self._group is not None

    def group_work_waits(self) -> bool:
        """The group has work for the next poll on the loop (a rebalance step)."""
        return self._group is not None and self._group.wakeup.is_set()

    def group_timed_work_at(self) -> float:
        """When a poll on the loop next has timed group work (`ConsumerCoordinator.
        timed_work_at`: auto-commit, topic scans); inf without a group."""
        return math.inf if self._group is None else self._group.timed_work_at()

    def group_polled(self) -> None:
        """The application polled without the loop (for ``max.poll.interval.ms``)."""
        if self._group is not None:
            self._group.polled()

    @property
    def reads_columns(self) -> bool:
        """The consumer decodes columns (`AsyncConsumer.use_columns`)."""
        return self._columns is not None
