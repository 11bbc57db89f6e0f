"""Rates measured the way Kafka's quota sensors measure them, and the throttle time.

Sans-IO: every method takes the time (`now_ms`) from the caller.

`SampledRate` is Kafka's `Rate` over a `WindowedSum` (`quota.window.num` samples of
`quota.window.size.seconds` each): a value is added to the current sample, a sample
older than one window is closed and the next one (re)started at the time of the
record, samples older than `num * window` are reset when read. The rate is the sum of
the samples divided by the time they cover, and that time is never taken as less than
`min_windows` windows. Kafka uses `num - 1`: a client that just appeared is measured
as if it had been idle for ten seconds, so a first burst of ten seconds' quota passes
at once; the sample holding it expires whole eleven seconds later and lets the next
ten-second burst through, so a throttled Kafka client alternates bursts and silences
(over any 30 s its rate swings between about 0.7 and 1.1 times its quota). Tidegate's
QuotaManager passes `min_windows=1`: same arithmetic, same long-run rate, no burst
beyond one window, so the rate holds within a few percent over any few seconds.

`throttle_ms` is Kafka's `QuotaUtils.throttleTime`: with an observed rate O over a
window W and a quota T, a silence of X = (O - T) / T * W brings the rate back to T.
Request quotas cap it at one window (`boundedThrottleTime`); byte rates do not.

`TokenBucket` is KIP-599's measure of `controller_mutation_rate`: a bucket of
`quota * num * window` tokens refilled at `quota` per second; each created or deleted
partition takes a token; below zero the client is over its quota, and the throttle
time is how long the refill takes to bring the bucket back to zero.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Sample:
    start_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0


class SampledRate:
    """Units per second over the retained samples (module docstring)."""

    __slots__ = ("current", "min_windows", "num", "samples", "window_ms")

    def __init__(self, num: int = 11, window_ms: int = 1000,
                 min_windows: int | None = None) -> None:
        self.num = max(1, num)
        self.window_ms = max(1, window_ms)
        # Kafka: num - 1 (module docstring); the manager passes 1
        self.min_windows = self.num - 1 if min_windows is None else min_windows
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self.samples:
            self.samples.append(_Sample(now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.window_ms:
            # the current sample is complete: move on to the next slot
            self.current = (self.current + 1) % self.num
            if self.current >= len(self.samples):
                self.samples.append(_Sample(now_ms))
            else:
                self.samples[self.current].reset(now_ms)
            sample = self.samples[self.current]
        sample.value += value

    def unrecord(self, value: float, now_ms: int) -> None:
        """Take back a value just recorded (a throttled fetch answers with no data)."""
        self.record(-value, now_ms)

    def _purge(self, now_ms: int) -> None:
        expire = self.num * self.window_ms
        for s in self.samples:
            if now_ms - s.start_ms >= expire:
                s.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the samples cover, at least (num - 1) windows (Kafka's
        `Rate.windowSize`)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self.samples), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.min_windows:
            elapsed += (self.min_windows - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        size = self.window_size_ms(now_ms)  # purges first
        total = sum(s.value for s in self.samples)
        return total / (size / 1000.0) if size > 0 else 0.0


def throttle_ms(observed: float, bound: float, window_ms: int, cap_ms: int | None = None) -> int:
    """Time to bring `observed` back to `bound` over `window_ms` (0 when within it)."""
    if bound <= 0 or observed <= bound:
        return 0
    ms = round((observed - bound) / bound * window_ms)
    return ms if cap_ms is None else min(ms, cap_ms)


def record_and_throttle(rate: SampledRate, value: float, bound: float, now_ms: int,
                        cap_ms: int | None = None) -> int:
    """Kafka's `Sensor.record(value, now, checkQuotas=true)` and the throttle time of the
    violation it raises: the value is counted whether or not it breaks the quota."""
    rate.record(value, now_ms)
    observed = rate.measure(now_ms)
    if observed <= bound:
        return 0
    return throttle_ms(observed, bound, rate.window_size_ms(now_ms), cap_ms)


class TokenBucket:
    """KIP-599's controller mutation rate (module docstring)."""

    __slots__ = ("burst", "last_ms", "tokens")

    def __init__(self, rate: float, num: int, window_ms: int, now_ms: int) -> None:
        self.burst = rate * num * window_ms / 1000.0
        self.tokens = self.burst
        self.last_ms = now_ms

    def _refill(self, rate: float, num: int, window_ms: int, now_ms: int) -> None:
        self.burst = rate * num * window_ms / 1000.0  # the quota may have changed
        elapsed = max(0, now_ms - self.last_ms)
        self.tokens = min(self.burst, self.tokens + rate * elapsed / 1000.0)
        self.last_ms = max(self.last_ms, now_ms)

    def exceeded(self, rate: float, num: int, window_ms: int, now_ms: int) -> bool:
        self._refill(rate, num, window_ms, now_ms)
        return self.tokens < 0

    def record(self, permits: float, rate: float, num: int, window_ms: int,
               now_ms: int) -> None:
        self._refill(rate, num, window_ms, now_ms)
        self.tokens = min(self.burst, self.tokens - permits)  # a refund never overfills

    def throttle_ms(self, rate: float, num: int, window_ms: int, now_ms: int) -> int:
        self._refill(rate, num, window_ms, now_ms)
        if self.tokens >= 0 or rate <= 0:
            return 0
        return round(-self.tokens / rate * 1000)
