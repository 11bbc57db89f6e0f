"""A producer's state entry and its persistent form, Kafka's `<20-digit offset>.snapshot` files.

`ProducerStateEntry` / `BatchMetadata` (what one partition remembers of one producer) live
here, next to their on-disk row; the rules that use them are in `producer_state`, which
re-exports both.

A snapshot named for offset N holds the producer state after applying every batch below
N (N is exclusive, like Kafka's). Layout, big-endian, identical to Kafka's `PidSnapshot`
version 1 so `kafka-dump-log.sh --files x.snapshot` reads ours and we read Kafka's:

    version  int16 (= 1)
    crc      uint32   CRC-32C of every byte after this field (count included)
    count    int32
    count x  producer_id int64, producer_epoch int16, last_sequence int32,
             last_offset int64, offset_delta int32, timestamp int64,
             coordinator_epoch int32, current_txn_first_offset int64 (-1 = none)

Only each producer's last batch is stored (as in Kafka); `last_offset == -1` means the
producer has no data batch (e.g. its only record is a transaction marker).

Invariants: a snapshot file is written to a temp name, fsynced, renamed, and the directory
fsynced, so a crash leaves the previous set of snapshots or the new one, never a torn
file under a final name. The one exception is `sync=False` (the log's segment roll, which
runs on the event loop): the file is renamed unsynced and the log fsyncs it, then the
directory, in its next flush; a crash before that can leave a torn file, which its CRC
exposes and loading deletes. A file whose length, version or CRC is wrong raises
CorruptSnapshotError; nothing here guesses at partial content.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import crc32c

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE
from tidegate.storage.files import atomic_write, fsync_dir

__all__ = [
    "SEQUENCE_MODULUS",
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "BatchMetadata",
    "CorruptSnapshotError",
    "ProducerStateEntry",
    "SnapshotEntry",
    "decode_snapshot",
    "delete_snapshots_above",
    "delete_snapshots_below",
    "encode_snapshot",
    "keep_latest",
    "list_snapshots",
    "read_latest_snapshot",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers everything after version + crc
_ENTRY = struct.Struct(">qhiqiqiq")
SEQUENCE_MODULUS = 1 << 31  # sequences wrap from INT32_MAX to 0
_NAME_RE = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshotError(KafkaError):
    """A snapshot file failed its length, version or CRC check. Never sent on the wire;
    if it escaped a handler it would be a storage error."""

    code = ErrorCode.kafka_storage_error


class SnapshotEntry(NamedTuple):
    """One producer's row in a snapshot file (Kafka's `PidSnapshot.ProducerEntry`)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    # The batch's max timestamp, reported back for a duplicate. The snapshot format has one
    # timestamp per producer (ours: its last append time), so after a reload it is that.
    timestamp: int


class ProducerStateEntry:
    """One producer's state in one partition. Slotted: 100,000 idle ones must stay cheap."""

    __slots__ = (
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_record_timestamp",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        batches: list[BatchMetadata] | None = None,
        last_timestamp: int = -1,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: list[BatchMetadata] = batches if batches is not None else []
        # When it last wrote, by the broker's clock: what expiry goes by (see
        # producer_state_snapshots.py), and the snapshot's timestamp.
        self.last_timestamp = last_timestamp
        # Kafka's ProducerStateEntry.lastTimestamp, which DescribeProducers reports: the
        # max timestamp of its last data batch, or its last marker's timestamp if a
        # marker came after (a snapshot keeps only `last_timestamp`: reloaded, both are it).
        self.last_record_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def set_epoch(self, epoch: int) -> None:
        """A new epoch starts a new sequence space: forget the old epoch's batches."""
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches = []

    def to_snapshot_entry(self) -> SnapshotEntry:
        """Kafka's snapshot keeps only the last batch."""
        last = self.batches[-1] if self.batches else None
        return SnapshotEntry(
            self.producer_id,
            self.producer_epoch,
            last.last_seq if last else NO_SEQUENCE,
            last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot_entry(cls, s: SnapshotEntry) -> ProducerStateEntry:
        batches = []
        if s.last_offset >= 0:  # else the producer has no data batch, only markers
            first_seq = s.last_sequence
            if s.last_sequence >= 0:
                first_seq = (s.last_sequence - s.offset_delta) % SEQUENCE_MODULUS
            first_offset = s.last_offset - s.offset_delta
            batches.append(
                BatchMetadata(first_seq, s.last_sequence, first_offset, s.last_offset, s.timestamp)
            )
        txn = None if s.current_txn_first_offset < 0 else s.current_txn_first_offset
        return cls(s.producer_id, s.producer_epoch, batches, s.timestamp, s.coordinator_epoch, txn)

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(pid={self.producer_id}, epoch={self.producer_epoch}, "
            f"batches={self.batches}, last_ts={self.last_timestamp}, "
            f"coord_epoch={self.coordinator_epoch}, txn_first={self.current_txn_first_offset})"
        )


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(_HEAD.size + _ENTRY.size * len(entries))
    struct.pack_into(">i", body, _CRC_START, len(entries))
    pos = _HEAD.size
    for e in entries:
        _ENTRY.pack_into(body, pos, *e)
        pos += _ENTRY.size
    crc = crc32c.crc32c(memoryview(body)[_CRC_START:])
    struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
    return bytes(body)


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[SnapshotEntry]:
    """Parse snapshot bytes; raises CorruptSnapshotError on any inconsistency."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes, shorter than the header")
    version, stored_crc, count = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{name}: unknown snapshot version {version}")
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"{name}: CRC mismatch, stored {stored_crc:#010x}, computed {computed:#010x}"
        )
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes do not hold {count} entries")
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)
    ]


def write_snapshot(
    directory: Path, offset: int, entries: list[SnapshotEntry], *, sync: bool = True
) -> Path:
    """Durably write the snapshot for `offset` (temp + fsync + rename + fsync dir); with
    `sync=False`, temp + rename only: the caller fsyncs the file and directory later."""
    path = snapshot_path(directory, offset)
    atomic_write(path, encode_snapshot(entries), sync=sync)
    return path


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    return decode_snapshot(path.read_bytes(), path.name)


def read_latest_snapshot(
    directory: Path, max_offset: int, min_offset: int = 0,
    snapshots: list[tuple[int, Path]] | None = None,
) -> tuple[int, list[SnapshotEntry]] | None:
    """The newest readable snapshot with min_offset <= offset <= max_offset, as
    (offset, entries). A corrupt one is logged, deleted (as Kafka does) and the next older
    one tried; None if there is none. `snapshots`: the directory's `list_snapshots`, if
    the caller has just listed it (a partition's open: one listing instead of two)."""
    listed = list_snapshots(directory) if snapshots is None else snapshots
    for offset, path in reversed(listed):
        if offset > max_offset:
            continue
        if offset < min_offset:
            return None
        try:
            return offset, read_snapshot(path)
        except CorruptSnapshotError as exc:
            log.warning("deleting corrupt producer snapshot %s: %s", path, exc)
            path.unlink(missing_ok=True)
    return None


def list_snapshots(
    directory: Path, names: Iterable[str] | None = None
) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file, oldest first. Temp files are ignored.
    `names`: the directory's file names if the caller has just listed it."""
    found: list[tuple[int, Path]] = []
    if names is None:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return found
    for name in names:
        m = _NAME_RE.match(name)
        if m is not None:
            found.append((int(m.group(1)), directory / name))
    found.sort()
    return found


def _delete(directory: Path, doomed: list[Path], sync: bool = True) -> int:
    for path in doomed:
        path.unlink(missing_ok=True)
    if doomed and sync:
        fsync_dir(directory)
    return len(doomed)


def delete_snapshots_below(directory: Path, offset: int) -> int:
    """Delete snapshots whose offset is < `offset` (retention moved the log start)."""
    return _delete(directory, [p for off, p in list_snapshots(directory) if off < offset])


def delete_snapshots_above(directory: Path, offset: int) -> int:
    """Delete snapshots whose offset is > `offset` (the log was truncated to `offset`)."""
    return _delete(directory, [p for off, p in list_snapshots(directory) if off > offset])


def keep_latest(directory: Path, n: int = 2, *, sync: bool = True) -> int:
    """Delete all but the `n` newest snapshots; returns how many were deleted. With
    `sync=False` the directory is not fsynced (a resurrected old snapshot is harmless)."""
    snaps = list_snapshots(directory)
    doomed = snaps[: max(0, len(snaps) - n)]
    return _delete(directory, [p for _, p in doomed], sync)
