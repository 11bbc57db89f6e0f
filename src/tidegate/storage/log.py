"""`Log`: one partition's log, a list of segments in `<log.dir>/<topic>-<partition>/`.

It validates producer batches, assigns offsets, stamps LogAppendTime, appends to the
active segment (rolling when due), serves reads of whole batches, fsyncs on demand,
answers timestamp queries, and applies retention, DeleteRecords and truncation.

Idempotence: a `ProducerStateManager` (see `producer_state`) checks every batch carrying
a producer id before offsets are assigned and learns it after the append. A retry of one
of a producer's last 5 batches is not written again: `append` returns the original's
offsets with `AppendInfo.duplicate` set. The state is snapshotted (Kafka's
`<offset>.snapshot` files, the newest two kept) when a segment rolls and at clean close,
rebuilt at open from the newest snapshot plus the batch headers after it
(`recovery.load_producer_state`), rewound on truncation, and kept when retention or
DeleteRecords move the log start. The roll's snapshot is written without fsync (the
roll may run on the event loop); the next `flush` fsyncs it before the directory.

Transactions (docs/transactions.md): transactional batches open a
transaction per producer (`producer_state`); `append_marker` / `append_control` write the
COMMIT/ABORT markers that end them. An aborted transaction gets an entry in the
`.txnindex` of the segment holding its marker, at the marker's append (`txn_index`), and
`aborted_transactions` answers read_committed fetches from those files. Markers are
decoded (`markers`) on append and on replay, so recovery knows each outcome. KIP-890
guards (`begin_verification`, `append(..., verification_guard=)`, `storage.verification`)
stop a late batch from reopening a transaction its marker already ended.

Replication (cluster mode; `log_replica`): a leader epoch cache (`leader_epochs`,
`leader-epoch-checkpoint`) records where each leader epoch stamped by `append` /
`append_control` (`leader_epoch=`) begins; `append_as_follower` writes a leader's
fetched batches unchanged; `truncate_to` cuts a follower's divergent tail;
`maybe_increment_log_start_as_follower` follows the leader's log start. The embedded
broker passes no epoch and uses none of it: its logs behave as before.

Modules, by job: this one opens the log, appends (the hot path), reads and answers
the timestamp queries; mixins hold the rest and share its state and its lock:
`log_flush` (`flush` and its steps for a group-commit round), `log_txn` (HW, LSO,
markers, KIP-890 guards), `log_replica` (leader epochs, follower appends),
`log_truncation` (`truncate_to`, `truncate_fully_and_start_at`), `log_cleanup`
(retention, DeleteRecords, producer expiry, the cleaner's hooks) and `log_lifecycle`
(`close`, `delete`); `log_state` declares, once for all of them, the state they share
and the methods they call on one another.

Invariants:
- `high_watermark` <= `log_end_offset`; only `update_high_watermark` /
  `set_high_watermark_as_follower` raise it (never lower it), only truncation lowers it;
  at open it is the log end offset (everything recovered is on disk), or in cluster mode
  the checkpointed HW `Log.open(high_watermark=)` gives, capped by the log end;
- `last_stable_offset` = max(log start, min(high watermark, first offset of the oldest
  transaction that is open or whose marker is at or above the high watermark)); it only
  grows, except by truncation. A finished transaction stays "unreplicated" until the
  high watermark passes its marker, so the LSO never overtakes the durable marker;
- every aborted transaction whose marker is in the log has one entry in its marker
  segment's `.txnindex`, with Kafka's lastStableOffset; entries leave with their segment
  (retention, DeleteRecords, truncation drops those whose marker is cut, the cleaner
  copies them to the cleaned segment); recovery rebuilds them (see `recovery`);
- segments are sorted by base offset; the last one is active (the only one appended to);
  `log_start_offset` lies in [first base offset, log_end_offset];
- offsets increase in append order, dense except for gaps compaction leaves;
- `recovery_point` <= `log_end_offset`, and everything below it has been fdatasync'ed:
  the `.log` data (the produce path's durability); the offset and time indexes only of
  closed segments (a flush leaves the active segment's out, as Kafka does: one fsync
  per flush instead of three). So the value checkpointed for a restart after a crash
  (`recovery_point_to_checkpoint`) never passes the base of the active segment or of a
  segment rolled since the last flush: a start trusts the indexes of the segments wholly
  below it, and rebuilds those of the segments from the one holding it on (`recovery`);
- files hold batches exactly as on the wire; nothing here decodes records except the
  two timestamp queries, which decode one batch each, and markers (one record each);
- the producer state reflects exactly the batches below `log_end_offset`: an append is
  all or nothing whichever write fails (a full disk). Before the `.log` write nothing
  is changed that a failure would not undo (a roll's new segment and snapshot are
  removed, a half-written batch is cut off); after it nothing may fail: index entries
  that cannot be written stay queued, an aborted transaction's `.txnindex` entry too —
  in memory at once, and written by `flush` before the recovery point may pass it;
- the epoch cache's entries lie in [log_start_offset, log_end_offset] (a new leader's
  entry may sit at the log end before it writes), and every batch below
  `recovery_point` has its epoch in the checkpoint file (see `log_replica`).

Thread-safety contract: one lock (held only for in-memory work, page-cache writes and
reads, and a few renames/unlinks) serialises `append`, `read`, truncation, retention,
DeleteRecords, the cleaner's swap, the queries and the transaction calls (HW, markers,
guards), so they may be called from the event loop and from worker threads alike;
`high_watermark` and `last_stable_offset` are plain reads of values updated under it.
`flush` never holds that lock while it fsyncs: it
captures the target offset and the segments under the lock, syncs them outside it, then
raises `recovery_point` (unless a truncation happened meanwhile); flushes are serialised
among themselves. A segment removed during a flush is unlinked at once and closed when
the flush ends (see `SegmentList`). `close` waits for a running flush.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from tidegate.common.clock import Clock
from tidegate.common.errors import KafkaStorageError, OffsetOutOfRangeError
from tidegate.records.batch import BatchHeader, validate_batch
from tidegate.records.control import ControlType
from tidegate.storage import queries
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import RecordListTooLargeError
from tidegate.storage.files import (
    INDEX_EXT,
    LOG_EXT,
    TIMEINDEX_EXT,
    TXNINDEX_EXT,
    parse_partition_dir,
    segment_path,
)
from tidegate.storage.leader_epochs import load_leader_epochs
from tidegate.storage.log_cleanup import CleanupLog
from tidegate.storage.log_flush import FlushingLog, FlushTicket
from tidegate.storage.log_lifecycle import LifecycleLog, remove_deleted_dir
from tidegate.storage.log_replica import ReplicaLog
from tidegate.storage.log_truncation import TruncatingLog
from tidegate.storage.log_txn import TransactionalLog
from tidegate.storage.markers import marker_of
from tidegate.storage.producer_state import (
    DuplicateBatch,
    ProducerStateManager,
)
from tidegate.storage.record_checks import BatchRecords, Scan, validate_records
from tidegate.storage.recovery import (
    OpenedPartition,
    load_producer_state,
    open_partition_dir,
)
from tidegate.storage.segment import LogSegment
from tidegate.storage.segment_list import SegmentList
from tidegate.storage.txn_index import TxnIndexEntry
from tidegate.storage.validation import (
    assign_offsets,
    check_timestamps,
    stamp_offsets,
    validate_producer_batches,
)

__all__ = ["UNVERIFIED", "AppendInfo", "FlushTicket", "Log", "remove_deleted_dir"]

# `Log.append`'s default for `verification_guard`: no KIP-890 check (internal callers).
UNVERIFIED: object = object()

_position, _header = itemgetter(0), itemgetter(1)  # of a (position, header) pair


# Batches replayed at open (recovery.load_producer_state) from which the producer state
# is snapshotted at once; fewer are replayed again at the next unclean start instead.
SNAPSHOT_AFTER_REPLAY = 1000


class AppendInfo(NamedTuple):
    # A NamedTuple, not a frozen dataclass: made once per append, and the dataclass's
    # __init__ (one object.__setattr__ per field) cost ~1.5 us, a twentieth of a small
    # batch's append.
    first_offset: int  # -1 if nothing was appended
    last_offset: int
    log_append_time: int  # -1 under CreateTime
    log_start_offset: int
    max_timestamp: int
    record_count: int
    batches: list[BatchHeader]  # as stored (offsets assigned)
    # A producer's retry of a batch already in the log: nothing was written; the offsets
    # (and max_timestamp / log_append_time) are the original batch's.
    duplicate: bool = False


class Log(TransactionalLog, ReplicaLog, TruncatingLog, CleanupLog, LifecycleLog,
          FlushingLog):
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        opened: OpenedPartition,
        high_watermark: int | None = None,
        *,
        sync: bool = True,
    ) -> None:
        """Use `Log.open`."""
        parsed = parse_partition_dir(directory.name)
        assert parsed is not None
        self.directory = directory
        self.topic, self.partition = parsed
        self.topic_id = opened.topic_id
        self._config = config
        self._clock = clock
        self._segs = SegmentList(opened.segments, directory)
        self._lock = self._segs.lock
        leo = self._segs.active.next_offset
        self._log_start_offset = min(max(opened.log_start_offset, self._segs.bases[0]), leo)
        self._recovery_point = leo
        hw = leo
        if high_watermark is not None:
            hw = min(max(high_watermark, self._log_start_offset), leo)
        self._high_watermark = hw
        # Called (outside the lock) after `truncate_to`: the owner checkpoints recovery
        # points at once, so a stale one above the new end cannot vouch for data
        # appended later (LogManager sets it).
        self.on_truncated: Callable[[Log], None] | None = None
        self.last_flush_ms: int = clock.now_ms()
        self._first_dirty = opened.first_dirty_offset
        self._flush_mutex = threading.Lock()
        self._closed = False
        self._producers = ProducerStateManager()
        self._unsynced_snapshots: list[Path] = []  # written at rolls, fsynced by flush
        # segments rolled since the last flush: their offset / time indexes, unsynced while
        # they were active, are fsynced by the next flush (they hold the checkpoint back)
        self._rolled_unsynced: list[LogSegment] = []
        now = clock.now_ms()
        self._producers.on_high_watermark_updated(hw)
        if load_producer_state(
            self._producers, directory, self._segs.segments, self._log_start_offset, now,
            opened.names,
        ) >= SNAPSHOT_AFTER_REPLAY:  # snapshot now so the next start need not replay
            # them again (data is synced). A short replay (the usual tail after kill -9)
            # is cheaper to repeat than a snapshot file per partition is to write: a
            # fifth of a start at 10,000 partitions.
            self._producers.take_snapshot(directory, sync=sync)
        self._last_stable_offset = self._log_start_offset
        self._refresh_lso(allow_backwards=True)
        self._epochs, changed = load_leader_epochs(
            directory, self._segs.segments, self._log_start_offset, opened.recovered_from,
            opened.names,
        )
        self._epochs_version, self._epochs_written = int(changed), 0
        self._epochs_io = threading.Lock()
        # sync=False (a broker start): unsynced, made durable by the caller's syncfs
        self._persist_epochs(quiet=True, sync=sync)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        topic_id: uuid.UUID | None = None,
        recovery_point: int | None = None,
        high_watermark: int | None = None,
        sync: bool = True,
    ) -> Log:
        """Create or open the partition directory. After an unclean shutdown, segments
        from the one holding `recovery_point` on (all if None) are CRC-checked and cut at
        the first torn or corrupt batch; after a clean one files are trusted, but index
        files that are missing or fail their sanity check are rebuilt. The high
        watermark starts at the log end, or at `high_watermark` (cluster mode: the
        checkpointed one) clamped to [log start, log end]. `sync=False` leaves what the
        open repaired or wrote unsynced: the caller must sync the file system
        (`files.sync_filesystem`) before the log is used (LogManager.load)."""
        directory = Path(directory)
        opened = open_partition_dir(
            directory, config, clock.now_ms(), topic_id=topic_id,
            recovery_point=recovery_point, sync=sync,
        )
        return cls(directory, config, clock, opened, high_watermark, sync=sync)

    # -- properties --------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config
            for seg in self._segs.segments:
                seg.config = config

    @property
    def topic_partition(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._segs.active.next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def recovery_point_to_checkpoint(self) -> int:
        """The recovery point for `recovery-point-offset-checkpoint`: `recovery_point`,
        but not past the base of the first segment whose offset / time indexes may be
        unsynced (the active one, or one rolled since the last flush). A start after a
        crash trusts the indexes of the segments wholly below the checkpointed point; the
        others it rebuilds from the log, so a stale or short index there is harmless."""
        with self._lock:
            bases = [seg.base_offset for seg in self._rolled_unsynced]
            return min(self._recovery_point, self._segs.active.base_offset, *bases)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segs.segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segs.segments)

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotence state. Not thread-safe: for tests and tools, while nothing
        appends."""
        return self._producers

    def __repr__(self) -> str:
        return f"Log({self.topic_partition}, {self._log_start_offset}..{self.log_end_offset})"

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.topic_partition} is closed")

    # -- append ------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        now_ms: int | None = None,
        leader_epoch: int | None = None,
        single_batch: bool = False,
        verification_guard: object = UNVERIFIED,
    ) -> AppendInfo:
        """Validate producer batches, check producer sequences, assign offsets, append.
        No fsync. Every record is parsed once to be checked (`record_checks`).

        The whole request is rejected (nothing appended) if any batch is invalid; a
        producer's retry of a cached batch is answered with `duplicate` set. An
        idempotent batch must come alone, as must any batch with `single_batch` (the
        Produce API's rule, see `validation`). When `verification_guard` is given (even
        None), a transactional batch that would start a transaction here needs the
        current guard from `begin_verification`, else InvalidTxnStateError (KIP-890).
        """
        now = self._clock.now_ms() if now_ms is None else now_ms
        cfg = self._config
        view = memoryview(data).cast("B") if isinstance(data, memoryview) else data
        scans: list[Scan | None] = []  # the records scanned with the headers (one C call)
        found = validate_producer_batches(view, cfg, single_batch=single_batch, scans=scans)
        if not found:
            return AppendInfo(-1, -1, -1, self._log_start_offset, -1, 0, [])
        if len(view) > cfg.segment_bytes:
            raise RecordListTooLargeError(
                f"{len(view)} bytes of batches exceed segment.bytes ({cfg.segment_bytes})"
            )
        checked = validate_records(view, found, cfg, scans=scans)  # every record (record_checks)
        # LogAppendTime rewrites timestamps under the CRC: a private copy; else the
        # request's bytes are written as they are, around new headers (stamp_offsets)
        buf: bytearray | memoryview
        if cfg.log_append_time:
            buf = bytearray(view)
        elif isinstance(view, memoryview):  # the Produce handler's (read-only already)
            buf = view if view.readonly else view.toreadonly()
        else:
            buf = memoryview(view).toreadonly()
        return self._append(
            buf,
            found,
            now,
            leader_epoch,
            from_client=True,
            records=checked,
            guard=verification_guard,
        )

    def append_control(
        self,
        data: bytes,
        *,
        now_ms: int | None = None,
        coordinator_epoch: int | None = None,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Append broker-built batches (e.g. transaction markers), control ones included.
        Producer epochs are still checked (markers also against `coordinator_epoch`). A
        control batch must be a COMMIT/ABORT marker (else InvalidRecordError).
        `leader_epoch` is stamped as in `append` (outside the CRC)."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        found: list[tuple[int, BatchHeader]] = []
        types: list[ControlType | None] = []
        pos = 0
        while pos < len(data):
            header = validate_batch(data, pos)
            found.append((pos, header))
            types.append(marker_of(data, pos, check_crc=False)[0] if header.is_control else None)
            pos += header.size
        if not found:
            return AppendInfo(-1, -1, -1, self._log_start_offset, -1, 0, [])
        return self._append(
            bytearray(data),
            found,
            now,
            leader_epoch,
            from_client=False,
            coordinator_epoch=coordinator_epoch,
            control_types=types,
        )

    def _append(
        self,
        buf: bytearray | memoryview,
        found: list[tuple[int, BatchHeader]],
        now: int,
        leader_epoch: int | None,
        *,
        from_client: bool,
        coordinator_epoch: int | None = None,
        records: list[BatchRecords] | None = None,
        control_types: list[ControlType | None] | None = None,
        guard: object = UNVERIFIED,
    ) -> AppendInfo:
        cfg = self._config
        log_append = cfg.log_append_time
        positions = list(map(_position, found))
        with self._lock:
            self._check_open()
            psm = self._producers
            for _, h in found:
                if h.producer_id >= 0:
                    dup = psm.validate(
                        h,
                        is_from_client=from_client,
                        coordinator_epoch=coordinator_epoch,
                        verification_guard=guard,
                        check_verification=guard is not UNVERIFIED,
                    )
                    if dup is not None:  # only ever the request's single batch
                        return self._duplicate(dup, log_append)
            if from_client:
                check_timestamps(list(map(_header, found)), now, cfg, records)
            data: bytearray | Sequence[bytearray | memoryview]
            if log_append and not isinstance(buf, bytearray):  # the config changed since
                buf = bytearray(buf)
            if isinstance(buf, bytearray):  # a private copy: patched in place
                headers = assign_offsets(
                    buf,
                    positions,
                    self.log_end_offset,
                    log_append_time=now if log_append else None,
                    leader_epoch=leader_epoch,
                )
                data = buf
            else:  # read-only bytes of the request: new headers, the rest as it is
                headers, data = stamp_offsets(
                    buf, positions, self.log_end_offset, leader_epoch=leader_epoch
                )
            last = headers[-1]
            # one batch per request is the rule (Produce v3+): no generator for it
            max_ts = last.max_timestamp if len(headers) == 1 else max(
                h.max_timestamp for h in headers
            )
            seg = self._maybe_roll(len(buf), max_ts, last.last_offset, now)
            seg.append(data, headers, positions)
            # The batches are in the log: from here on nothing may fail the append, or
            # the log would hold batches the producer state does not know (a retry
            # written twice, a transaction open on disk but not in memory). An aborted
            # transaction's index entry is in memory at once; its file write may stay
            # pending on a full disk (`flush` writes it, and fails until it can).
            for h, ctype in zip(headers, control_types or repeat(None)):
                done = psm.update(h, now, coordinator_epoch=coordinator_epoch, control_type=ctype)
                if done is not None and done.is_aborted:
                    stable = psm.index_stable_offset(done)
                    seg.txn_index.append(
                        TxnIndexEntry(done.producer_id, done.first_offset, done.last_offset, stable)
                    )
            if leader_epoch is not None:
                self._note_epochs(headers)
            lso = self._log_start_offset
        return AppendInfo(
            first_offset=headers[0].base_offset,
            last_offset=last.last_offset,
            log_append_time=now if log_append else -1,
            log_start_offset=lso,
            max_timestamp=max_ts,
            record_count=last.records_count if len(headers) == 1 else sum(
                h.records_count for h in headers
            ),
            batches=headers,
        )

    def _duplicate(self, dup: DuplicateBatch, log_append: bool) -> AppendInfo:
        return AppendInfo(
            first_offset=dup.first_offset,
            last_offset=dup.last_offset,
            log_append_time=dup.timestamp if log_append else -1,
            log_start_offset=self._log_start_offset,
            max_timestamp=dup.timestamp,
            record_count=0,
            batches=[],
            duplicate=True,
        )

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> LogSegment:
        """The segment to append to, rolling first when due. The steps that can fail (a
        full disk) come first and are undone on failure, so a failed roll leaves the log
        as it was: above all no stray empty `<log end>.log`, which the next start would
        take for the active segment, cutting whatever was appended to this one since."""
        active = self._segs.active
        if not active.should_roll(size, max_ts, last_offset, now):
            return active
        leo = active.next_offset
        new = self._create_segment(leo, now, keep=active)
        try:
            # Snapshot at the new segment's base, as Kafka does; fsynced by the next
            # flush (only the newest two exist, so only they need it).
            path = self._producers.take_snapshot(self.directory, sync=False)
        except BaseException:
            if new.base_offset != active.base_offset:
                new.close()
                new.delete_files()
            raise
        if active.size == 0:  # empty, yet relative offsets would overflow: rebase it
            self._segs.drop(active)
        else:
            active.on_become_inactive()  # its last time index entry may stay queued
            self._rolled_unsynced.append(active)  # indexes fsynced by the next flush
        self._segs.append(new)
        self._unsynced_snapshots = [*self._unsynced_snapshots[-1:], path]
        return new

    def _create_segment(self, base: int, now: int, *, keep: LogSegment) -> LogSegment:
        """A new empty segment at `base`; if creating it fails, the files it made are
        removed (unless they are `keep`'s)."""
        try:
            return LogSegment(self.directory, base, self._config, now, create=True)
        except BaseException:
            if base != keep.base_offset:
                for ext in (LOG_EXT, INDEX_EXT, TIMEINDEX_EXT, TXNINDEX_EXT):
                    segment_path(self.directory, base, ext).unlink(missing_ok=True)
            raise

    # -- read --------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first one
        whole even if larger, when `min_one_batch`), excluding batches whose base offset
        is >= `max_offset`. Data comes from a single segment, as in Kafka."""
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if offset < self._log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range [{self._log_start_offset}, {leo}] "
                    f"for {self.topic_partition}"
                )
            if offset == leo or (max_offset is not None and offset >= max_offset):
                return b""
            for seg in self._segs.segments[self._segs.floor_index(offset) :]:
                found = seg.find_position(offset)
                if found is None:
                    continue  # offset in a gap left by compaction: next segment
                position, header = found
                if max_offset is not None and header.base_offset >= max_offset:
                    return b""
                return seg.read_batches(position, max_bytes, max_offset, min_one_batch)
            return b""

    # -- durability --------------------------------------------------------------------

    # -- timestamps --------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` at or
        after the log start offset, or None (ListOffsets by timestamp)."""
        with self._lock:
            self._check_open()
            return queries.offset_for_timestamp(
                self._segs.segments, timestamp, self._log_start_offset
            )

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record carrying it); (-1, -1) if none."""
        with self._lock:
            self._check_open()
            return queries.max_timestamp_and_offset(self._segs.segments)
