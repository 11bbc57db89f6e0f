"""`ProducerSnapshots`: the `ProducerStateManager`'s expiry, truncation and snapshots —
producers forgotten after producer.id.expiration.ms, the state moved with the log's start
and end, and written to / reloaded from Kafka's `.snapshot` files (`producer_snapshot.py`
has the format). A base of `ProducerStateManager`, whose state it shares; none of it is
on the append path.

Choices where Kafka's behaviour differs by version or is loose:
  * Retention / DeleteRecords (`truncate_head`) does NOT drop producers, as Kafka since 2.4
    (KAFKA-7190, KIP-360): dropping them turned idle-but-alive producers on purged topics
    into UNKNOWN_PRODUCER_ID errors, or, with the accept-any-sequence rule, silently
    disabled de-duplication for their in-flight retries. Producers leave only by
    `remove_expired` (producer.id.expiration.ms). Snapshots below the log start are deleted,
    and if no snapshot at or above the log start remains one is written at once, so a crash
    cannot lose the state Kafka warns it may lose there.
  * Expiry uses the broker's append time (`now_ms` given to `update`), not the batch's
    max timestamp which Kafka uses: a client's CreateTime can be far in the past (expiring
    an active producer at once) or the future (never expiring it). Producers with an open
    transaction never expire (as Kafka). "Idle longer than" is `now - last >= expiration`.
  * A snapshot older than the log start offset is never loaded: batches between it and the
    log start are gone, so its sequences would be stale and reject valid writes.
"""

from __future__ import annotations

from pathlib import Path

from tidegate.storage.producer_snapshot import (
    ProducerStateEntry,
    SnapshotEntry,
    delete_snapshots_above,
    delete_snapshots_below,
    keep_latest,
    list_snapshots,
    read_latest_snapshot,
    snapshot_path,
    write_snapshot,
)
from tidegate.storage.verification import VerificationGuards

__all__ = ["ProducerSnapshots"]


class ProducerSnapshots:
    producer_id_expiration_ms: int
    guards: VerificationGuards
    _producers: dict[int, ProducerStateEntry]
    _ongoing: dict[int, int]
    _unreplicated: list[tuple[int, int]]
    _map_end_offset: int
    _last_snapshot_offset: int | None

    # -- expiry and truncation -------------------------------------------------------

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms without an open txn."""
        doomed = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in doomed:
            del self._producers[pid]
        self.guards.expire(now_ms, self.producer_id_expiration_ms)
        return len(doomed)

    def truncate_head(self, log_start_offset: int, directory: Path | None = None) -> None:
        """The log start moved forward (retention, DeleteRecords). Producers are kept (see
        the module docstring); snapshots below the new start are deleted and, if none is
        left at or above it, the current state is snapshotted so a crash cannot lose it."""
        if self._map_end_offset < log_start_offset:
            self._map_end_offset = log_start_offset
        self._unreplicated = [t for t in self._unreplicated if t[1] >= log_start_offset]
        if directory is None:
            return
        delete_snapshots_below(directory, log_start_offset)
        remaining = list_snapshots(directory)
        self._last_snapshot_offset = remaining[-1][0] if remaining else None
        if not remaining and self._producers:
            self.take_snapshot(directory)

    def truncate_tail(
        self,
        directory: Path,
        offset: int,
        *,
        log_start_offset: int = 0,
        now_ms: int | None = None,
    ) -> int:
        """The log now ends at `offset` (recovery, follower truncation; also use it at
        startup with the recovered log end). Deletes snapshots above `offset`, reloads the
        newest usable one and returns the offset from which the caller must `replay` the
        log up to `offset` (== `offset` when nothing needs replaying)."""
        delete_snapshots_above(directory, offset)
        if offset == self._map_end_offset:
            return offset
        loaded = self.load_latest_snapshot(
            directory, offset, log_start_offset=log_start_offset, now_ms=now_ms
        )
        return log_start_offset if loaded is None else loaded

    def truncate_fully_and_start_at(self, directory: Path | None, offset: int) -> None:
        """Forget everything (the whole log was replaced) and continue from `offset`."""
        self._clear()
        self._map_end_offset = offset
        if directory is not None:
            delete_snapshots_above(directory, -1)

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.guards.clear_all()
        self._last_snapshot_offset = None

    # -- snapshots -------------------------------------------------------------------

    def to_snapshot_entries(self) -> list[SnapshotEntry]:
        return [e.to_snapshot_entry() for e in self._producers.values()]

    def _load_entry(self, s: SnapshotEntry) -> None:
        entry = ProducerStateEntry.from_snapshot_entry(s)
        self._producers[s.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing[s.producer_id] = entry.current_txn_first_offset

    def take_snapshot(
        self,
        directory: Path,
        offset: int | None = None,
        *,
        keep: int | None = 2,
        sync: bool = True,
    ) -> Path:
        """Write the state as of `map_end_offset` (an explicit `offset` must equal it),
        then keep only the newest `keep` snapshots (None: keep all). `sync=False` skips
        every fsync: the caller must fsync the file and the directory later."""
        if offset is not None and offset != self._map_end_offset:
            raise ValueError(
                f"snapshot at {offset} requested but the state is at {self._map_end_offset}"
            )
        path = snapshot_path(directory, self._map_end_offset)
        if self._last_snapshot_offset != self._map_end_offset or not path.exists():
            write_snapshot(directory, self._map_end_offset, self.to_snapshot_entries(), sync=sync)
            self._last_snapshot_offset = self._map_end_offset
        if keep is not None:
            keep_latest(directory, keep, sync=sync)
        return path

    def load_latest_snapshot(
        self,
        directory: Path,
        max_offset: int,
        *,
        log_start_offset: int = 0,
        now_ms: int | None = None,
        snapshots: list[tuple[int, Path]] | None = None,
    ) -> int | None:
        """Replace the state with the newest readable snapshot in
        [log_start_offset, max_offset]; corrupt ones are logged and deleted. Returns its
        offset (replay the log from there), or None (state empty, replay from the log
        start). With `now_ms`, producers already expired are not loaded. `snapshots`:
        the directory's snapshot files if just listed (`list_snapshots`)."""
        self._clear()
        found = read_latest_snapshot(directory, max_offset, log_start_offset, snapshots)
        if found is not None:
            off, entries = found
            expiration = self.producer_id_expiration_ms
            for s in entries:
                if (
                    now_ms is None
                    or s.current_txn_first_offset >= 0
                    or (now_ms - s.timestamp < expiration)
                ):
                    self._load_entry(s)
            self._map_end_offset = self._last_snapshot_offset = off
            return off
        self._map_end_offset = log_start_offset
        return None
