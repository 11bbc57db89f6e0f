"""KIP-890 verification guards of one partition (Kafka's VerificationStateEntry, for one node).

The hole KIP-890 closes: a transactional producer's Produce request is delayed, its
transaction is aborted (markers written), and the late batch then lands and opens a
new transaction nobody will ever end, pinning the LSO (a "hanging transaction").

The fix, as the Produce path uses it:

    guard = log.begin_verification(pid, epoch)    # before asking the coordinator
    ...coordinator: is this partition in pid's ongoing transaction? ...
    log.append(data, verification_guard=guard)    # refused if the guard went stale

A guard is an opaque object; the partition remembers the current one per producer. It
stops being current when a marker for that producer is applied, when a batch with a
newer epoch of that producer is applied, when the producer's transaction starts here
(later batches need no guard), when the producer state is reloaded, or when it is older
than producer.id.expiration.ms. A transactional batch that would START a transaction in
the partition must carry the current guard (`is_current`); batches that continue an
open transaction need none.

Not thread-safe: the producer state (under the log's lock) owns it.
"""

from __future__ import annotations

__all__ = ["VerificationGuard", "VerificationGuards"]


class VerificationGuard:
    """Opaque token; compared by identity."""

    __slots__ = ("created_ms", "producer_epoch", "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int, created_ms: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.created_ms = created_ms

    def __repr__(self) -> str:
        return f"VerificationGuard(pid={self.producer_id}, epoch={self.producer_epoch})"


class VerificationGuards:
    def __init__(self) -> None:
        self._current: dict[int, VerificationGuard] = {}

    def begin(self, producer_id: int, producer_epoch: int, now_ms: int) -> VerificationGuard:
        """The producer's current guard if it is for `producer_epoch` (concurrent
        requests of one producer share it), else a new one replacing it."""
        guard = self._current.get(producer_id)
        if guard is None or guard.producer_epoch != producer_epoch:
            guard = self._current[producer_id] = VerificationGuard(
                producer_id, producer_epoch, now_ms
            )
        return guard

    def is_current(self, producer_id: int, guard: object) -> bool:
        current = self._current.get(producer_id)
        return current is not None and current is guard

    def on_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """A batch of `producer_epoch` was applied: a guard for an older epoch is stale."""
        guard = self._current.get(producer_id)
        if guard is not None and guard.producer_epoch < producer_epoch:
            del self._current[producer_id]

    def clear(self, producer_id: int) -> None:
        self._current.pop(producer_id, None)

    def clear_all(self) -> None:
        self._current.clear()

    def expire(self, now_ms: int, max_age_ms: int) -> None:
        doomed = [p for p, g in self._current.items() if now_ms - g.created_ms >= max_age_ms]
        for pid in doomed:
            del self._current[pid]

    def __len__(self) -> int:
        return len(self._current)
