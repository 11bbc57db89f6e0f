"""The leader epoch cache of one partition log and Kafka's `leader-epoch-checkpoint` file.

Every batch a leader writes carries its leader epoch (`partition_leader_epoch`). The cache
remembers where each epoch began: a list of `EpochEntry(epoch, start_offset)`, Kafka's
`LeaderEpochFileCache`. It answers OffsetForLeaderEpoch (`end_offset_for`), lets a
follower find where its log diverges from the leader's (KIP-101, KIP-279; the follower side
of that dialogue is `tidegate.replication.follower.truncation_offset`), and follows the log
when it is truncated at either end.

The file, `<partition dir>/leader-epoch-checkpoint`, has Kafka's text format, so a Kafka
operator's tools read it:

    0               <- version
    2               <- number of entries
    0 0             <- "epoch startOffset", oldest first
    3 1200

It is rewritten whole, atomically (`files.atomic_write`: temp file, fsync, rename, fsync of
the directory) after every change, so a crash leaves the old or the new list, never a torn
one. The exception is a broker start (`Log.open(sync=False)`): the rebuilt file is written
unsynced and made durable by LogManager.load's one syncfs per log dir (an fsynced write
per partition was 80 % of a clean start at 10,000 partitions); a crash before that sync
may leave it empty, which is refused as malformed and rebuilt. A stale file is harmless:
recovery re-assigns the epochs of the batches it replays and truncates the cache to the
recovered log end.

Invariants (after every public call):
- epochs and start offsets both strictly increase along the list (`assign` removes entries
  that would break this, as Kafka does, rather than keeping a list that contradicts the log);
- epochs and offsets are >= 0 (batches without an epoch, -1, are never assigned: the caller
  skips them, as Kafka's `LogSegment.recover` does);
- the file holds exactly `entries` whenever a call that changed them returned without error.
  If the write fails (`KafkaStorageError`, with the `OSError` as its cause so the disk-space
  tracker can see ENOSPC) memory is ahead of the file; the log directory is then unusable
  anyway, as in Kafka, and the next start rebuilds from the log.

At open (`load_leader_epochs`, Kafka's LogLoader): the file is trusted for the segments
below the recovery point; the epochs of the segments recovery re-read (written after the
last flush) are re-assigned from their batch headers, and the cache is cut to the log's
end and start. A missing file with epochs in the log's last batch, a malformed file, or
one whose entries reach past the log end is rebuilt from every batch header (headers
only, no CRC, no records). A log whose last batch has no epoch and no file (every log of
the embedded broker) is not scanned at all: it has nothing to rebuild.

Thread-safety: none of its own. The `Log` owns its cache and calls it only under its lock,
like every other piece of per-log state; readers elsewhere go through the `Log`.
Sans-IO apart from the checkpoint file, which is written only when `path` is set (an
in-memory cache, `path=None`, serves tests and the replication model).
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tidegate.common.errors import KafkaStorageError
from tidegate.storage.files import atomic_write, read_single_value

if TYPE_CHECKING:
    from tidegate.records.batch import BatchHeader
    from tidegate.storage.segment import LogSegment

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "LeaderEpochCache",
    "assign_from_headers",
    "load_leader_epochs",
    "read_leader_epoch_checkpoint",
    "write_leader_epoch_checkpoint",
]

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
_VERSION = "0"

# Kafka's sentinels (RecordBatch.NO_PARTITION_LEADER_EPOCH, EpochEndOffset.UNDEFINED_*).
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader epoch `epoch` wrote its first batch at `start_offset`."""

    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """An OffsetForLeaderEpoch answer: the largest epoch <= the one asked for, and where
    it ended (the next epoch's start offset, or the log end for the latest epoch)."""

    epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


# -- the file ---------------------------------------------------------------------------


def write_leader_epoch_checkpoint(
    path: Path, entries: Sequence[EpochEntry], *, sync: bool = True
) -> None:
    """`sync=False` (a broker start, `Log.open(sync=False)`): the caller syncs the file
    system before the log serves; a crash before that may leave the file empty, which
    `read_leader_epoch_checkpoint` refuses, so the next start rebuilds it from the log."""
    lines = [_VERSION, str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode("ascii"), sync=sync)


def read_leader_epoch_checkpoint(path: Path) -> list[EpochEntry]:
    """The entries of a checkpoint file, as written; [] if it does not exist.
    ValueError if it is malformed (wrong version, count, or a line that is not two ints)."""
    text = read_single_value(path)
    if text is None:
        return []
    if text == "":  # never written so (an empty cache is "0\n0\n"): an unsynced write
        raise ValueError(f"leader epoch checkpoint {path} is empty")  # a crash cut short
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != _VERSION:
        raise ValueError(f"unrecognised leader epoch checkpoint {path}")
    try:
        count = int(lines[1])
    except ValueError:
        raise ValueError(f"leader epoch checkpoint {path}: bad entry count {lines[1]!r}") from None
    body = [line for line in lines[2:] if line.strip()]
    if len(body) != count:
        raise ValueError(
            f"leader epoch checkpoint {path} declares {count} entries, has {len(body)}"
        )
    out: list[EpochEntry] = []
    for line in body:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"leader epoch checkpoint {path}: malformed line {line!r}")
        try:
            out.append(EpochEntry(int(fields[0]), int(fields[1])))
        except ValueError:
            raise ValueError(f"leader epoch checkpoint {path}: malformed line {line!r}") from None
    return out


# -- the cache --------------------------------------------------------------------------


class LeaderEpochCache:
    """Kafka's `LeaderEpochFileCache` for one log (see the module docstring)."""

    def __init__(self, path: Path | None = None, entries: Iterable[EpochEntry] = ()) -> None:
        self._path = path
        self._entries: list[EpochEntry] = []
        # Loading goes through the same rule as live assignment, as Kafka's constructor
        # does, so a hand-edited file with a non-monotonic line cannot break the invariant.
        for entry in entries:
            self._assign(entry)

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """The cache of the log in `directory`, from its checkpoint file (empty if absent).
        ValueError if the file is malformed: the caller rebuilds from the log's batches."""
        path = directory / CHECKPOINT_FILE
        return cls(path, read_leader_epoch_checkpoint(path))

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        inner = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache([{inner}])"

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the newest batch's leader, None for a log without epochs."""
        return self._entries[-1].epoch if self._entries else None

    # -- changes ------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset` (a leader taking over, or a batch
        of a new epoch appended). Returns whether the list changed.

        Kafka's rule: the same epoch again at the same or a later offset is ignored (the
        common case: every batch of the current epoch); anything else first removes, from
        the end, the entries it contradicts (an epoch >= `epoch` or a start offset >=
        `start_offset`), then appends. With `flush=False` (recovery replaying many
        batches) the caller calls `flush()` once at the end. ValueError for negative
        values: batches without an epoch are not assigned."""
        changed = self._assign(EpochEntry(epoch, start_offset))
        if changed and flush:
            self.flush()
        return changed

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        last = self.latest_entry
        same_epoch = last is not None and entry.epoch == last.epoch
        if same_epoch and last is not None and entry.start_offset >= last.start_offset:
            return False
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        # An entry replaced at the very same offset only means no batch was written under
        # it (a leader re-elected before appending): nothing to warn about.
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning(
                "leader epoch entry %s removed conflicting entries %s (%s)",
                entry, list(reversed(removed)), self._path,
            )
        self._entries.append(entry)
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> bool:
        """The log was truncated to `end_offset`: drop the epochs that start at or after it.
        Returns whether the list changed (`flush` as in `assign`)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return False
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        if flush:
            self.flush()
        return True

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> bool:
        """The log start moved to `start_offset` (retention, DeleteRecords): drop epochs
        that start at or before it, keeping the last of them, moved to `start_offset`, so
        that the epoch of the first remaining batch stays known. Kafka's
        `truncateFromStart`: an entry starting exactly at `start_offset` is kept as is.
        Returns whether the list changed (`flush` as in `assign`)."""
        cut = 0
        while cut < len(self._entries) and self._entries[cut].start_offset <= start_offset:
            cut += 1
        if cut == 0:
            return False
        first = EpochEntry(self._entries[cut - 1].epoch, start_offset)
        if self._entries[:cut] == [first]:
            return False
        self._entries[:cut] = [first]
        if flush:
            self.flush()
        return True

    def clear_and_flush(self, *, flush: bool = True) -> bool:
        """Forget every epoch (the log was emptied and restarts from scratch). Returns
        whether there was anything to forget; the file is written either way if `flush`."""
        changed = bool(self._entries)
        self._entries.clear()
        if flush:
            self.flush()
        return changed

    def flush(self) -> None:
        """Write the checkpoint; KafkaStorageError (OSError as its cause) if that fails."""
        try:
            self.persist()
        except OSError as exc:
            raise KafkaStorageError(f"cannot write {self._path}: {exc}") from exc

    def persist(self) -> None:
        """`flush` raising the bare OSError: for the `Log`, whose flush and close report
        disk errors as OSError like every other file they write."""
        if self._path is not None:
            write_leader_epoch_checkpoint(self._path, self._entries)

    # -- queries ------------------------------------------------------------------------

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the largest epoch <= `requested_epoch` and its end offset.

        As Kafka's `endOffsetFor`:
        - an undefined request (-1), an empty cache, or an epoch above every known one:
          `UNDEFINED` (-1, -1);
        - the latest epoch: (it, `log_end_offset`) — it is still being written to;
        - an epoch below the earliest known one: (`requested_epoch`, the earliest entry's
          start offset). The log holds nothing of that epoch or before any more (retention
          moved past it); the follower keeps what is below that offset and the leader's
          log start settles the rest. (Kafka's own doc comment still says UNDEFINED here,
          its code has answered this way since 2.1; we follow the code.)
        - otherwise: (the largest known epoch <= requested, the start offset of the first
          epoch above requested)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED
        if self._entries[-1].epoch == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED
        floor: EpochEntry | None = None
        for e in self._entries:
            if e.epoch > requested_epoch:
                break
            floor = e
        if floor is None:
            return EpochEndOffset(requested_epoch, higher.start_offset)
        return EpochEndOffset(floor.epoch, higher.start_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose leader wrote `offset` (the last entry starting at or before it);
        None if `offset` lies before every entry or the cache is empty."""
        found: int | None = None
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found


# -- at open ----------------------------------------------------------------------------


def assign_from_headers(cache: LeaderEpochCache, headers: Iterable[BatchHeader]) -> bool:
    """Assign the epoch of every batch that starts a newer one (Kafka's rule for appends
    and recovery: batches without an epoch, -1, are skipped). Memory only; returns whether
    the cache changed (the caller flushes)."""
    changed = False
    for h in headers:
        epoch = h.partition_leader_epoch
        if epoch < 0:
            continue
        latest = cache.latest_epoch
        if latest is None or epoch > latest:
            changed = cache.assign(epoch, h.base_offset, flush=False) or changed
    return changed


def _headers_from(segments: Sequence[LogSegment], offset: int) -> Iterable[BatchHeader]:
    for seg in segments:
        if seg.next_offset > offset:
            for _, header in seg.iter_headers(0):
                yield header


def _last_batch_epoch(segments: Sequence[LogSegment]) -> int:
    for seg in reversed(segments):
        if seg.next_offset > seg.base_offset:
            found = seg.find_position(seg.next_offset - 1)
            if found is not None:
                return found[1].partition_leader_epoch
    return UNDEFINED_EPOCH


def load_leader_epochs(
    directory: Path,
    segments: Sequence[LogSegment],
    log_start_offset: int,
    recovered_from: int | None,
    names: Container[str] | None = None,
) -> tuple[LeaderEpochCache, bool]:
    """The epoch cache of a freshly loaded log (see the module docstring) and whether it
    differs from the file (the caller persists it). `recovered_from`: base offset of the
    first segment recovery re-read after an unclean shutdown, None if none was.
    `names`: the directory's file names if just listed (no lookup of an absent file)."""
    path = directory / CHECKPOINT_FILE
    log_end = segments[-1].next_offset
    try:
        if names is not None and CHECKPOINT_FILE not in names:
            cache, present = LeaderEpochCache(path), False
        else:
            cache = LeaderEpochCache.load(directory)
            present = names is not None or path.exists()
    except ValueError as exc:
        log.warning("%s; rebuilding it from the log", exc)
        cache, present = LeaderEpochCache(path), False
    if not present and _last_batch_epoch(segments) < 0:
        return cache, False  # a log without epochs (embedded broker): nothing to rebuild
    before = cache.entries
    latest = cache.latest_entry
    scan_from: int | None
    if not present or (latest is not None and latest.start_offset > log_end):
        if present:
            log.warning("%s reaches past the log end %d; rebuilding it from the log",
                        path, log_end)
        cache.clear_and_flush(flush=False)
        scan_from = log_start_offset
    else:
        # Entries from the first re-read segment on are re-derived from its batches: the
        # file may be older (flushed lazily) or newer (a truncation) than that data.
        scan_from = recovered_from
        cache.truncate_from_end(log_end if scan_from is None else min(scan_from, log_end),
                                flush=False)
    if scan_from is not None:
        assign_from_headers(cache, _headers_from(segments, scan_from))
    cache.truncate_from_start(log_start_offset, flush=False)
    return cache, not present or cache.entries != before
