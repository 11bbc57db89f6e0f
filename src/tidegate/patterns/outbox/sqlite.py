"""`SqliteOutboxStore`: the outbox table in an SQLite database (see store.py).

The relay lock is an exclusive `flock` on ``<database>.relay-lock`` beside the database
file: SQLite is a local database, so every relay of a table runs on its machine, and
the OS drops the lock when the process dies (kill -9 included). Marking rows runs in a
``BEGIN IMMEDIATE`` transaction, in the process holding that lock.

SQLite has no LISTEN/NOTIFY; `wait` polls ``PRAGMA data_version`` (a counter SQLite
bumps when another connection commits, read without touching the table) every 20 ms,
so a relay wakes within ~20 ms of a commit and costs next to nothing while idle.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Sequence
from typing import IO

from tidegate.patterns.outbox.store import (
    COLUMNS,
    OutboxRow,
    OutboxTableError,
    check_identifier,
    payload_bytes,
)

__all__ = ["SqliteOutboxStore", "sqlite_schema"]

_WAKE_CHECK_S = 0.02


def sqlite_schema(table: str = "outbox") -> str:
    """The DDL of an outbox table for SQLite (run it in your own migrations)."""
    t = check_identifier(table)
    index = t.replace(".", "_")
    return (
        f"CREATE TABLE {t} (\n"
        "    seq INTEGER PRIMARY KEY AUTOINCREMENT,\n"
        "    id TEXT NOT NULL UNIQUE,\n"
        "    aggregatetype TEXT NOT NULL,\n"
        "    aggregateid TEXT NOT NULL,\n"
        "    type TEXT NOT NULL,\n"
        "    payload BLOB,\n"
        "    relay_txn TEXT\n"
        ");\n"
        f"CREATE INDEX {index}_unpublished ON {t} (seq) WHERE relay_txn IS NULL;\n"
        f"CREATE INDEX {index}_relay_txn ON {t} (relay_txn) WHERE relay_txn IS NOT NULL;\n"
    )


class SqliteOutboxStore:
    """See the module docstring; `path` is the database file (which must exist unless
    `create`: the relay creates nothing it was not asked to)."""

    def __init__(self, path: str, table: str = "outbox", *, busy_timeout_s: float = 30.0,
                 create: bool = False) -> None:
        self.table = check_identifier(table)
        self.path = os.path.abspath(path)
        self.description = f"sqlite:///{self.path}"
        if not create and not os.path.exists(self.path):
            # sqlite3.connect would create an empty database: say what is missing instead.
            raise OutboxTableError(f"no SQLite database at {self.path}; create it with "
                                   f"the outbox table:\n{sqlite_schema(table)}")
        # Autocommit: reads see the latest commit; `mark` opens its own transaction.
        self.conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                    check_same_thread=False)
        self._lock_file: IO[bytes] | None = None
        self._version = self._data_version()

    def create_schema(self) -> None:
        """Create the outbox table and its indexes (only when asked)."""
        self.conn.executescript(sqlite_schema(self.table))

    def check_table(self) -> None:
        cols = {row[1] for row in self.conn.execute(f"PRAGMA table_info({self.table})")}
        if not cols:
            raise OutboxTableError(
                f"{self.description} has no table {self.table!r}; the relay creates "
                f"nothing. Expected:\n{sqlite_schema(self.table)}")
        missing = [c for c in COLUMNS if c not in cols]
        if missing:
            raise OutboxTableError(
                f"table {self.table!r} in {self.description} lacks column(s) "
                f"{', '.join(missing)}. Expected:\n{sqlite_schema(self.table)}")

    def try_acquire(self) -> bool:
        if self._lock_file is not None:
            return True
        f = open(self.path + ".relay-lock", "ab")  # noqa: SIM115 (held while we lead)
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        self._lock_file = f
        return True

    def fetch(self, limit: int) -> list[OutboxRow]:
        cur = self.conn.execute(
            f"SELECT seq, id, aggregatetype, aggregateid, type, payload FROM {self.table} "
            "WHERE relay_txn IS NULL ORDER BY seq LIMIT ?", (limit,))
        return [OutboxRow(int(s), str(i), str(at), str(ai), str(ty), payload_bytes(p))
                for s, i, at, ai, ty, p in cur.fetchall()]

    def mark(self, seqs: Sequence[int], marker: str) -> None:
        if self._lock_file is None:
            raise RuntimeError("mark() without the relay lock")
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            # A transaction name can repeat (relay.py): older rows give it up first.
            conn.execute(f"UPDATE {self.table} SET relay_txn = relay_txn || '/old' "
                         "WHERE relay_txn = ?", (marker,))
            n = 0
            # Chunks: SQLite limits a statement's parameters (999 in old builds).
            for i in range(0, len(seqs), 500):
                chunk = seqs[i:i + 500]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    f"UPDATE {self.table} SET relay_txn = ? "
                    f"WHERE relay_txn IS NULL AND seq IN ({marks})", (marker, *chunk))
                n += cur.rowcount
            if n != len(seqs):
                raise RuntimeError(f"marked {n} of {len(seqs)} rows: some were published "
                                   "or deleted behind the relay's back")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def is_marked(self, marker: str) -> bool:
        row = self.conn.execute(
            f"SELECT 1 FROM {self.table} WHERE relay_txn = ? LIMIT 1", (marker,)).fetchone()
        return row is not None

    def delete_published(self) -> int:
        if self._lock_file is None:
            raise RuntimeError("delete_published() without the relay lock")
        cur = self.conn.execute(f"DELETE FROM {self.table} WHERE relay_txn IS NOT NULL")
        return int(cur.rowcount)

    def _data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            version = self._data_version()
            if version != self._version:
                self._version = version
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(_WAKE_CHECK_S, left))

    def reset(self) -> None:
        self._release()

    def _release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the descriptor drops the flock
            self._lock_file = None

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            self._release()
