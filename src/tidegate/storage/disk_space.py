"""Free space of a log directory: a full disk logged once, low space warned early.

`LogDirSpace` is told about every write that failed (`write_failed`) and about writes
that succeeded (`write_succeeded`). A full disk (ENOSPC, or EDQUOT for a quota) is
logged once as ERROR when it starts and once when it clears; the failures in between
are counted, not logged, so a producer retrying under load, a checkpoint job or the
group coordinator add no line each. It clears at the first successful write made
`CLEAR_AFTER_S` after the last refused one: on an almost full disk small writes still
fit in a file's last page while larger ones fail, and that must not read as the disk
filling and clearing over and over. Other I/O errors are logged every time: they are
not expected to repeat. `check()` (run periodically) measures the
volume with `statvfs` and warns once when free space falls under
`log.dir.free.space.warn.bytes`, and once when it is back above it.

Work parked on a full disk (a coordinator partition waiting to reload, a marker to
write) asks `freed_since(mark)` whether retrying is worth it: the disk is no longer full,
or `statvfs` shows `FREED_BYTES` more usable space than when its write was refused. So
it retries as soon as space returns, not after a backoff grown while the disk was full.

Thread-safe: writers report from the event loop and from worker threads.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from tidegate.common.clock import Clock, SystemClock

__all__ = [
    "CLEAR_AFTER_S",
    "DEFAULT_WARN_BYTES",
    "FREED_BYTES",
    "LogDirSpace",
    "SpaceUsage",
    "disk_full_error",
    "space_usage",
]

log = logging.getLogger("tidegate.storage.disk")

DEFAULT_WARN_BYTES = 1 << 30
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
CLEAR_AFTER_S = 5.0
FREED_BYTES = 1 << 20  # usable space grown this much since a refused write: retry


def disk_full_error(exc: BaseException | None) -> OSError | None:
    """The ENOSPC / EDQUOT error behind `exc` (itself, or its cause chain), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@dataclass(frozen=True)
class SpaceUsage:
    total_bytes: int
    usable_bytes: int  # what an unprivileged writer may still use (f_bavail)


def space_usage(directory: Path) -> SpaceUsage:
    st = os.statvfs(directory)
    return SpaceUsage(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


class LogDirSpace:
    def __init__(
        self, directory: Path, warn_bytes: int = DEFAULT_WARN_BYTES, clock: Clock | None = None
    ) -> None:
        self.directory = directory
        self.warn_bytes = warn_bytes
        self._clock = clock or SystemClock()
        self._last_refused = 0.0
        self._lock = threading.Lock()
        self.full = False
        self.low = False
        self.refused = 0  # writes refused since the disk became full

    # -- writes ---------------------------------------------------------------------------

    def write_failed(self, exc: BaseException, what: str) -> bool:
        """Report a failed write (`what`: e.g. "appending to orders-0"). True if it was a
        full disk (logged only when the disk became full), False for another error
        (logged as ERROR here)."""
        full = disk_full_error(exc)
        if full is None:
            log.error("storage error in %s while %s: %s", self.directory, what, exc)
            return False
        with self._lock:
            self.refused += 1
            self._last_refused = self._clock.monotonic()
            if self.full:
                return True
            self.full = True
        log.error(
            "disk full: log directory %s refused a write (%s) while %s; produce requests "
            "get KAFKA_STORAGE_ERROR and background jobs retry quietly until space is freed",
            self.directory,
            os.strerror(full.errno or errno.ENOSPC),
            what,
        )
        return True

    def write_succeeded(self) -> None:
        """A write to the directory went through: a full disk has cleared if none was
        refused for `CLEAR_AFTER_S` (module docstring)."""
        if not self.full:  # unlocked fast path, the common case
            return
        with self._lock:
            if not self.full or self._clock.monotonic() - self._last_refused < CLEAR_AFTER_S:
                return
            self.full = False
            refused, self.refused = self.refused, 0
        log.warning(
            "disk no longer full: log directory %s accepts writes again (%d refused "
            "meanwhile)",
            self.directory,
            refused,
        )

    def mark(self) -> int:
        """A mark for `freed_since`, taken when a write was refused: usable bytes now."""
        usage = self.usage()
        return 0 if usage is None else usage.usable_bytes

    def freed_since(self, mark: int) -> bool:
        """Whether a write refused for a full disk when `mark` was taken is worth trying
        again: the disk is not (or no longer) full, or `FREED_BYTES` more are usable. A
        quota (EDQUOT) does not show in `statvfs`: there only the first holds, and the
        caller's backoff does the rest."""
        if not self.full:
            return True
        usage = self.usage()
        return usage is not None and usage.usable_bytes >= mark + FREED_BYTES

    # -- free space -------------------------------------------------------------------------

    def usage(self) -> SpaceUsage | None:
        try:
            return space_usage(self.directory)
        except OSError:
            return None

    def is_low(self, usage: SpaceUsage) -> bool:
        return self.warn_bytes > 0 and usage.usable_bytes < self.warn_bytes

    def check(self) -> SpaceUsage | None:
        """Measure the volume; warn when free space crosses the threshold either way."""
        usage = self.usage()
        if usage is None:
            return None
        low = self.is_low(usage)
        with self._lock:
            changed, self.low = low != self.low, low
        if changed and low:
            log.warning(
                "log directory %s has %s free of %s, under log.dir.free.space.warn.bytes "
                "(%s); when it is full, produce requests fail with KAFKA_STORAGE_ERROR",
                self.directory,
                _size(usage.usable_bytes),
                _size(usage.total_bytes),
                _size(self.warn_bytes),
            )
        elif changed:
            log.info(
                "log directory %s has %s free again (threshold %s)",
                self.directory,
                _size(usage.usable_bytes),
                _size(self.warn_bytes),
            )
        return usage
