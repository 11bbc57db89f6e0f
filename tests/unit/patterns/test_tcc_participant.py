"""The TCC participant's ledger (patterns/tcc/participant.py) on SQLite: idempotent
Try/Confirm/Cancel, the empty rollback, the hanging Try, refusals; and the global
transaction record's JSON round trip."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tidegate.patterns.tcc import (
    Branch,
    GlobalTxn,
    TccParticipant,
    TryRefused,
    tcc_ledger_schema,
)


@pytest.fixture
def bank(tmp_path: Path) -> tuple[TccParticipant, Any]:
    path = tmp_path / "bank.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE acct (balance INTEGER, frozen INTEGER)")
    conn.execute("INSERT INTO acct VALUES (100, 0)")
    conn.execute(tcc_ledger_schema())
    conn.commit()
    calls: list[str] = []

    def try_(c: Any, xid: str, payload: str) -> None:
        calls.append(f"try {xid}")
        (bal,) = c.execute("SELECT balance FROM acct").fetchone()
        if bal < int(payload):
            raise TryRefused("insufficient funds")
        c.execute("UPDATE acct SET balance = balance - ?, frozen = frozen + ?",
                  (int(payload), int(payload)))

    def confirm(c: Any, xid: str, payload: str) -> None:
        calls.append(f"confirm {xid}")
        c.execute("UPDATE acct SET frozen = frozen - ?", (int(payload),))

    def cancel(c: Any, xid: str, payload: str) -> None:
        calls.append(f"cancel {xid}")
        if payload == "7" and "fail-once" not in calls:
            calls.append("fail-once")
            raise RuntimeError("database busy")
        c.execute("UPDATE acct SET balance = balance + ?, frozen = frozen - ?",
                  (int(payload), int(payload)))

    p = TccParticipant("bank", lambda: sqlite3.connect(path), try_, confirm, cancel)
    p.calls = calls  # type: ignore[attr-defined]
    return p, lambda: sqlite3.connect(path).execute("SELECT balance, frozen FROM acct").fetchone()


def test_try_confirm_is_idempotent(bank: tuple[TccParticipant, Any]) -> None:
    p, acct = bank
    assert p.handle("try", "x1", "30") == (200, "tried")
    assert p.handle("try", "x1", "30")[0] == 200
    assert acct() == (70, 30)
    assert p.handle("confirm", "x1", "30") == (200, "confirmed")
    assert p.handle("confirm", "x1", "30")[0] == 200
    assert acct() == (70, 0)
    assert p.handle("cancel", "x1", "30")[0] == 409  # never cancel a confirmed branch
    assert p.calls == ["try x1", "confirm x1"]  # type: ignore[attr-defined]


def test_cancel_releases_and_refused_cancel_is_retried(bank: tuple[TccParticipant, Any]
                                                       ) -> None:
    p, acct = bank
    assert p.handle("try", "x2", "7")[0] == 200
    status, text = p.handle("cancel", "x2", "7")
    assert status == 500 and "database busy" in text
    assert acct() == (93, 7)  # the failed cancel changed nothing
    assert p.handle("cancel", "x2", "7") == (200, "cancelled")
    assert p.handle("cancel", "x2", "7")[0] == 200
    assert acct() == (100, 0)
    assert p.handle("confirm", "x2", "7")[0] == 409  # no confirm after a cancel


def test_empty_rollback_then_hanging_try(bank: tuple[TccParticipant, Any]) -> None:
    p, acct = bank
    assert p.handle("cancel", "x3", "10") == (200, "cancelled")  # Try never arrived
    assert p.handle("try", "x3", "10")[0] == 409  # ... and when it does, it is refused
    assert acct() == (100, 0)
    assert p.calls == []  # type: ignore[attr-defined]


def test_refused_try(bank: tuple[TccParticipant, Any]) -> None:
    p, acct = bank
    assert p.handle("try", "x4", "500") == (409, "insufficient funds")
    assert p.handle("try", "x4", "500")[0] == 409
    assert p.handle("cancel", "x4", "500")[0] == 200
    assert acct() == (100, 0)
    assert p.handle("frobnicate", "x4", "1")[0] == 404


def test_global_txn_round_trip() -> None:
    t = GlobalTxn("x", "TRYING", (Branch("a", "http://a"), Branch("b", "http://b")), "p",
                  5, ("begin",))
    assert GlobalTxn.from_json(t.to_json()) == t
