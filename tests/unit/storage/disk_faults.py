"""`Disk`: file writes that fail the way they do on a full tmpfs, for tests.

Patches `os.write`, `os.pwrite` and `os.pwritev` (what the storage layer writes with)
while installed;
only writes to files under `root` are limited. Page-granular like tmpfs: a write within a
file's last page needs no new page, one past it does; a write needing more pages than
`free` writes what fits (a short write), and the next one fails with ENOSPC. `strict`
refuses every write however small (a disk where not even the last page has room).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

__all__ = ["Disk"]


class Disk:
    """File writes under `root` take pages from `free` (None: unlimited), like tmpfs:
    a write within a file's last page needs none, one past it needs new pages; a write
    needing more than are left writes what fits (a short write), the next one fails
    with ENOSPC. So a small marker may fit in the log's last page while the first entry
    of an empty `.txnindex` does not."""

    PAGE = 256

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve())
        self.free: int | None = None
        self.strict = False
        self.refused = 0

    def _allow(self, fd: int, n: int, pos: int | None) -> int:
        if (self.free is None and not self.strict) or n == 0:
            return n
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return n
        if not path.startswith(self.root):
            return n
        if self.strict:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if pos is None:
            pos = os.lseek(fd, 0, os.SEEK_CUR)
        page = self.PAGE
        have = -(-os.fstat(fd).st_size // page)  # pages the file has
        room = (have + self.free) * page - pos  # bytes that can go in from pos
        if room <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(n, room)
        self.free -= max(0, -(-(pos + n) // page) - have)
        return n

    @contextmanager
    def installed(self) -> Iterator[Disk]:
        real_write, real_pwrite, real_pwritev = os.write, os.pwrite, os.pwritev

        def write(fd: int, data: bytes | memoryview) -> int:
            return real_write(fd, memoryview(data)[: self._allow(fd, len(data), None)])

        def pwrite(fd: int, data: bytes | memoryview, pos: int) -> int:
            return real_pwrite(fd, memoryview(data)[: self._allow(fd, len(data), pos)], pos)

        def pwritev(fd: int, pieces: Sequence[bytes | memoryview], pos: int) -> int:
            allowed = self._allow(fd, sum(len(p) for p in pieces), pos)
            cut = []  # the pieces up to what fits
            for p in pieces:
                if allowed <= 0:
                    break
                cut.append(memoryview(p)[:allowed])
                allowed -= len(cut[-1])
            return real_pwritev(fd, cut, pos)

        with mock.patch.object(os, "write", write), mock.patch.object(os, "pwrite", pwrite), \
                mock.patch.object(os, "pwritev", pwritev):
            yield self
