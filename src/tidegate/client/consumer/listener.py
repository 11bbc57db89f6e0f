"""The rebalance listener: what the application hears when its partitions change.

`RebalanceListener` has Kafka's three callbacks; subclass it and override what you
need (or pass any object with some of these methods). Each may be a plain method or
a coroutine function; the consumer awaits coroutines.

- ``on_partitions_revoked(partitions)``: these partitions are being taken away and
  are still yours: commit their offsets now. Eager rebalancing (range, roundrobin,
  sticky, or any list that includes one of them) revokes everything at the start of
  every rebalance (when something was assigned); cooperative rebalancing
  (cooperative-sticky alone) calls it at the end of a rebalance with only the
  partitions that move, and only if there are any.
- ``on_partitions_assigned(partitions)``: called after every rebalance with the
  partitions added (eager: the whole new assignment), possibly none. Seeking here
  overrides the committed offsets.
- ``on_partitions_lost(partitions)``: the consumer was dropped from the group
  (session timeout, ``max.poll.interval.ms`` exceeded, fenced generation) and these
  partitions may already belong to someone else: do not commit. The default calls
  ``on_partitions_revoked``, as Kafka's does.

Callbacks run inside `poll()` (and `close()`/`unsubscribe()`), never concurrently with
the application's processing, as in Kafka. An exception raised by a callback is
re-raised from that `poll()` after the rebalance bookkeeping is done.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable

from tidegate.client.types import TopicPartition

__all__ = ["RebalanceListener", "invoke"]

log = logging.getLogger("tidegate.client.consumer.group")


class RebalanceListener:
    """Kafka's ConsumerRebalanceListener; see the module docstring."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> Awaitable[None] | None:
        return self.on_partitions_revoked(partitions)


async def invoke(listener: object | None, name: str,
                 partitions: Iterable[TopicPartition]) -> BaseException | None:
    """Call ``listener.<name>(partitions)`` (awaiting it if needed); return what it
    raised instead of raising, so the caller can finish the rebalance first. A
    listener without ``on_partitions_lost`` gets ``on_partitions_revoked``."""
    if listener is None:
        return None
    method: Callable[[set[TopicPartition]], object] | None = getattr(listener, name, None)
    if method is None and name == "on_partitions_lost":
        method = getattr(listener, "on_partitions_revoked", None)
    if method is None:
        return None
    try:
        result = method(set(partitions))
        if inspect.isawaitable(result):
            await result
    except Exception as e:
        log.error("rebalance listener %s(...) raised %r", name, e)
        return e
    return None
