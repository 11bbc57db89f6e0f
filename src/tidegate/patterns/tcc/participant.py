"""A TCC participant: Try, Confirm and Cancel over a local database, idempotent, with
seed 001's empty-rollback and hanging cases; `tcc_app` serves it over HTTP.

`TccParticipant` runs the application's callbacks on a DB-API connection (sqlite3 or
psycopg, opened by ``connect`` per call) and records each branch's state in a ledger
table (``<table>(key PRIMARY KEY, state)``, key ``<xid>/<branch>``) in the same local
transaction:

=========== ================ ============================= ===========================
call        no row           ``tried``                     ``cancelled`` / ``confirmed``
=========== ================ ============================= ===========================
try         run try: tried   accept (repeat)               cancelled: refuse (hanging);
                                                           confirmed: accept
confirm     refuse           run confirm: confirmed        confirmed: accept; cancelled:
                                                           refuse, log ALERT
cancel      record cancelled run cancel: cancelled         cancelled: accept; confirmed:
            (empty rollback)                               refuse, log ALERT
=========== ================ ============================= ===========================

A try callback that raises `TryRefused` refuses (its changes rolled back, the row
``refused``; a later cancel turns it into ``cancelled`` without calling ``cancel``). A
confirm or cancel callback that raises answers 500: the coordinator retries it.
Answers over HTTP: 200 accepted, 409 refused, 500 failed.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["TccParticipant", "TryRefused", "tcc_app", "tcc_ledger_schema"]

log = logging.getLogger("tidegate.patterns.tcc.participant")

Callback = Callable[[Any, str, str], None]  # (connection, xid, payload)


class TryRefused(Exception):
    """Raised by a try callback: the resources are not available."""


def tcc_ledger_schema(table: str = "tcc_ledger") -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, state TEXT NOT NULL)"


class TccParticipant:
    def __init__(self, name: str, connect: Callable[[], Any], try_: Callback,
                 confirm: Callback, cancel: Callback, *, ledger_table: str = "tcc_ledger"
                 ) -> None:
        self.name = name
        self.connect = connect
        self.callbacks = {"try": try_, "confirm": confirm, "cancel": cancel}
        self.table = ledger_table
        # One call at a time: the ledger row is read, then written, in one transaction.
        self._lock = threading.Lock()

    def handle(self, action: str, xid: str, payload: str) -> tuple[int, str]:
        """(HTTP status, text) for one call."""
        if action not in self.callbacks:
            return 404, f"no action {action!r}"
        with self._lock:
            conn = self.connect()
            try:
                return self._handle(conn, action, xid, payload)
            except Exception as e:
                conn.rollback()
                log.warning("%s of %s on %s failed: %s", action, xid, self.name, e)
                return 500, f"{type(e).__name__}: {e}"
            finally:
                conn.close()

    def _handle(self, conn: Any, action: str, xid: str, payload: str) -> tuple[int, str]:
        m = "?" if isinstance(conn, sqlite3.Connection) else "%s"
        key = f"{xid}/{self.name}"
        row = conn.execute(f"SELECT state FROM {self.table} WHERE key = {m}",
                           (key,)).fetchone()
        state = None if row is None else str(row[0])

        def record(new: str) -> None:
            if state is None:
                conn.execute(f"INSERT INTO {self.table} (key, state) VALUES ({m}, {m})",
                             (key, new))
            else:
                conn.execute(f"UPDATE {self.table} SET state = {m} WHERE key = {m}",
                             (new, key))
            conn.commit()

        if action == "try":
            if state in ("tried", "confirmed"):
                return 200, "tried already"
            if state == "cancelled":
                return 409, "cancelled before its try (hanging): refused"
            if state == "refused":
                return 409, "refused already"
            try:
                self.callbacks["try"](conn, xid, payload)
            except TryRefused as e:
                conn.rollback()
                record("refused")
                return 409, str(e)
            record("tried")
            return 200, "tried"
        if action == "confirm":
            if state == "confirmed":
                return 200, "confirmed already"
            if state != "tried":
                if state == "cancelled":
                    log.error("ALERT %s: confirm of %s after its cancel refused", self.name,
                              xid)
                return 409, f"cannot confirm in state {state}"
            self.callbacks["confirm"](conn, xid, payload)
            record("confirmed")
            return 200, "confirmed"
        # cancel
        if state == "cancelled":
            return 200, "cancelled already"
        if state == "confirmed":
            log.error("ALERT %s: cancel of %s after its confirm refused", self.name, xid)
            return 409, "cannot cancel a confirmed branch"
        if state == "tried":
            self.callbacks["cancel"](conn, xid, payload)
        record("cancelled")  # no row: the empty rollback; refused: nothing to undo
        return 200, "cancelled"


def tcc_app(participant: TccParticipant) -> web.Application:
    """``POST /try``, ``/confirm``, ``/cancel`` with JSON ``{"xid", "payload"}``."""

    async def call(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            xid, payload = str(body["xid"]), str(body.get("payload", ""))
        except (ValueError, KeyError, TypeError):
            return web.Response(status=400, text="expected JSON {xid, payload}")
        status, text = await asyncio.to_thread(participant.handle,
                                               request.match_info["action"], xid, payload)
        return web.Response(status=status, text=text)

    app = web.Application()
    app.router.add_post("/{action}", call)
    return app
