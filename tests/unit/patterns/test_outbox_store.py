"""The outbox pieces that need no broker: the SQLite store, URLs, schemas, de-dup."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tidegate.client import ConsumerRecord
from tidegate.patterns.outbox import (
    Deduplicator,
    OutboxTableError,
    SqliteOutboxStore,
    event_id,
    open_store,
    schema_for_url,
)
from tidegate.patterns.outbox.postgres import lock_key, postgres_schema, redact
from tidegate.patterns.outbox.store import check_identifier, payload_bytes


def make_db(tmp_path: Path, rows: int = 3) -> SqliteOutboxStore:
    store = SqliteOutboxStore(str(tmp_path / "app.db"), create=True)
    store.create_schema()
    conn = sqlite3.connect(tmp_path / "app.db")
    for i in range(rows):
        conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                     "VALUES (?, 'order', ?, 'created', ?)", (f"e{i}", f"o{i % 2}", f"p{i}"))
    conn.commit()
    conn.close()
    return store


def test_missing_database_and_table_say_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(OutboxTableError, match="CREATE TABLE outbox"):
        SqliteOutboxStore(str(tmp_path / "none.db"))
    assert not (tmp_path / "none.db").exists(), "the store created the database"
    sqlite3.connect(tmp_path / "empty.db").close()
    store = SqliteOutboxStore(str(tmp_path / "empty.db"))
    with pytest.raises(OutboxTableError, match="has no table 'outbox'"):
        store.check_table()
    store.conn.execute("CREATE TABLE outbox (id TEXT, payload BLOB)")
    with pytest.raises(OutboxTableError, match=r"lacks column.*seq.*relay_txn"):
        store.check_table()
    store.close()


def test_fetch_mark_in_seq_order(tmp_path: Path) -> None:
    store = make_db(tmp_path, 5)
    store.check_table()
    assert store.try_acquire()
    rows = store.fetch(3)
    assert [r.id for r in rows] == ["e0", "e1", "e2"]
    assert rows[0].payload == b"p0" and rows[1].aggregateid == "o1"
    store.mark([r.seq for r in rows], "t:1:0")
    assert store.is_marked("t:1:0") and not store.is_marked("t:1:1")
    assert [r.id for r in store.fetch(10)] == ["e3", "e4"]
    # a row marked already cannot be marked again: nothing changes
    with pytest.raises(RuntimeError, match="marked 1 of 2"):
        store.mark([rows[0].seq, 4], "t:1:1")
    assert not store.is_marked("t:1:1")
    assert len(store.fetch(10)) == 2
    store.close()


def test_a_repeated_transaction_name_moves_to_the_new_rows(tmp_path: Path) -> None:
    # Transaction version 1 keeps the epoch: the next batch may get the same name.
    store = make_db(tmp_path, 4)
    assert store.try_acquire()
    store.mark([1, 2], "t:1:0")
    store.mark([3], "t:1:0")
    names = dict(store.conn.execute("SELECT seq, relay_txn FROM outbox").fetchall())
    assert names == {1: "t:1:0/old", 2: "t:1:0/old", 3: "t:1:0", 4: None}
    assert store.delete_published() == 3
    store.close()


def test_one_relay_holds_the_lock(tmp_path: Path) -> None:
    a = make_db(tmp_path)
    b = SqliteOutboxStore(str(tmp_path / "app.db"))
    assert a.try_acquire()
    assert not b.try_acquire()
    with pytest.raises(RuntimeError, match="without the relay lock"):
        b.mark([1], "x")
    a.reset()  # an error: the lock is dropped
    assert b.try_acquire()
    assert not a.try_acquire()
    a.close()
    b.close()


def test_wait_wakes_on_a_commit(tmp_path: Path) -> None:
    import threading
    import time
    store = make_db(tmp_path)
    store.wait(0)  # make_db's inserts came after the store opened: that wake-up
    start = time.monotonic()
    store.wait(0.2)  # nothing committed: the whole timeout
    assert time.monotonic() - start >= 0.19

    def insert() -> None:
        conn = sqlite3.connect(tmp_path / "app.db")
        conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type) "
                     "VALUES ('x', 'a', 'b', 'c')")
        conn.commit()
        conn.close()

    t = threading.Timer(0.2, insert)
    t.start()
    start = time.monotonic()
    store.wait(10)
    assert time.monotonic() - start < 5
    t.join()
    store.close()


def test_urls_and_identifiers(tmp_path: Path) -> None:
    make_db(tmp_path).close()
    store = open_store(f"sqlite:///{tmp_path / 'app.db'}", "outbox")
    assert isinstance(store, SqliteOutboxStore)
    store.close()
    with pytest.raises(ValueError, match="unsupported database URL"):
        open_store("mysql://x/y")
    assert "bigserial" in schema_for_url("postgresql://u@h/db", "events")
    assert "AUTOINCREMENT" in schema_for_url("sqlite:///x.db")
    for bad in ("outbox; DROP TABLE x", "1abc", "a.b.c", ""):
        with pytest.raises(ValueError):
            check_identifier(bad)
    assert "pg_notify('tidegate_outbox_app_events'" in postgres_schema("app.events")
    assert lock_key("outbox") == lock_key("outbox") != lock_key("other")
    assert redact("postgresql://u:secret@h:5432/db") == "postgresql://u@h:5432/db"


def test_payload_bytes() -> None:
    assert payload_bytes(None) is None
    assert payload_bytes(b"x") == b"x"
    assert payload_bytes(memoryview(b"ab")) == b"ab"
    assert payload_bytes("é") == "é".encode()
    assert payload_bytes({"a": [1, 2]}) == b'{"a":[1,2]}'


def record(eid: str | None) -> ConsumerRecord:
    headers = (("id", eid.encode()),) if eid is not None else ()
    return ConsumerRecord("t", 0, 0, 0, 0, None, b"v", headers)


def test_deduplicator_forgets_the_oldest() -> None:
    d = Deduplicator(capacity=2)
    assert event_id(record("a")) == "a" and event_id(record(None)) is None
    assert d.first_time(record("a")) and d.first_time(record("b"))
    assert not d.first_time(record("a"))  # seen; now the most recent
    assert d.first_time(record("c"))  # evicts b
    assert d.first_time("b") and not d.first_time("c")
    assert d.first_time(record(None)) and d.first_time(record(None))
    assert d.duplicates == 2
    with pytest.raises(ValueError):
        Deduplicator(0)
