"""TCC (Try-Confirm-Cancel): a transfer between two services, each with its own
SQLite database, coordinated through a compacted topic.

    python examples/tcc_transfer.py [BOOTSTRAP]

The bank service's Try freezes the amount, Confirm spends it, Cancel releases it; the
wallet service's Try books it as pending, Confirm credits it, Cancel drops it. Both
serve `tcc_app` over HTTP (a thread here; a real service runs it in its own process)
and keep a ledger row per branch, so each call is idempotent. The coordinator writes
each global transaction's phase to the state topic before calling anyone, so after a
crash ``tidegate tcc recover`` (or the next `TccCoordinator.start()`) finishes it.
The second transfer is refused by the bank (insufficient funds): every branch is
cancelled, and the wallet's Cancel is an empty rollback if its Try never ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import threading
import uuid
from typing import Any

from aiohttp import web

from tidegate.client import Admin, NewTopic
from tidegate.patterns.tcc import (
    Branch,
    TccCoordinator,
    TccParticipant,
    TryRefused,
    read_txns,
    tcc_app,
    tcc_ledger_schema,
)


def database(path: str, table: str) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(table)
    conn.execute(tcc_ledger_schema())
    conn.commit()


def amount(payload: str) -> int:
    return int(json.loads(payload)["amount"])


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else \
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    state_topic = f"tcc-{uuid.uuid4().hex[:8]}.state"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(state_topic, 1, 1,
                                      configs={"cleanup.policy": "compact"})])
    tmp = tempfile.mkdtemp()
    bank_db, wallet_db = os.path.join(tmp, "bank.db"), os.path.join(tmp, "wallet.db")
    database(bank_db, "CREATE TABLE acct (balance INTEGER, frozen INTEGER);"
                      "INSERT INTO acct VALUES (100, 0);")
    database(wallet_db, "CREATE TABLE acct (balance INTEGER, pending INTEGER);"
                        "INSERT INTO acct VALUES (0, 0);")

    def freeze(c: Any, xid: str, payload: str) -> None:
        if c.execute("SELECT balance FROM acct").fetchone()[0] < amount(payload):
            raise TryRefused("insufficient funds")
        c.execute("UPDATE acct SET balance = balance - ?, frozen = frozen + ?",
                  (amount(payload), amount(payload)))

    def spend(c: Any, xid: str, payload: str) -> None:
        c.execute("UPDATE acct SET frozen = frozen - ?", (amount(payload),))

    def release(c: Any, xid: str, payload: str) -> None:
        c.execute("UPDATE acct SET balance = balance + ?, frozen = frozen - ?",
                  (amount(payload), amount(payload)))

    def book(c: Any, xid: str, payload: str) -> None:
        c.execute("UPDATE acct SET pending = pending + ?", (amount(payload),))

    def credit(c: Any, xid: str, payload: str) -> None:
        c.execute("UPDATE acct SET pending = pending - ?, balance = balance + ?",
                  (amount(payload), amount(payload)))

    def drop(c: Any, xid: str, payload: str) -> None:
        c.execute("UPDATE acct SET pending = pending - ?", (amount(payload),))

    bank = TccParticipant("bank", lambda: sqlite3.connect(bank_db), freeze, spend, release)
    wallet = TccParticipant("wallet", lambda: sqlite3.connect(wallet_db), book, credit, drop)

    loop = asyncio.new_event_loop()
    ports: list[int] = []
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        for p in (bank, wallet):
            runner = web.AppRunner(tcc_app(p))
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            ports.append(runner.addresses[0][1])
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    ready.wait(10)
    branches = [Branch("bank", f"http://127.0.0.1:{ports[0]}"),
                Branch("wallet", f"http://127.0.0.1:{ports[1]}")]

    with TccCoordinator({"bootstrap.servers": bootstrap}, state_topic=state_topic) as coord:
        coord.start()  # fences an earlier coordinator and finishes what it left
        for xid, value in (("transfer-1", 30), ("transfer-2", 500)):
            phase = coord.execute(xid, branches, json.dumps({"amount": value}))
            print(f"{xid} ({value}): {phase}")
    loop.call_soon_threadsafe(loop.stop)

    for xid, t in sorted(read_txns({"bootstrap.servers": bootstrap}, state_topic).items()):
        print(f"state topic: {xid} {t.phase} ({'; '.join(t.history)})")
    print("bank (balance, frozen):", sqlite3.connect(bank_db).execute(
        "SELECT balance, frozen FROM acct").fetchone())
    print("wallet (balance, pending):", sqlite3.connect(wallet_db).execute(
        "SELECT balance, pending FROM acct").fetchone())


if __name__ == "__main__":
    main()
