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

Modules, by job: this one opens the log (recovery, producer state, epoch cache), holds
its state and states its invariants and locking; mixins do the rest, sharing that state
and the lock: `log_append` (`append`, `append_control`: the hot path), `log_roll`
(rolling the active segment), `log_read` (`read`, the timestamp queries), `log_flush`
(`flush` and its steps for a group-commit round), `log_txn` (HW, LSO, markers, KIP-890
guards), `log_replica` (leader epochs, follower appends), `log_truncation`
(`truncate_to`, `truncate_fully_and_start_at`), `log_cleanup` (retention,
DeleteRecords, producer expiry, the cleaner's hooks) and `log_lifecycle` (`close`,
`delete`); `log_state` declares, once for all of them, the state they share and the
methods they call on one another.

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
from collections.abc import Callable
from pathlib import Path

from tidegate.common.clock import Clock
from tidegate.common.errors import KafkaStorageError
from tidegate.storage.config import LogConfig
from tidegate.storage.files import parse_partition_dir
from tidegate.storage.leader_epochs import load_leader_epochs
from tidegate.storage.log_append import UNVERIFIED, AppendInfo, AppendingLog
from tidegate.storage.log_cleanup import CleanupLog
from tidegate.storage.log_flush import FlushingLog, FlushTicket
from tidegate.storage.log_lifecycle import LifecycleLog, remove_deleted_dir
from tidegate.storage.log_read import ReadingLog
from tidegate.storage.log_replica import ReplicaLog
from tidegate.storage.log_roll import RollingLog
from tidegate.storage.log_truncation import TruncatingLog
from tidegate.storage.log_txn import TransactionalLog
from tidegate.storage.producer_state import ProducerStateManager
from tidegate.storage.recovery import (
    OpenedPartition,
    load_producer_state,
    open_partition_dir,
)
from tidegate.storage.segment import LogSegment
from tidegate.storage.segment_list import SegmentList

__all__ = ["UNVERIFIED", "AppendInfo", "FlushTicket", "Log", "remove_deleted_dir"]

# Batches replayed at open (recovery.load_producer_state) from which the producer state
# is snapshotted at once; fewer are replayed again at the next unclean start instead.
SNAPSHOT_AFTER_REPLAY = 1000


class Log(AppendingLog, RollingLog, ReadingLog, TransactionalLog, ReplicaLog,
          TruncatingLog, CleanupLog, LifecycleLog, FlushingLog):
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
        # flush.messages <= 1: every append waits for the group commit's fsync (the
        # server's policy reads this plain attribute on each append and flush round)
        self.syncs_every_write = config.flush_messages <= 1
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
            self.syncs_every_write = config.flush_messages <= 1
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
