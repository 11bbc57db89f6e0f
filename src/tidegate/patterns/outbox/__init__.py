"""The transactional outbox (seed 001's local message table): see relay.py.

`OutboxRelay` publishes the rows of an outbox table exactly once; `SqliteOutboxStore`
and `PostgresOutboxStore` hold the table; `open_store(url, table)` picks one from a URL
(``sqlite:///path`` or ``postgresql://...``); `Deduplicator` drops repeated event ids
for readers that do not read committed.
"""

from tidegate.patterns.outbox.dedup import Deduplicator, event_id
from tidegate.patterns.outbox.relay import (
    DEFAULT_DEAD_LETTER_TOPIC,
    DEFAULT_TOPIC,
    OutboxRelay,
    RelayStats,
)
from tidegate.patterns.outbox.sqlite import SqliteOutboxStore, sqlite_schema
from tidegate.patterns.outbox.store import OutboxRow, OutboxStore, OutboxTableError
from tidegate.patterns.outbox.urls import open_store, schema_for_url

__all__ = [
    "DEFAULT_DEAD_LETTER_TOPIC",
    "DEFAULT_TOPIC",
    "Deduplicator",
    "OutboxRelay",
    "OutboxRow",
    "OutboxStore",
    "OutboxTableError",
    "RelayStats",
    "SqliteOutboxStore",
    "event_id",
    "open_store",
    "schema_for_url",
    "sqlite_schema",
]
