"""`open_store(url, table)`: an outbox store from a database URL (the CLI's ``--db``).

``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (SQLAlchemy's form)
opens an SQLite file; ``postgresql://...`` (or ``postgres://``) a PostgreSQL database
through psycopg 3.
"""

from __future__ import annotations

from tidegate.patterns.outbox.postgres import PostgresOutboxStore, postgres_schema
from tidegate.patterns.outbox.sqlite import SqliteOutboxStore, sqlite_schema
from tidegate.patterns.outbox.store import OutboxStore

__all__ = ["open_store", "schema_for_url"]


def _sqlite_path(url: str) -> str | None:
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///"):]
    return None


def _is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def open_store(url: str, table: str = "outbox") -> OutboxStore:
    path = _sqlite_path(url)
    if path is not None:
        return SqliteOutboxStore(path, table)
    if _is_postgres(url):
        return PostgresOutboxStore(url, table)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or "
                     "postgresql://USER@HOST/DB")


def schema_for_url(url: str, table: str = "outbox") -> str:
    """The DDL the relay expects for this kind of database."""
    if _sqlite_path(url) is not None:
        return sqlite_schema(table)
    if _is_postgres(url):
        return postgres_schema(table)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or "
                     "postgresql://USER@HOST/DB")
