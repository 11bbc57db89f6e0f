"""Log compaction (`cleanup.policy=compact`): keep only the latest record per key.

One pass over a log (`clean`):
1. Cleanable range: closed segments below min(active segment, last stable offset) whose
   newest record is older than min.compaction.lag.ms: every transaction with data there
   is decided, so its outcome is known from the txn indexes. The part from the first dirty
   offset (where the last pass stopped) to the end of that range is "dirty".
2. Skip unless dirty / cleanable >= min.cleanable.dirty.ratio, or the oldest dirty record
   is older than max.compaction.lag.ms, or kept tombstones have reached their horizon.
3. Offset map: key -> latest offset, from the dirty part (control batches and batches of
   aborted transactions excluded, else an aborted value would hide a committed one).
4. Rewrite the cleanable segments, grouped up to segment.bytes, into `.cleaned` files:
   a record survives if it has a key, no later record has the same key, and it is not a
   tombstone past its horizon. Untouched batches are copied byte for byte; batches that
   lost records are rebuilt with the builder, one batch per run of consecutive
   surviving offsets (so offsets stay as they were and every batch still has dense
   offset deltas), with the original producer id/epoch/sequence, flags, codec and
   timestamp type. Batches of aborted transactions are removed whole. Transaction
   markers are always kept (Kafka drops a marker once delete.retention.ms has passed
   and its transaction's data is gone; keeping them costs one small batch per
   transaction and keeps the producer state and txn indexes rebuildable), and so are the
   txn index entries of the cleaned segments, copied to the new one. A batch that does
   not decode is kept as is: never lose data.
5. Swap each group in with `Log.replace_segments` (crash-safe), then record the new
   first dirty offset.

Tombstones (KIP-534 semantics): a tombstone is removed only once delete.retention.ms
has passed since the pass that first compacted it, so a consumer reading from the start
has that long to see it. The pass history needed for this lives in
`cleaner-tombstones` in the partition directory.

Threading: `clean` may run in a worker thread while the event loop appends and reads:
it reads pinned closed segments without the log's lock and only takes it to swap.
The offset map is unbounded (Kafka bounds it with log.cleaner.dedupe.buffer.size).
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import BatchHeader, parse_header
from tidegate.records.builder import build_batch
from tidegate.records.record import Record, decode_records
from tidegate.storage.config import LONG_MAX, LogConfig
from tidegate.storage.files import CLEANED_SUFFIX, atomic_write, read_single_value
from tidegate.storage.log import Log
from tidegate.storage.segment import MAX_RELATIVE_OFFSET, LogSegment

__all__ = ["CleanStats", "clean"]

logger = logging.getLogger(__name__)

TOMBSTONE_FILE = "cleaner-tombstones"


@dataclass
class CleanStats:
    cleaned: bool = False
    reason: str = ""
    first_dirty_offset: int = 0
    end_offset: int = 0
    segments_in: int = 0
    segments_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    records_in: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    aborted_removed: int = 0  # records of aborted transactions


def clean(log: Log, now_ms: int) -> CleanStats:
    """Compact `log` once if it is due; see the module docstring."""
    cfg = log.config
    if not cfg.compact:
        return CleanStats(reason="cleanup.policy does not include compact")
    with log.pinned() as (segments, generation):
        cleanable, ends = _cleanable(segments, cfg, now_ms, log.last_stable_offset)
        if not cleanable:
            return CleanStats(reason="no closed segment is cleanable yet")
        end = ends[-1]
        first_dirty = min(max(log.first_dirty_offset, cleanable[0].base_offset), end)
        stats = CleanStats(first_dirty_offset=first_dirty, end_offset=end)
        history = _TombstoneHistory.load(log.directory, first_dirty, cfg, now_ms)
        total = sum(s.size for s in cleanable)
        dirty = sum(s.size for s, e in zip(cleanable, ends) if e > first_dirty)
        ratio = dirty / total if total else 0.0
        reason = _why_clean(cleanable, ends, first_dirty, ratio, cfg, now_ms, history)
        if reason is None:
            stats.reason = f"dirty ratio {ratio:.2f} below {cfg.min_cleanable_dirty_ratio}"
            return stats
        aborted = _AbortedRanges(segments)
        offset_map = _offset_map(cleanable, ends, first_dirty, aborted)
        cleaner = _SegmentCleaner(log.directory, cfg, now_ms, offset_map, history, stats, aborted)
        for group in _groups(cleanable, ends, cfg):
            new = cleaner.clean_group(group)
            if not log.replace_segments(group, new, generation):
                new.close()
                new.delete_files()
                stats.reason = "the log changed during cleaning; retrying later"
                return stats
        log.set_first_dirty_offset(end)
        history.save(log.directory, end, now_ms)
    stats.cleaned = True
    stats.reason = reason
    logger.info("cleaned %s: %s", log.topic_partition, stats)
    return stats


def _cleanable(
    segments: tuple[LogSegment, ...], cfg: LogConfig, now_ms: int, last_stable_offset: int
) -> tuple[list[LogSegment], list[int]]:
    """Closed segments that may be cleaned, and each one's end (next base offset)."""
    limit = min(segments[-1].base_offset, last_stable_offset)
    out: list[LogSegment] = []
    ends: list[int] = []
    for seg, nxt in pairwise(segments):
        if nxt.base_offset > limit:
            break
        if cfg.min_compaction_lag_ms and now_ms - seg.largest_timestamp < cfg.min_compaction_lag_ms:
            break
        out.append(seg)
        ends.append(nxt.base_offset)
    return out, ends


def _why_clean(
    cleanable: list[LogSegment],
    ends: list[int],
    first_dirty: int,
    ratio: float,
    cfg: LogConfig,
    now_ms: int,
    history: _TombstoneHistory,
) -> str | None:
    if history.next_horizon >= 0 and now_ms >= history.next_horizon:
        return "tombstones reached delete.retention.ms"
    if ratio > 0 and ratio >= cfg.min_cleanable_dirty_ratio:
        return f"dirty ratio {ratio:.2f}"
    if cfg.max_compaction_lag_ms != LONG_MAX:
        for seg, end in zip(cleanable, ends):
            first = seg.first_batch_timestamp
            if end > first_dirty and first is not None and first >= 0:
                if now_ms - first > cfg.max_compaction_lag_ms:
                    return "max.compaction.lag.ms exceeded"
                break
    return None


def _decode(seg: LogSegment, position: int, header: BatchHeader) -> list[Record] | None:
    try:
        return decode_records(seg.read(position, header.size))[1]
    except (CorruptRecordError, InvalidRecordError) as exc:
        logger.warning("%s: batch at %d kept as is: %s", seg.log_path, position, exc)
        return None


class _AbortedRanges:
    """(first offset, marker offset) of every aborted transaction, per producer, from
    the txn indexes of all segments (a marker may lie beyond the cleanable range)."""

    def __init__(self, segments: tuple[LogSegment, ...]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for seg in segments:
            for e in seg.txn_index.entries:
                self._ranges.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
        for ranges in self._ranges.values():
            ranges.sort()

    def holds(self, header: BatchHeader) -> bool:
        """The transactional data batch belongs to an aborted transaction."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id)
        if not ranges:
            return False
        i = bisect_right(ranges, (header.base_offset, LONG_MAX)) - 1
        return i >= 0 and ranges[i][0] <= header.base_offset < ranges[i][1]


def _offset_map(
    cleanable: list[LogSegment], ends: list[int], first_dirty: int, aborted: _AbortedRanges
) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg, end in zip(cleanable, ends):
        if end <= first_dirty:
            continue
        # Header scan from the start, not an index lookup: a reader thread may be
        # rebuilding this segment's index; headers are cheap next to decoding.
        for pos, header in seg.iter_headers(0):
            if header.last_offset < first_dirty or header.is_control or aborted.holds(header):
                continue
            for r in _decode(seg, pos, header) or ():
                if r.offset >= first_dirty and r.key is not None:
                    latest[r.key] = r.offset
    return latest


def _groups(cleanable: list[LogSegment], ends: list[int], cfg: LogConfig) -> list[list[LogSegment]]:
    """Consecutive segments merged while their total size fits segment.bytes and their
    offsets fit one segment's int32 relative range."""
    groups: list[list[LogSegment]] = []
    size = 0
    for seg, end in zip(cleanable, ends):
        if groups and (
            size + seg.size <= cfg.segment_bytes
            and end - 1 - groups[-1][0].base_offset <= MAX_RELATIVE_OFFSET
        ):
            groups[-1].append(seg)
            size += seg.size
        else:
            groups.append([seg])
            size = seg.size
    return groups


class _SegmentCleaner:
    def __init__(
        self,
        directory: Path,
        cfg: LogConfig,
        now_ms: int,
        offset_map: dict[bytes, int],
        history: _TombstoneHistory,
        stats: CleanStats,
        aborted: _AbortedRanges,
    ) -> None:
        self.aborted = aborted
        self.directory = directory
        self.cfg = cfg
        self.now_ms = now_ms
        self.offset_map = offset_map
        self.history = history
        self.stats = stats

    def clean_group(self, group: list[LogSegment]) -> LogSegment:
        """Write the survivors of `group` to a fsynced `.cleaned` segment."""
        new = LogSegment(
            self.directory,
            group[0].base_offset,
            self.cfg,
            self.now_ms,
            suffix=CLEANED_SUFFIX,
            create=True,
        )
        try:
            for seg in group:
                self.stats.segments_in += 1
                for pos, header in seg.iter_headers(0):
                    self.stats.bytes_in += header.size
                    for batch in self._filter(seg, pos, header):
                        new.append(batch, [parse_header(batch)], [0])
                        self.stats.bytes_out += len(batch)
            for seg in group:  # markers are all kept, so their entries stay valid
                new.txn_index.extend(seg.txn_index.entries)
            new.on_become_inactive()
            new.offset_index.write_pending()  # a full disk fails the cleaning, not later
            new.time_index.write_pending()
            new.sync()
        except BaseException:
            new.close()
            new.delete_files()
            raise
        self.stats.segments_out += 1
        return new

    def _filter(self, seg: LogSegment, pos: int, header: BatchHeader) -> list[bytes]:
        data = seg.read(pos, header.size)
        if header.is_control:
            return [data]
        if self.aborted.holds(header):
            self.stats.records_in += header.records_count
            self.stats.aborted_removed += header.records_count
            return []
        records = _decode(seg, pos, header)
        if records is None:
            return [data]
        keep = [r for r in records if self._retain(r)]
        self.stats.records_in += len(records)
        self.stats.records_kept += len(keep)
        if len(keep) == len(records):
            return [data]
        runs: list[list[Record]] = []
        for r in keep:
            if runs and runs[-1][-1].offset + 1 == r.offset:
                runs[-1].append(r)
            else:
                runs.append([r])
        return [self._rebuild(header, run) for run in runs]

    def _retain(self, r: Record) -> bool:
        if r.key is None:  # compacted topics cannot hold keyless records (Kafka drops them)
            return False
        latest = self.offset_map.get(r.key)
        if latest is not None and r.offset < latest:
            return False
        if r.value is None:
            if self.history.droppable(r.offset):
                self.stats.tombstones_removed += 1
                return False
            self.history.note_kept(r.offset)
        return True

    @staticmethod
    def _rebuild(header: BatchHeader, run: list[Record]) -> bytes:
        seq = header.base_sequence
        if seq >= 0:
            seq = (seq + run[0].offset - header.base_offset) % (1 << 31)
        return build_batch(
            [(r.timestamp, r.key, r.value, r.headers) for r in run],
            base_offset=run[0].offset,
            compression=header.compression,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=seq,
            is_transactional=header.is_transactional,
            timestamp_type=header.timestamp_type,
            partition_leader_epoch=header.partition_leader_epoch,
        )


@dataclass
class _TombstoneHistory:
    """When each offset range was first compacted, to time tombstone removal.

    `passes` are (end offset, time) of recent passes, both increasing: offsets below
    `end` were first compacted by the first pass whose end exceeds them. Passes older
    than delete.retention.ms collapse into `expired_below`.
    """

    retention_ms: int
    now_ms: int
    first_dirty: int
    expired_below: int = 0
    passes: list[tuple[int, int]] = field(default_factory=list)
    next_horizon: int = -1  # earliest time a kept tombstone becomes removable
    stale_horizon: bool = True  # the loaded horizon is recomputed during a pass

    @classmethod
    def load(
        cls, directory: Path, first_dirty: int, cfg: LogConfig, now_ms: int
    ) -> _TombstoneHistory:
        h = cls(cfg.delete_retention_ms, now_ms, first_dirty)
        text = read_single_value(directory / TOMBSTONE_FILE)
        if text:
            try:
                raw = json.loads(text)
                h.expired_below = min(int(raw["expired_below"]), first_dirty)
                h.passes = [(int(e), int(t)) for e, t in raw["passes"] if int(e) <= first_dirty]
                h.next_horizon = int(raw["next_horizon"])
            except (ValueError, KeyError, TypeError):
                logger.warning("%s: unreadable %s, starting afresh", directory, TOMBSTONE_FILE)
        while h.passes and h.passes[0][1] + h.retention_ms <= now_ms:
            h.expired_below = max(h.expired_below, h.passes.pop(0)[0])
        return h

    def _first_compacted(self, offset: int) -> int | None:
        if offset >= self.first_dirty:
            return None  # compacted for the first time now
        if offset < self.expired_below:
            return -1
        i = bisect_right([e for e, _ in self.passes], offset)
        return self.passes[i][1] if i < len(self.passes) else None

    def droppable(self, offset: int) -> bool:
        first = self._first_compacted(offset)
        return first is not None and first + self.retention_ms <= self.now_ms

    def note_kept(self, offset: int) -> None:
        first = self._first_compacted(offset)
        horizon = (self.now_ms if first is None else first) + self.retention_ms
        if self.stale_horizon or horizon < self.next_horizon:
            self.next_horizon = horizon
            self.stale_horizon = False

    def save(self, directory: Path, end: int, now_ms: int) -> None:
        if self.stale_horizon:
            self.next_horizon = -1  # no tombstone kept this pass
        self.passes.append((end, now_ms))
        data = {
            "expired_below": self.expired_below,
            "passes": self.passes,
            "next_horizon": self.next_horizon,
        }
        atomic_write(directory / TOMBSTONE_FILE, json.dumps(data).encode())
