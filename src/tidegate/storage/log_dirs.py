"""`LogDirs`: the directories of `log.dirs` (JBOD) — where each partition lives, which
directories are offline, and moving a partition's files from one to another.

With one directory (the default) every partition lives in it and nothing here changes
what is on disk. With several, as Kafka's LogManager:

- a new partition goes to the online directory holding the fewest partitions (ties:
  the first listed), Kafka's placement rule; an existing one is found where it is;
- a directory whose write failed with an I/O error other than a full disk (EIO, the
  directory gone) goes offline (Kafka's LogDirFailureChannel): its partitions are
  dropped from service and answer KAFKA_STORAGE_ERROR until the broker restarts with
  the directory repaired; the other directories keep serving;
- a partition moved to another directory (AlterReplicaLogDirs) is copied to
  `<dst>/<topic>-<partition>.<uuid>-future` and fsynced, the source renamed to
  `...-delete`, then the copy renamed to its final name. A crash before the source's
  rename leaves an incomplete `-future` copy that `resolve_futures` removes at the next
  start; a crash after it leaves a complete one, which it promotes.

Sans-IO apart from the file operations; callers hold their own lock around the maps.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from tidegate.storage.errors import LogDirectoryError
from tidegate.storage.files import fsync_dir, parse_partition_dir

__all__ = ["FUTURE_SUFFIX", "LogDirs", "copy_partition_dir"]

FUTURE_SUFFIX = "-future"
TopicPartition = tuple[str, int]


class LogDirs:
    def __init__(self, dirs: Iterable[Path]) -> None:
        self.dirs = list(dirs)
        if not self.dirs:
            raise LogDirectoryError("no log directory configured")
        seen: dict[Path, Path] = {}
        for d in self.dirs:
            key = Path(os.path.abspath(d))  # normalised: a/../b is b
            if key in seen:
                raise LogDirectoryError(f"log.dirs names {d} twice")
            seen[key] = d
        self.jbod = len(self.dirs) > 1
        self.offline: dict[Path, str] = {}  # directory -> why it went offline
        self.where: dict[TopicPartition, Path] = {}  # partition -> its directory

    @property
    def first(self) -> Path:
        return self.dirs[0]

    def online(self) -> list[Path]:
        return [d for d in self.dirs if d not in self.offline]

    def find(self, path: str) -> Path | None:
        """The configured directory that `path` (as a client sends it) names, if any."""
        want = os.path.abspath(path)
        for d in self.dirs:
            if os.path.abspath(d) == want or str(d.resolve()) == want:
                return d
        return None

    def place(self, tp: TopicPartition) -> Path:
        """Where `tp` lives; a new partition goes to the least-loaded online directory."""
        d = self.where.get(tp)
        if d is not None:
            return d
        if not self.jbod:
            d = self.first
        else:
            online = self.online()
            if not online:
                raise LogDirectoryError("every log directory is offline")
            counts = dict.fromkeys(online, 0)
            for other in self.where.values():
                if other in counts:
                    counts[other] += 1
            d = min(online, key=lambda x: counts[x])  # min keeps the first of a tie
        self.where[tp] = d
        return d

    def is_offline(self, tp: TopicPartition) -> bool:
        d = self.where.get(tp)
        return d is not None and d in self.offline

    def partitions_in(self, d: Path) -> list[TopicPartition]:
        return [tp for tp, x in self.where.items() if x == d]

    def resolve_futures(self, d: Path, live: set[TopicPartition]) -> list[str]:
        """At load, before partitions are found: each `-future` copy in `d` is removed if
        its partition still has a live directory anywhere (an interrupted copy), else
        promoted to the partition's name (the move got past the source's rename).
        Returns what was done, for the log."""
        done = []
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if not (entry.is_dir() and entry.name.endswith(FUTURE_SUFFIX)):
                continue
            base = entry.name.rsplit(".", 1)[0]
            tp = parse_partition_dir(base)
            if tp is None or tp in live:
                shutil.rmtree(entry.path, ignore_errors=True)
                done.append(f"removed unfinished move {entry.name}")
            else:
                os.replace(entry.path, d / base)
                fsync_dir(d)
                live.add(tp)
                done.append(f"finished move of {base} into {d}")
        return done


def copy_partition_dir(src: Path, dst_dir: Path) -> Path:
    """Copy a closed partition directory into `dst_dir` as a fsynced `-future` copy;
    returns the copy's path (the caller renames the source away, then the copy)."""
    future = dst_dir / f"{src.name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"
    future.mkdir()
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if not entry.is_file():
            continue
        target = future / entry.name
        shutil.copyfile(entry.path, target)
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(future)
    fsync_dir(dst_dir)
    return future
