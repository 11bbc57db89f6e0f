"""File names and small metadata files of a log directory, written crash-safely.

Names follow Kafka: a partition directory is `<topic>-<partition>`; a segment's files are
`<20-digit base offset>.log|.index|.timeindex|.txnindex`, with `.cleaned` / `.swap` / `.deleted`
suffixes while the cleaner or a deletion is in flight. `partition.metadata`,
`meta.properties` and offset checkpoints use Kafka's text formats.

Invariant: every metadata file is replaced atomically (write a temp file, fsync it,
rename over the old one, fsync the directory), so a crash leaves the old or the new
version, never a torn one.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = [
    "LOG_EXT",
    "PARTITION_METADATA",
    "atomic_write",
    "fsync_dir",
    "fsync_if_exists",
    "kafka_uuid",
    "parse_kafka_uuid",
    "parse_partition_dir",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "read_properties",
    "read_single_value",
    "segment_path",
    "sync_filesystem",
    "write_offset_checkpoint",
    "write_partition_metadata",
    "write_properties",
]

LOG_EXT = "log"
INDEX_EXT = "index"
TIMEINDEX_EXT = "timeindex"
TXNINDEX_EXT = "txnindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"

SEGMENT_FILE_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex|snapshot)(\.\w+)?$")
_PARTITION_DIR_RE = re.compile(r"^(.+)-(0|[1-9]\d{0,9})$")


def segment_path(directory: Path, base_offset: int, ext: str, suffix: str = "") -> Path:
    return directory / f"{base_offset:020d}.{ext}{suffix}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`orders-3` -> ("orders", 3); None for names that are not partition dirs."""
    m = _PARTITION_DIR_RE.match(name)
    if m is None:
        return None
    return m.group(1), int(m.group(2))


def fsync_dir(path: Path) -> None:
    """Make creations, renames and deletions inside `path` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_if_exists(path: Path) -> None:
    """fsync a file written unsynced earlier; it may have been deleted since."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: Path) -> None:
    """Make every write to the file system holding `path` durable: Linux's syncfs(2),
    else os.sync(). One call replaces the thousands of fsyncs a start after a crash would
    otherwise make (every recovered segment, index, snapshot and directory of every
    partition: ~8 per partition, 80,000 at 10,000 partitions). syncfs reports writeback
    errors (Linux >= 5.8): OSError then, as a failed fsync would."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        syncfs = _libc_syncfs()
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)


def syncfs_reporting_errors() -> Callable[[int], None] | None:
    """syncfs(2) on an open fd, raising OSError on failure, where it reports writeback
    errors (Linux >= 5.8; the fd's own error cursor, as fsync's); else None (os.sync
    reports none, so it cannot stand in for fsyncs that must fail on a lost write)."""
    syncfs = _libc_syncfs()
    try:
        version = tuple(int(p) for p in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return None
    if syncfs is None or version < (5, 8):
        return None

    def call(fd: int) -> None:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    return call


@functools.cache
def _libc_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return fn


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data` through a temporary file and a rename; with `sync`,
    fsynced (file, then directory). A failed write leaves `path` as it was."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)  # a full disk: leave no partial file behind
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def read_single_value(path: Path) -> str | None:
    """Contents of a small text file, stripped; None if it does not exist."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


# -- topic ids ------------------------------------------------------------------------


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text.strip() + "==")
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a base64 topic id")
    return uuid.UUID(bytes=raw)


PARTITION_METADATA = "partition.metadata"


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    text = f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n"
    atomic_write(directory / PARTITION_METADATA, text.encode("ascii"))


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id in `partition.metadata`, None if absent; ValueError if malformed."""
    text = read_single_value(directory / PARTITION_METADATA)
    if text is None:
        return None
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines())
    )
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"unrecognised partition.metadata in {directory}: {text!r}")
    return parse_kafka_uuid(fields["topic_id"])


# -- Java-style properties (meta.properties) ------------------------------------------


def read_properties(path: Path) -> dict[str, str] | None:
    text = read_single_value(path)
    if text is None:
        return None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    return props


def write_properties(path: Path, props: Mapping[str, str], comment: str) -> None:
    lines = [f"#{comment}"] + [f"{k}={v}" for k, v in props.items()]
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))


# -- offset checkpoints (recovery-point-offset-checkpoint etc.) -----------------------


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Kafka's checkpoint format: version 0, entry count, then `topic partition offset`."""
    lines = ["0", str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file; {} if it is absent. ValueError if malformed."""
    text = read_single_value(path)
    if text is None:
        return {}
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"unrecognised checkpoint file {path}")
    count = int(lines[1])
    entries = lines[2:]
    if len(entries) != count:
        raise ValueError(f"checkpoint file {path} declares {count} entries, has {len(entries)}")
    out: dict[tuple[str, int], int] = {}
    for line in entries:
        topic, partition, offset = line.split()
        out[(topic, int(partition))] = int(offset)
    return out
