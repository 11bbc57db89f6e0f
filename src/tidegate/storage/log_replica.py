"""The replica half of `Log`: leader epochs, and what a follower does to its log.

A mixin, like `log_txn`, so `log.py` keeps the append/read/retention machinery. It is
cluster mode's: the embedded broker passes no leader epoch, so its epoch cache stays
empty, its `leader-epoch-checkpoint` is never written, and nothing here runs for it.

Leader epochs (`leader_epochs`): the `Log` owns a `LeaderEpochCache`. `Log.append` /
`append_control` with `leader_epoch=E` stamp E on the batches and record (E, first
offset) when E is newer than the latest epoch; `assign_leader_epoch` records a new
leader's epoch at the log end before it writes (Kafka's `maybeAssignEpochStartOffset`);
`append_as_follower` records the epochs the leader stamped; truncation and log-start
moves cut the cache. Appends change the cache in memory only and mark it dirty: the next
`flush` writes it before raising the recovery point (so every batch below the recovery
point has its epoch on disk), `close` too; batches after the recovery point are re-read
by recovery, which re-derives their epochs (`leader_epochs.load_leader_epochs`). So no
append waits for an fsync on the event loop, and `flush` writes it outside the log lock.
Truncations and log-start moves write it at once (they run in worker threads); a failed
write leaves it dirty for `flush`, which then fails until the write succeeds. Each change
bumps a version; a write records the version it wrote, so a flush that captured the
entries before a truncation cannot overwrite the truncation's newer file.

Follower append (`append_as_follower`, Kafka's `appendAsFollower`): the leader's
batches are written as they are (offsets, timestamps, epochs, CRCs) after the CRC and
framing check stored batches get (`segment.check_batch`); no size limit applies (a topic
config change may not have reached this broker yet, as in Kafka). The producer state is
applied without client checks, exactly as recovery replays the log
(`recovery.replay_batch`): markers end transactions, aborted ones get their `.txnindex`
entry, the LSO follows the HW. Each batch is rolled into segments as the leader's
`append` of that batch alone would have been (size, segment.ms from the batch's own
timestamps, index room, relative offsets), so a follower of a leader that appends one
batch at a time (Produce requests, markers, coordinator writes) holds the same segment
files byte for byte; only a roll by creation time (batches without timestamps) or a
leader appending several batches at once may place a boundary elsewhere. A batch larger
than segment.bytes gets a segment of its own.

Locking: everything runs under the log's lock, like the rest of `Log` (see `log`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tidegate.records.batch import BatchHeader, peek_size
from tidegate.storage.errors import UnexpectedAppendOffsetError
from tidegate.storage.leader_epochs import (
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    assign_from_headers,
    write_leader_epoch_checkpoint,
)
from tidegate.storage.log_append import AppendInfo
from tidegate.storage.log_state import LogState
from tidegate.storage.markers import decode_marker, is_marker_batch
from tidegate.storage.recovery import replay_batch
from tidegate.storage.segment import check_batch

__all__ = ["ReplicaLog", "split_batches"]

log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview


def split_batches(data: Buffer) -> list[tuple[int, BatchHeader]]:
    """(position, header) of the whole batches in fetched bytes, each CRC- and
    framing-checked (CorruptRecordError otherwise). A trailing partial batch (a fetch
    cut at its byte limit) is left out, as Kafka's fetcher does."""
    found: list[tuple[int, BatchHeader]] = []
    pos, end = 0, len(data)
    while pos < end:
        size = peek_size(data, pos)
        if size is None or pos + size > end:
            break
        header = check_batch(data, pos)
        found.append((pos, header))
        pos += header.size
    return found


class ReplicaLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    # -- leader epochs -----------------------------------------------------------------

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """The epoch cache. Not thread-safe: for tests and tools; others use the methods
        below, which take the log's lock."""
        return self._epochs

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the newest leader that wrote (or took over) here; None if none."""
        with self._lock:
            return self._epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch's answer: the largest epoch <= `epoch` and where it ends
        (the log end for the latest epoch); (-1, -1) if unknown (`end_offset_for`)."""
        with self._lock:
            self._check_open()
            return self._epochs.end_offset_for(epoch, self.log_end_offset)

    def assign_leader_epoch(self, epoch: int) -> bool:
        """This replica becomes leader at `epoch`: the epoch starts at the log end (Kafka's
        `maybeAssignEpochStartOffset`), so OffsetForLeaderEpoch answers for it before its
        first write. Ignored unless newer than the latest epoch; True if recorded."""
        with self._lock:
            self._check_open()
            latest = self._epochs.latest_epoch
            if latest is not None and epoch <= latest:
                return False
            self._epochs.assign(epoch, self.log_end_offset, flush=False)
            self._epochs_version += 1
            return True

    def _note_epochs(self, headers: Iterable[BatchHeader]) -> None:
        """Batches just appended: their newer epochs start where they do (lazy write)."""
        if assign_from_headers(self._epochs, headers):
            self._epochs_version += 1

    def _epochs_cut(self, changed: bool) -> None:
        """Under the lock, the cache was truncated (at either end): write it now if it
        changed; a failed write is logged and left to the next flush."""
        if changed:
            self._epochs_version += 1
            self._persist_epochs(quiet=True)

    def _epochs_to_write(self) -> tuple[tuple[EpochEntry, ...], int] | None:
        """Under the lock: the entries (and their version) a flush must write, if any."""
        if self._epochs_version == self._epochs_written:
            return None
        return self._epochs.entries, self._epochs_version

    def _write_epochs(
        self, entries: tuple[EpochEntry, ...], version: int, *, sync: bool = True
    ) -> None:
        """Write a captured state of the cache unless a newer one is on disk already;
        OSError on failure (the version stays unwritten: the next flush retries).
        `sync=False`: see `write_leader_epoch_checkpoint`."""
        path = self._epochs.path
        with self._epochs_io:
            if version <= self._epochs_written or path is None:
                return
            write_leader_epoch_checkpoint(path, entries, sync=sync)
            self._epochs_written = version

    def _persist_epochs(self, *, quiet: bool = False, sync: bool = True) -> None:
        """Under the lock: write the checkpoint if the cache changed since it was last
        written; OSError on failure unless `quiet` (logged; left to the next flush)."""
        todo = self._epochs_to_write()
        if todo is None:
            return
        try:
            self._write_epochs(*todo, sync=sync)
        except OSError as exc:
            if not quiet:
                raise
            log.warning("%s: leader epoch checkpoint not written (%s); the next flush "
                        "retries", self.topic_partition, exc)

    # -- follower ----------------------------------------------------------------------

    def append_as_follower(self, data: Buffer) -> AppendInfo:
        """Append batches fetched from the leader, bytes unchanged (module docstring).

        CorruptRecordError for a batch failing its CRC or framing (nothing appended);
        UnexpectedAppendOffsetError when a batch starts below the log end or below the
        end of the batch before it (the follower must truncate first, or re-fetch). A
        base offset above the log end is accepted, as Kafka does: the leader's compaction
        leaves such gaps. A full disk mid-way keeps the batches before the failing one
        (appended and applied) and raises; the next fetch resumes at the log end."""
        view = memoryview(data).cast("B")
        found = split_batches(view)
        with self._lock:
            self._check_open()
            if not found:
                return AppendInfo(-1, -1, -1, self._log_start_offset, -1, 0, [])
            expected = self.log_end_offset
            for _, h in found:
                if h.base_offset < expected:
                    raise UnexpectedAppendOffsetError(
                        f"{self.topic_partition}: fetched batch at offset {h.base_offset} "
                        f"does not continue the log, which ends at {expected}"
                    )
                expected = h.next_offset
            now = self._clock.now_ms()
            for pos, h in found:
                seg = self._maybe_roll(h.size, h.max_timestamp, h.last_offset, now)
                seg.append(view[pos : pos + h.size], [h], [0])
                # In the log: from here on nothing may fail for this batch (see `_append`).
                marker = None
                if is_marker_batch(h):
                    marker = decode_marker(view, pos, h, self.topic_partition)
                replay_batch(self._producers, h, marker, now, seg.txn_index)
                self._note_epochs((h,))
            headers = [h for _, h in found]
            return AppendInfo(
                first_offset=headers[0].base_offset,
                last_offset=headers[-1].last_offset,
                log_append_time=-1,
                log_start_offset=self._log_start_offset,
                max_timestamp=max(h.max_timestamp for h in headers),
                record_count=sum(h.records_count for h in headers),
                batches=headers,
            )

    def maybe_increment_log_start_as_follower(self, leader_log_start_offset: int) -> int:
        """The leader's log start, from a fetch response: move this log's start there
        (persisted; segments wholly below it deleted, epoch cache cut), clamped to this
        log's end. Unlike `delete_records_before` it does not refuse offsets above the
        local high watermark, which a lagging follower's is; the HW is raised to the new
        log start if below it, as Kafka does. Returns the log start offset."""
        with self._lock:
            self._check_open()
            offset = min(leader_log_start_offset, self.log_end_offset)
            if offset > self._log_start_offset:
                self._increment_log_start(offset)
            return self._log_start_offset
