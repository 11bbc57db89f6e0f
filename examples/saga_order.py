"""Saga orchestration: an order as three steps — reserve stock, charge, ship — each with
its compensation, run by the exactly-once orchestrator.

    python examples/saga_order.py [BOOTSTRAP]

The participants (`SagaParticipant`) keep their data in one SQLite database and record
each step in a ledger table in the same local transaction, so a repeated command is
answered without being applied twice. Two orders: alice's completes; bob cannot pay,
so the charge is refused and the orchestrator compensates the reservation (backward
recovery). Each state change of a saga, the command it sends and the reply it consumed
are committed in one Kafka transaction; ``tidegate sagas list --prefix ...`` shows
the states from the compacted state topic.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import threading
import uuid
from typing import Any

from tidegate.client import Admin, NewTopic, Producer
from tidegate.patterns.saga import (
    ParticipantCommand,
    SagaDefinition,
    SagaOrchestrator,
    SagaParticipant,
    SagaTopics,
    Step,
    StepFailed,
    ledger_schema,
    read_states,
    start_saga,
)


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else \
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    prefix = f"shop-{uuid.uuid4().hex[:8]}"
    topics = SagaTopics(prefix)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(f"{prefix}.{t}", 1, 1) for t in
                             ("start", "replies", "stock", "payments", "shipping")] +
                            [NewTopic(topics.state, 1, 1,
                                      configs={"cleanup.policy": "compact"})])

    path = os.path.join(tempfile.mkdtemp(), "shop.db")
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE stock (qty INTEGER); INSERT INTO stock VALUES (10);"
                     "CREATE TABLE accounts (name TEXT, balance INTEGER);"
                     "INSERT INTO accounts VALUES ('alice', 100), ('bob', 5);"
                     "CREATE TABLE shipments (saga TEXT);")
    for table in ("ledger_stock", "ledger_pay", "ledger_ship"):
        db.execute(ledger_schema(table))
    db.commit()

    def order(cmd: ParticipantCommand) -> dict[str, Any]:
        return dict(json.loads(cmd.payload))

    def reserve(conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("UPDATE stock SET qty = qty - ?", (order(cmd)["qty"],))

    def unreserve(conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("UPDATE stock SET qty = qty + ?", (order(cmd)["qty"],))

    def charge(conn: Any, cmd: ParticipantCommand) -> None:
        o = order(cmd)
        (balance,) = conn.execute("SELECT balance FROM accounts WHERE name = ?",
                                  (o["name"],)).fetchone()
        if balance < o["price"]:
            raise StepFailed("insufficient funds")
        conn.execute("UPDATE accounts SET balance = balance - ? WHERE name = ?",
                     (o["price"], o["name"]))

    def refund(conn: Any, cmd: ParticipantCommand) -> None:
        o = order(cmd)
        conn.execute("UPDATE accounts SET balance = balance + ? WHERE name = ?",
                     (o["price"], o["name"]))

    def ship(conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("INSERT INTO shipments VALUES (?)", (cmd.saga_id,))

    def unship(conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("DELETE FROM shipments WHERE saga = ?", (cmd.saga_id,))

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, timeout=30, check_same_thread=False)

    cfg = {"bootstrap.servers": bootstrap}
    participants = [
        SagaParticipant(f"{prefix}.stock", cfg, connect, reserve, unreserve,
                        ledger_table="ledger_stock"),
        SagaParticipant(f"{prefix}.payments", cfg, connect, charge, refund,
                        ledger_table="ledger_pay"),
        SagaParticipant(f"{prefix}.shipping", cfg, connect, ship, unship,
                        ledger_table="ledger_ship")]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,)) for p in participants]
    for t in threads:
        t.start()

    saga = SagaDefinition("order", (Step("reserve", f"{prefix}.stock", timeout_s=10),
                                    Step("charge", f"{prefix}.payments", timeout_s=10),
                                    Step("ship", f"{prefix}.shipping", timeout_s=10)))
    with Producer(cfg) as p:
        start_saga(p, "order", "order-alice", json.dumps(
            {"name": "alice", "qty": 2, "price": 40}), topics)
        start_saga(p, "order", "order-bob", json.dumps(
            {"name": "bob", "qty": 1, "price": 20}), topics)
        p.flush()
    orchestrator = SagaOrchestrator([saga], cfg, topics=topics)
    orchestrator.run(until_idle=True)  # a service runs orchestrator.run(stop_event)
    orchestrator.close()
    stop.set()
    for t in threads:
        t.join()
    for part in participants:
        part.close()

    for sid, state in sorted(read_states(cfg, topics).items()):
        print(f"{sid}: {state.status} ({'; '.join(state.history)})")
    print("stock left:", db.execute("SELECT qty FROM stock").fetchone()[0])
    print("balances:", dict(db.execute("SELECT name, balance FROM accounts").fetchall()))
    print("shipped:", [r[0] for r in db.execute("SELECT saga FROM shipments")])


if __name__ == "__main__":
    main()
