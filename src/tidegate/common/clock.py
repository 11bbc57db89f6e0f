"""Injected clocks: the sans-IO core never reads the time itself.

`SystemClock` is used by the I/O shells; `ManualClock` drives tests deterministically.
All times are integer milliseconds (wall clock, as Kafka timestamps) or float seconds
(monotonic, for timeouts).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for measuring intervals."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        self._mono += ms / 1000.0
