"""Check-back transactions with SQLite: an order row and its Kafka event, both or neither.

    python examples/checkback_sqlite.py [BOOTSTRAP] [--db orders.db] [--orders 3]
        [--crash after-local|before-local] [--unknown-first]

Each order is a local SQLite transaction (insert the order and the prepared
transaction's key) and a Kafka record on topic ``orders``, sent as a prepared
transaction first and committed only after the database commit. Kill the program at
any point (``--crash`` kills itself with SIGKILL right after, or right before, the
database commit); the next run's `start()` asks `check`, which looks the prepared
transaction up in the database: found -> COMMIT, missing -> ABORT. ``--unknown-first``
makes the first check answer UNKNOWN (as if the database were down) to show the
re-check. The broker must allow two-phase commit:
``transaction.two.phase.commit.enable=true``, the default of `make run`'s broker (a
broker with it false fails the first call with a message naming the setting).
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import sys

from tidegate.client import PreparedTxnState
from tidegate.client.checkback import CheckbackProducer, Resolution, key


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap", nargs="?",
                    default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    ap.add_argument("--db", default="orders.db")
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--orders", type=int, default=3)
    ap.add_argument("--first-order", type=int, default=1)
    ap.add_argument("--crash", choices=["after-local", "before-local"])
    ap.add_argument("--unknown-first", action="store_true")
    args = ap.parse_args()

    db = sqlite3.connect(args.db, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT, "
               "txn TEXT UNIQUE)")
    checks = []

    def check(prepared: PreparedTxnState) -> Resolution:
        checks.append(prepared)
        if args.unknown_first and len(checks) == 1:
            return Resolution.UNKNOWN
        row = db.execute("SELECT 1 FROM orders WHERE txn = ?", (key(prepared),)).fetchone()
        return Resolution.COMMIT if row else Resolution.ABORT

    cp = CheckbackProducer({"bootstrap.servers": args.bootstrap,
                            "transactional.id": f"checkback-{args.topic}"}, check,
                           check_interval_s=0.5)
    try:
        resolution = cp.start()  # resolves what a killed run left prepared
        if resolution is not None:
            print(f"recovered prepared transaction {key(checks[-1])}: {resolution.value} "
                  f"after {len(checks)} check(s)", flush=True)
        for n in range(args.first_order, args.first_order + args.orders):
            def place_order(prepared: PreparedTxnState, n: int = n) -> int:
                db.execute("BEGIN")
                db.execute("INSERT INTO orders (id, item, txn) VALUES (?, ?, ?)",
                           (n, f"item-{n}", key(prepared)))
                if args.crash == "before-local":
                    os.kill(os.getpid(), signal.SIGKILL)  # the local commit never happens
                db.execute("COMMIT")
                if args.crash == "after-local":
                    os.kill(os.getpid(), signal.SIGKILL)  # Kafka's commit never happens
                return n
            cp.run([(args.topic, f"order {n}", str(n))], place_order)
            print(f"order {n}: stored and published", flush=True)
    finally:
        cp.close()
    count = db.execute("SELECT count(*) FROM orders").fetchone()[0]
    print(f"{count} order(s) in the database", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
