"""`hold_fsync`: make a log's flushes (run in the group commit's worker threads) wait
until the test sets an event, to see what a request does while its fsync is pending."""

from __future__ import annotations

import threading

from tidegate.storage.log import Log


def hold_fsync(lg: Log, from_end: int = 0) -> threading.Event:
    """`lg`'s flushes wait until the returned event is set, once the log holds
    `from_end` records or more (earlier flushes go through)."""
    gate = threading.Event()
    real = lg.flush

    def held() -> int:
        if lg.log_end_offset >= from_end:
            gate.wait(10)
        return real()

    lg.flush = held  # type: ignore[method-assign]
    return gate
