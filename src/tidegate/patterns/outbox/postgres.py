"""`PostgresOutboxStore`: the outbox table in PostgreSQL (see store.py), via psycopg 3.

Install the driver with ``pip install 'tidegate[postgres]'``.

One connection, in autocommit mode, does everything: it holds the relay lock (a
session-level ``pg_try_advisory_lock`` on a key derived from the table name), runs
`mark` in an explicit transaction, and LISTENs for wake-ups. Because the lock and
the marking share a session, a relay whose connection broke has lost both: it cannot
mark rows after another relay took the lock (PostgreSQL releases a dead session's
advisory locks). After any error the relay calls `reset` (close; reconnect lazily) and
must take the lock again.

Wake-ups: the schema's trigger runs ``pg_notify('<channel>', '')`` after each insert
statement, delivered when the inserting transaction commits; the relay waits for it
(`wait`) and still polls every ``poll_interval_s`` (a missing trigger only costs
latency). The channel is ``tidegate_outbox_<table>``; an application may also send
``NOTIFY`` itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from tidegate.patterns.outbox.store import (
    COLUMNS,
    OutboxRow,
    OutboxTableError,
    check_identifier,
    payload_bytes,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresOutboxStore", "channel_for", "postgres_schema"]


def channel_for(table: str) -> str:
    return "tidegate_outbox_" + table.replace(".", "_")


def lock_key(table: str) -> int:
    """A signed 64-bit advisory lock key for a table (stable across processes)."""
    digest = hashlib.sha256(f"tidegate-outbox-relay:{table}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def postgres_schema(table: str = "outbox") -> str:
    """The DDL of an outbox table, its indexes and its NOTIFY trigger for PostgreSQL."""
    t = check_identifier(table)
    base = t.replace(".", "_")
    return (
        f"CREATE TABLE {t} (\n"
        "    seq bigserial PRIMARY KEY,\n"
        "    id text NOT NULL UNIQUE,\n"
        "    aggregatetype text NOT NULL,\n"
        "    aggregateid text NOT NULL,\n"
        "    type text NOT NULL,\n"
        "    payload bytea,\n"
        "    relay_txn text\n"
        ");\n"
        f"CREATE INDEX {base}_unpublished ON {t} (seq) WHERE relay_txn IS NULL;\n"
        f"CREATE INDEX {base}_relay_txn ON {t} (relay_txn) WHERE relay_txn IS NOT NULL;\n"
        f"CREATE FUNCTION {base}_notify() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN PERFORM pg_notify('{channel_for(t)}', ''); RETURN NULL; END $$;\n"
        f"CREATE TRIGGER {base}_notify AFTER INSERT ON {t}\n"
        f"    FOR EACH STATEMENT EXECUTE FUNCTION {base}_notify();\n"
    )


def redact(url: str) -> str:
    """The URL without its password, for logs and ids."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=user + host))


class PostgresOutboxStore:
    """See the module docstring; `url` is a libpq URL (``postgresql://...``)."""

    def __init__(self, url: str, table: str = "outbox", *, connect_timeout_s: int = 10
                 ) -> None:
        try:
            import psycopg  # noqa: F401  (optional dependency: fail early and clearly)
        except ImportError as e:
            raise ImportError("the PostgreSQL outbox needs psycopg 3: "
                              "pip install 'tidegate[postgres]'") from e
        self.table = check_identifier(table)
        self.url = url
        self.description = redact(url)
        self.connect_timeout_s = connect_timeout_s
        self.channel = channel_for(self.table)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._locked = False

    def _c(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            import psycopg
            self._locked = False
            self._conn = psycopg.connect(self.url, autocommit=True,
                                         connect_timeout=self.connect_timeout_s)
        return self._conn

    def _locked_conn(self) -> psycopg.Connection[tuple[object, ...]]:
        """The session holding the lock. Never a new one: after a broken connection
        another relay may hold the lock, and fetching, marking or deleting rows then
        would race it."""
        conn = self._conn
        if not self._locked or conn is None or conn.closed:
            raise RuntimeError("the relay lock is not held (connection lost?)")
        return conn

    def create_schema(self) -> None:
        """Create the outbox table, indexes and trigger (only when asked)."""
        with self._c().transaction():
            self._c().execute(postgres_schema(self.table).encode())

    def check_table(self) -> None:
        schema, _, name = self.table.rpartition(".")
        rows = self._c().execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = coalesce(nullif(%s, ''), current_schema())",
            (name, schema)).fetchall()
        cols = {str(r[0]) for r in rows}
        if not cols:
            raise OutboxTableError(
                f"{self.description} has no table {self.table!r}; the relay creates "
                f"nothing. Expected:\n{postgres_schema(self.table)}")
        missing = [c for c in COLUMNS if c not in cols]
        if missing:
            raise OutboxTableError(
                f"table {self.table!r} in {self.description} lacks column(s) "
                f"{', '.join(missing)}. Expected:\n{postgres_schema(self.table)}")

    def try_acquire(self) -> bool:
        if self._locked and self._conn is not None and not self._conn.closed:
            return True
        conn = self._c()
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(self.table),)
                           ).fetchone()
        self._locked = bool(row and row[0])
        if self._locked:
            conn.execute(f'LISTEN "{self.channel}"'.encode())
        return self._locked

    def fetch(self, limit: int) -> list[OutboxRow]:
        rows = self._locked_conn().execute(
            f"SELECT seq, id, aggregatetype, aggregateid, type, payload FROM {self.table} "
            "WHERE relay_txn IS NULL ORDER BY seq LIMIT %s".encode(), (limit,)).fetchall()
        return [OutboxRow(int(str(s)), str(i), str(at), str(ai), str(ty), payload_bytes(p))
                for s, i, at, ai, ty, p in rows]

    def mark(self, seqs: Sequence[int], marker: str) -> None:
        conn = self._locked_conn()
        with conn.transaction():
            conn.execute(f"UPDATE {self.table} SET relay_txn = relay_txn || '/old' "
                         "WHERE relay_txn = %s".encode(), (marker,))
            cur = conn.execute(
                f"UPDATE {self.table} SET relay_txn = %s "
                "WHERE relay_txn IS NULL AND seq = ANY(%s)".encode(), (marker, list(seqs)))
            if cur.rowcount != len(seqs):
                raise RuntimeError(f"marked {cur.rowcount} of {len(seqs)} rows: some were "
                                   "published or deleted behind the relay's back")

    def is_marked(self, marker: str) -> bool:
        row = self._c().execute(
            f"SELECT 1 FROM {self.table} WHERE relay_txn = %s LIMIT 1".encode(), (marker,)
        ).fetchone()
        return row is not None

    def delete_published(self) -> int:
        cur = self._locked_conn().execute(
            f"DELETE FROM {self.table} WHERE relay_txn IS NOT NULL".encode())
        return int(cur.rowcount)

    def wait(self, timeout_s: float) -> None:
        conn = self._locked_conn()
        # One notification is enough to wake; the rest are drained by the next wait.
        for _ in conn.notifies(timeout=timeout_s, stop_after=1):
            pass

    def reset(self) -> None:
        conn, self._conn = self._conn, None
        self._locked = False
        if conn is not None:
            try:
                conn.close()  # ends the session: PostgreSQL drops its advisory lock
            except Exception:
                pass

    def close(self) -> None:
        self.reset()
