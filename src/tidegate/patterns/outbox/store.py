"""What the outbox relay needs of a database, and the table layout it expects.

The layout follows Debezium's outbox event router (``id`` — the event id, unique —,
``aggregatetype``, ``aggregateid``, ``type``, ``payload``) plus two columns the relay
needs to publish exactly once without a table of its own:

- ``seq``: an increasing number (SQLite's INTEGER PRIMARY KEY, PostgreSQL's bigserial)
  giving the publication order. Rows of one aggregate are published in ``seq`` order,
  so the application writes the outbox row in the same local transaction as (and
  after) its change to the aggregate, whose row lock orders them.
- ``relay_txn``: NULL until the relay has published the row. The relay sets it, in one
  local transaction, to the name of the prepared Kafka transaction (KIP-939) holding
  the row's record, before it commits that transaction; after a crash, a prepared
  transaction is committed if and only if its name is in the table (check-back).

`OutboxStore` is the protocol the relay drives; `sqlite.py` and `postgres.py` implement
it. A store creates nothing unless asked (`create_schema`); a missing table or column
raises `OutboxTableError` whose message shows the DDL expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["COLUMNS", "OutboxRow", "OutboxStore", "OutboxTableError", "check_identifier",
           "payload_bytes"]

# The columns the relay reads or writes, in the order `fetch` selects them.
COLUMNS = ("seq", "id", "aggregatetype", "aggregateid", "type", "payload", "relay_txn")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")


class OutboxTableError(RuntimeError):
    """The outbox table is missing or lacks a column; the message shows the DDL."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One unpublished outbox row."""

    seq: int
    id: str
    aggregatetype: str
    aggregateid: str
    type: str
    payload: bytes | None


def check_identifier(name: str) -> str:
    """Table names are interpolated into SQL: accept plain (optionally schema-qualified)
    identifiers only, so a name from the command line cannot inject SQL."""
    if not _IDENT.match(name):
        raise ValueError(f"invalid table name {name!r}: letters, digits and _ only "
                         "(optionally schema.table)")
    return name


def payload_bytes(value: object) -> bytes | None:
    """The record value for a payload column: bytes as they are, text as UTF-8, and
    anything else a driver decodes (PostgreSQL's json/jsonb) as compact JSON."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


class OutboxStore(Protocol):
    """A database holding an outbox table; see the module docstring.

    One relay at a time is *active* for a table: it holds the store's lock
    (`try_acquire`) — an advisory lock on PostgreSQL, a file lock beside the SQLite
    database — which the database or the OS releases when the process dies.
    `mark` must run on the connection (or in the process) that holds the lock, so a
    relay that lost the lock cannot mark rows."""

    table: str
    description: str  # the database, for logs and the default transactional id

    def create_schema(self) -> None:
        """Create the outbox table (only when the user asks: `tidegate outbox schema
        --apply`); the relay never calls it."""

    def check_table(self) -> None:
        """Raise OutboxTableError if the table or a column is missing."""

    def try_acquire(self) -> bool:
        """Take the relay lock if free; True if this store now holds it."""

    def fetch(self, limit: int) -> list[OutboxRow]:
        """Unpublished rows (``relay_txn IS NULL``) in ``seq`` order, at most `limit`."""

    def mark(self, seqs: Sequence[int], marker: str) -> None:
        """In one local transaction: rename rows already carrying `marker` (to
        ``marker + "/old"``: a transaction name can repeat, see relay.py), then set
        ``relay_txn = marker`` on exactly these rows, all still unpublished; raise (and
        change nothing) otherwise."""

    def is_marked(self, marker: str) -> bool:
        """Whether any row carries `marker`; raise if the database cannot tell."""

    def delete_published(self) -> int:
        """Delete the published rows (every transaction they name is complete)."""

    def wait(self, timeout_s: float) -> None:
        """Sleep up to `timeout_s`, waking early when new rows are announced."""

    def reset(self) -> None:
        """After an error: drop the lock and reconnect (the relay takes the lock again
        before it goes on)."""

    def close(self) -> None:
        """Release the lock and the connections."""
