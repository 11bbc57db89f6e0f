"""Open a partition directory: check its metadata, load its segments, repair crashes.

`open_partition_dir` checks `partition.metadata` against the expected topic id, reads
the persisted log start offset, consumes the clean-shutdown marker and loads the
segments; whatever recovery repaired is fsynced before the log is used (with
`sync=False` by the caller: LogManager.load syncs each log directory's file system once
after opening every partition).

`load_segments` steps, in order (Kafka's LogLoader, simplified):
1. Remove leftovers of interrupted work: `*.tmp`, `*.deleted`, `*.cleaned` files; finish
   an interrupted cleaner swap (`X.log.swap` exists: the cleaned segment was complete, so
   delete the segments it replaces and rename it to `X.log`; its indexes are rebuilt).
2. Open every `<20 digits>.log`; delete index files whose log is gone.
3. Segments wholly below the recovery point, or all of them after a clean shutdown, are
   trusted: indexes are sanity-checked and rebuilt if wrong. The others are recovered:
   every batch is CRC-checked and the file is cut at the first bad one; if a segment
   had to be cut, the segments after it (written later, never fsynced) are deleted.
4. Transaction indexes (`.txnindex`): from the first segment that was recovered, or whose
   txn index is missing or corrupt, every later segment's txn index is rebuilt from the
   markers (`rebuild_txn_indexes`; needs a scratch producer state, see there), unless
   all those segments were just recovered and hold no control batch (then they are
   emptied: no marker, no aborted transaction to index).

Invariant on return: segments are sorted, non-empty list, each ending on a batch boundary
with offsets below the next segment's base offset.

`load_producer_state` then rebuilds the idempotence state for the recovered segments
(Kafka's loadProducerState): snapshots above the log end are deleted (they describe data
a crash lost), the newest snapshot in [log start, log end] is loaded, and the batch
headers after it are replayed (`replay_producer_state`; headers only, no CRC, no record
decoding). Without a usable snapshot the whole log is replayed from the log start.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from tidegate.common.errors import KafkaStorageError
from tidegate.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, parse_header
from tidegate.records.control import ControlType
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import InconsistentTopicIdError
from tidegate.storage.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_EXT,
    LOG_EXT,
    PARTITION_METADATA,
    SEGMENT_FILE_RE,
    SWAP_SUFFIX,
    TIMEINDEX_EXT,
    TMP_SUFFIX,
    TXNINDEX_EXT,
    fsync_dir,
    parse_partition_dir,
    read_partition_metadata,
    read_single_value,
    segment_path,
    write_partition_metadata,
)
from tidegate.storage.markers import is_marker_batch, read_marker
from tidegate.storage.producer_snapshot import delete_snapshots_above, list_snapshots
from tidegate.storage.producer_state import CompletedTxn, ProducerStateManager
from tidegate.storage.segment import LogSegment
from tidegate.storage.txn_index import TxnIndex, TxnIndexEntry

__all__ = [
    "LoadResult",
    "OpenedPartition",
    "load_producer_state",
    "load_segments",
    "open_partition_dir",
    "rebuild_txn_indexes",
    "replay_batch",
    "replay_producer_state",
]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
LOG_START_OFFSET_FILE = "log-start-offset"
CLEANER_OFFSET_FILE = "cleaner-offset"
_SEGMENT_EXTS = (LOG_EXT, INDEX_EXT, TIMEINDEX_EXT, TXNINDEX_EXT)


@dataclass
class OpenedPartition:
    segments: list[LogSegment]
    log_start_offset: int  # as persisted; the log clamps it to its segments
    topic_id: uuid.UUID | None
    first_dirty_offset: int  # where the cleaner resumes
    # Base offset of the first segment recovery re-read (unflushed before a crash), None
    # if every segment was trusted: the leader epoch cache re-derives its entries there.
    recovered_from: int | None = None
    # The directory's file names after the open (the one listing, kept up to date with
    # what the open removed or created; the segment files' may be stale): the producer
    # snapshots and the epoch checkpoint are found in it. None: list the directory.
    names: set[str] | None = None


def open_partition_dir(
    directory: Path,
    config: LogConfig,
    now_ms: int,
    *,
    topic_id: uuid.UUID | None,
    recovery_point: int | None,
    sync: bool = True,
) -> OpenedPartition:
    """`sync=False`: what recovery repaired or removed is left unsynced; the caller must
    make the whole file system durable (`files.sync_filesystem`) before the log serves
    or any recovery point is checkpointed (LogManager.load does, once for all)."""
    if parse_partition_dir(directory.name) is None:
        raise KafkaStorageError(f"{directory} is not a <topic>-<partition> directory")
    # The directory is listed once, here, and the names feed every later step (leftover
    # removal, segment and index discovery, the snapshots, the epoch checkpoint): CPU
    # per partition is what a start at 10,000 partitions is made of, and each partition
    # was listed four times, with three exists() stats per segment.
    try:
        names = set(os.listdir(directory))
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        names = set()
    try:
        existing = read_partition_metadata(directory) if PARTITION_METADATA in names else None
    except ValueError as exc:
        raise KafkaStorageError(str(exc)) from exc
    if topic_id is not None and existing is None:
        write_partition_metadata(directory, topic_id)
        names.add(PARTITION_METADATA)
    elif topic_id is not None and existing != topic_id:
        raise InconsistentTopicIdError(
            f"{directory} belongs to topic id {existing}, expected {topic_id}"
        )
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = CLEAN_SHUTDOWN_FILE in names
    start = _read_offset(directory / LOG_START_OFFSET_FILE) if LOG_START_OFFSET_FILE in names else 0
    result = load_segments(
        directory, config, now_ms, clean=clean, recovery_point=recovery_point,
        start_offset=start, sync=sync, names=names,
    )
    segs = result.segments
    stale = [i for i, seg in enumerate(segs) if seg.txn_index_stale]
    if stale and all(seg.recovered_controls is False for seg in segs[stale[0]:]):
        # Every segment to rebuild was just recovered (read whole) and holds no control
        # batch, so no marker: their txn indexes are empty, no replay needed (after
        # kill -9 the usual case, and the replay re-read each partition's snapshot).
        for seg in segs[stale[0]:]:
            seg.txn_index.reset()
            seg.txn_index_stale = False
            seg.txn_index.write_pending()
        result.recovered = True
    elif stale:
        log_start = min(max(start, segs[0].base_offset), segs[-1].next_offset)
        rebuild_txn_indexes(directory, segs, stale[0], log_start, now_ms, names)
        result.recovered = True
    if result.recovered and sync:  # make the repaired state durable before trusting it
        for seg in result.segments:
            seg.sync()
        fsync_dir(directory)
    if clean:
        marker.unlink()
        names.discard(CLEAN_SHUTDOWN_FILE)
        if sync:
            fsync_dir(directory)
    first_dirty = (
        _read_offset(directory / CLEANER_OFFSET_FILE) if CLEANER_OFFSET_FILE in names else 0
    )
    return OpenedPartition(
        result.segments, start, topic_id or existing, first_dirty, result.recovered_from,
        names,
    )


def _read_offset(path: Path) -> int:
    """A one-number checkpoint file; 0 if absent or unreadable (both safe defaults)."""
    try:
        return int(read_single_value(path) or 0)
    except ValueError:
        log.warning("%s is unreadable; ignoring it", path)
        return 0


@dataclass
class LoadResult:
    segments: list[LogSegment]
    recovered: bool  # some segment was rewritten (truncated or indexes rebuilt)
    recovered_from: int | None = None  # base offset of the first untrusted segment


def load_segments(
    directory: Path,
    config: LogConfig,
    now_ms: int,
    *,
    clean: bool,
    recovery_point: int | None,
    start_offset: int,
    sync: bool = True,
    names: set[str] | None = None,
) -> LoadResult:
    """`names`: the directory's listing if the caller just made it (`open_partition_dir`);
    it is updated in place for what this removes (leftovers, orphan indexes, segments
    cut after a corruption)."""
    if names is None:
        names = set(os.listdir(directory))
    changed = _remove_leftovers(directory, names)
    bases: list[int] = []
    for name in list(names):
        m = SEGMENT_FILE_RE.match(name)
        if m is None or m.group(3):
            continue
        base = int(m.group(1))
        if m.group(2) == LOG_EXT:
            bases.append(base)
        elif (
            m.group(2) in (INDEX_EXT, TIMEINDEX_EXT, TXNINDEX_EXT)
            and f"{m.group(1)}.{LOG_EXT}" not in names
        ):
            os.unlink(os.path.join(directory, name))
            names.discard(name)
            changed = True
    bases.sort()
    segments: list[LogSegment] = []
    recovered = False
    recovered_from: int | None = None
    for i, base in enumerate(bases):
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        seg = LogSegment(directory, base, config, now_ms, names=names)
        segments.append(seg)
        trusted = clean or (
            recovery_point is not None and nxt is not None and nxt <= recovery_point
        )
        if trusted:
            missing = seg.indexes_missing
            cut = seg.load()
            if nxt is not None and seg.next_offset > nxt:
                cut += seg.recover(max_next_offset=nxt)
            recovered = recovered or cut > 0 or missing
        else:
            cut = seg.recover(max_next_offset=nxt)
            recovered = True
            if recovered_from is None:
                recovered_from = base
            if cut and nxt is not None:
                log.warning(
                    "%s: deleting %d unflushed segments after the corruption in %s",
                    directory,
                    len(bases) - i - 1,
                    seg.log_path.name,
                )
                for later in bases[i + 1 :]:
                    for ext in (LOG_EXT, INDEX_EXT, TIMEINDEX_EXT, TXNINDEX_EXT):
                        doomed = segment_path(directory, later, ext)
                        doomed.unlink(missing_ok=True)
                        names.discard(doomed.name)
                changed = True
                break
    if not segments:
        segments.append(LogSegment(directory, start_offset, config, now_ms, create=True))
        changed = True
    if changed and sync:
        fsync_dir(directory)
    return LoadResult(segments, recovered or changed, recovered_from)


def _remove_leftovers(directory: Path, names: set[str]) -> bool:
    """Remove interrupted work's files named in `names` (updated in place; re-listed
    after a cleaner swap is completed, which renames and removes segment files)."""
    changed = False
    swaps: list[Path] = []
    for name in list(names):
        if name.endswith((TMP_SUFFIX, DELETED_SUFFIX, CLEANED_SUFFIX)):
            os.unlink(os.path.join(directory, name))
            names.discard(name)
            changed = True
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(directory / name)
    for swap in sorted(swaps):
        m = SEGMENT_FILE_RE.match(swap.name)
        if m is None or m.group(2) != LOG_EXT:
            swap.unlink()
            continue
        _complete_swap(directory, int(m.group(1)), swap)
        changed = True
    if swaps:
        names.clear()
        names.update(os.listdir(directory))
    return changed


def _complete_swap(directory: Path, base: int, swap: Path) -> None:
    last = _last_offset(swap)
    log.info("%s: completing interrupted cleaner swap of %s", directory, swap.name)
    for entry in os.scandir(directory):
        m = SEGMENT_FILE_RE.match(entry.name)
        if m is None or m.group(3) or m.group(2) not in _SEGMENT_EXTS:
            continue
        seg_base = int(m.group(1))
        if seg_base == base or (last is not None and base <= seg_base <= last):
            os.unlink(entry.path)
    os.replace(swap, segment_path(directory, base, LOG_EXT))


def _last_offset(path: Path) -> int | None:
    """Last offset of the whole batches in a segment file (header scan only)."""
    last = None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            header = parse_header(os.pread(f.fileno(), HEADER_SIZE, pos))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > size:
                break
            last = header.last_offset
            pos += header.size
    return last


def load_producer_state(
    psm: ProducerStateManager,
    directory: Path,
    segments: list[LogSegment],
    log_start_offset: int,
    now_ms: int,
    names: set[str] | None = None,
) -> int:
    """Rebuild `psm` for freshly loaded `segments`; returns the number of batches
    replayed (0 when a snapshot at the log end was found, e.g. after a clean shutdown).
    `names`: the directory's listing from its open (`OpenedPartition.names`)."""
    log_end = segments[-1].next_offset
    snapshots = list_snapshots(directory, names)  # listed once: a start opens 10,000
    if snapshots and snapshots[-1][0] > log_end:
        delete_snapshots_above(directory, log_end)
        snapshots = [(off, path) for off, path in snapshots if off <= log_end]
    loaded = psm.load_latest_snapshot(
        directory, log_end, log_start_offset=log_start_offset, snapshots=snapshots)
    start = log_start_offset if loaded is None else loaded
    return replay_producer_state(psm, segments, start, now_ms)


def replay_producer_state(
    psm: ProducerStateManager,
    segments: list[LogSegment],
    start: int,
    now_ms: int,
    *,
    index_from: int | None = None,
) -> int:
    """Apply every batch header from the one holding `start` to the end of `segments`
    (batches `psm` already reflects are skipped by `replay`); markers are decoded for
    their type and coordinator epoch. The idle clock of replayed producers starts at
    `now_ms`. With `index_from`, aborted transactions whose marker is in a segment based
    at or above it are appended to that segment's txn index (recovery rebuilds them).
    Returns the number of batches read."""
    count = 0
    for seg in segments:
        if seg.next_offset <= start:
            continue
        position = 0
        if seg.base_offset < start:
            found = seg.find_position(start)
            if found is None:
                continue
            position = found[0]
        indexing = index_from is not None and seg.base_offset >= index_from
        for pos, header in seg.iter_headers(position):
            count += 1
            marker = read_marker(seg, pos, header) if is_marker_batch(header) else None
            replay_batch(psm, header, marker, now_ms, seg.txn_index if indexing else None)
    return count


def replay_batch(
    psm: ProducerStateManager,
    header: BatchHeader,
    marker: tuple[ControlType, int] | None,
    now_ms: int,
    txn_index: TxnIndex | None,
) -> CompletedTxn | None:
    """Apply one stored batch to `psm` without validation, as the log already holds it:
    recovery's replay and a follower's append of the leader's batches (Kafka checks
    nothing there either). `marker` is the batch's (type, coordinator epoch) when
    `markers.is_marker_batch` (None if it is not a marker); an aborted transaction it
    ends gets its entry in `txn_index` (the marker's segment's), if given, with Kafka's
    lastStableOffset. Returns the transaction the marker ended, if any."""
    control_type, epoch = marker if marker is not None else (None, None)
    done = psm.replay(header, now_ms, coordinator_epoch=epoch, control_type=control_type)
    if txn_index is not None and done is not None and done.is_aborted:
        txn_index.append(
            TxnIndexEntry(
                done.producer_id, done.first_offset, done.last_offset,
                psm.index_stable_offset(done),
            )
        )
    return done


def rebuild_txn_indexes(
    directory: Path, segments: list[LogSegment], first: int, log_start_offset: int, now_ms: int,
    names: set[str] | None = None,
) -> None:
    """Rebuild the txn indexes of `segments[first:]` from their markers. A scratch
    producer state is loaded from the newest snapshot at or below the first rebuilt
    segment (else the log start) and replayed to the end, so transactions that began
    in earlier segments get their true first offset."""
    base = segments[first].base_offset
    # debug: after kill -9 every partition written since the last checkpoint gets here
    # (10,000 lines at 10,000 partitions); LogManager.load says how many were recovered
    log.debug("%s: rebuilding transaction indexes from offset %d", directory, base)
    psm = ProducerStateManager()
    psm.on_high_watermark_updated(segments[-1].next_offset)  # no unreplicated bookkeeping
    loaded = psm.load_latest_snapshot(
        directory, base, log_start_offset=log_start_offset,
        snapshots=None if names is None else list_snapshots(directory, names))
    for seg in segments[first:]:
        seg.txn_index.reset()
        seg.txn_index_stale = False
    start = log_start_offset if loaded is None else loaded
    replay_producer_state(psm, segments, start, now_ms, index_from=base)
    for seg in segments[first:]:
        seg.txn_index.write_pending()  # the caller syncs them; a full disk fails the open
