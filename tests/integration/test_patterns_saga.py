"""Saga orchestration (patterns/saga) against a real broker and a real database
(SQLite), the orchestrator killed with kill -9.

A three-step order saga — reserve stock, charge the customer, ship — with its
participants (`SagaParticipant`, one SQLite database) running in this process, while
`tidegate sagas run` processes orchestrate, each SIGKILLed at a random moment; the
broker is killed and restarted too. Sagas for "poor" customers fail at the charge (a
business refusal: only the reservation is compensated); sagas marked ``blackhole``
meet a shipping participant that never answers the step (timeouts, a retry, then every
step compensated, the silent one by an empty compensation); the stock participant
refuses each saga's first compensation (the orchestrator must retry it). A last
orchestrator runs `--until-idle`. Then every saga must be COMPLETED or COMPENSATED, and
the database must agree: stock, balances and shipments reflect exactly the completed
sagas, and no step is compensated that did not run. `make soak` kills many more times.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import ROOT, BrokerProcess

from tidegate.client import Producer
from tidegate.patterns.saga import (
    ParticipantCommand,
    SagaParticipant,
    SagaTopics,
    StepFailed,
    ledger_schema,
    read_states,
    start_saga,
)

pytestmark = pytest.mark.interop

SOAK = pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                          reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
STOCK, BALANCE = 1_000_000, 1_000_000  # enough for every order of the soak


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("saga") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def create_topics(bootstrap: str, prefix: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"{prefix}.{t}", 3, 1) for t in
              ("start", "replies", "stock", "payments", "shipping")]
    topics.append(NewTopic(f"{prefix}.state", 3, 1, config={"cleanup.policy": "compact"}))
    for f in admin.create_topics(topics).values():
        f.result(30)


class Shop:
    """The participants' database and callbacks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.refused_once: set[str] = set()
        conn = self.connect()
        conn.execute("CREATE TABLE stock (item TEXT PRIMARY KEY, qty INTEGER)")
        conn.execute("CREATE TABLE accounts (customer TEXT PRIMARY KEY, balance INTEGER)")
        conn.execute("CREATE TABLE shipments (saga_id TEXT PRIMARY KEY)")
        for t in ("ledger_stock", "ledger_pay", "ledger_ship"):
            conn.execute(ledger_schema(t))
        conn.execute("INSERT INTO stock VALUES ('widget', ?)", (STOCK,))
        for c in ("alice", "bob", "poor"):
            conn.execute("INSERT INTO accounts VALUES (?, ?)", (c, 0 if c == "poor" else BALANCE))
        conn.commit()
        conn.close()

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def reserve(self, conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("UPDATE stock SET qty = qty - ? WHERE item = 'widget'",
                     (json.loads(cmd.payload)["qty"],))

    def unreserve(self, conn: Any, cmd: ParticipantCommand) -> None:
        if cmd.saga_id not in self.refused_once:  # a compensation refused once
            self.refused_once.add(cmd.saga_id)
            raise RuntimeError("stock service busy")
        conn.execute("UPDATE stock SET qty = qty + ? WHERE item = 'widget'",
                     (json.loads(cmd.payload)["qty"],))

    def charge(self, conn: Any, cmd: ParticipantCommand) -> None:
        p = json.loads(cmd.payload)
        (balance,) = conn.execute("SELECT balance FROM accounts WHERE customer = ?",
                                  (p["customer"],)).fetchone()
        if balance < 10 * p["qty"]:
            raise StepFailed("insufficient funds")
        conn.execute("UPDATE accounts SET balance = balance - ? WHERE customer = ?",
                     (10 * p["qty"], p["customer"]))

    def refund(self, conn: Any, cmd: ParticipantCommand) -> None:
        p = json.loads(cmd.payload)
        conn.execute("UPDATE accounts SET balance = balance + ? WHERE customer = ?",
                     (10 * p["qty"], p["customer"]))

    def ship(self, conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("INSERT INTO shipments VALUES (?)", (cmd.saga_id,))

    def unship(self, conn: Any, cmd: ParticipantCommand) -> None:
        conn.execute("DELETE FROM shipments WHERE saga_id = ?", (cmd.saga_id,))


class SilentShipping(SagaParticipant):
    """Never answers the shipping step of a ``blackhole`` order (nor applies it)."""

    def handle(self, cmd: ParticipantCommand) -> tuple[bool, str] | None:
        if cmd.action == "do" and json.loads(cmd.payload).get("blackhole"):
            return None
        return super().handle(cmd)


def participants(bootstrap: str, prefix: str, shop: Shop) -> list[SagaParticipant]:
    cfg = {"bootstrap.servers": bootstrap}
    return [
        SagaParticipant(f"{prefix}.stock", cfg, shop.connect, shop.reserve, shop.unreserve,
                        ledger_table="ledger_stock"),
        SagaParticipant(f"{prefix}.payments", cfg, shop.connect, shop.charge, shop.refund,
                        ledger_table="ledger_pay"),
        SilentShipping(f"{prefix}.shipping", cfg, shop.connect, shop.ship, shop.unship,
                       ledger_table="ledger_ship"),
    ]


def definitions(tmp: Path, prefix: str) -> Path:
    path = tmp / "sagas.json"
    path.write_text(json.dumps({"name": "order", "steps": [
        {"name": "reserve", "topic": f"{prefix}.stock", "timeout_s": 3, "retries": 1},
        {"name": "charge", "topic": f"{prefix}.payments", "timeout_s": 3, "retries": 1},
        {"name": "ship", "topic": f"{prefix}.shipping", "timeout_s": 1, "retries": 1}]}))
    return path


def orchestrator_cmd(bootstrap: str, defs: Path, prefix: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tidegate.cli.main", "sagas", "run", "--bootstrap-server",
            bootstrap, "--definitions", str(defs), "--prefix", prefix, *extra]


def crash_run(broker: BrokerProcess, tmp: Path, *, rounds: int, per_round: int,
              broker_kill_rounds: set[int], seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    prefix = f"sg{seed}"
    create_topics(broker.bootstrap, prefix)
    shop = Shop(tmp / "shop.db")
    defs = definitions(tmp, prefix)
    stop = threading.Event()
    parts = participants(broker.bootstrap, prefix, shop)
    threads = [threading.Thread(target=p.run, args=(stop,), daemon=True) for p in parts]
    for t in threads:
        t.start()
    orders: dict[str, dict[str, Any]] = {}
    logs: list[Path] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        for r in range(rounds):
            for i in range(per_round):
                sid = f"s{r}-{i}"
                order = {"customer": rng.choice(["alice", "bob", "bob", "poor"]),
                         "qty": rng.randint(1, 3), "blackhole": rng.random() < 0.15}
                orders[sid] = order
                start_saga(producer, "order", sid, json.dumps(order), SagaTopics(prefix))
            producer.flush()
            log = tmp / f"orch-{r}.log"
            logs.append(log)
            with open(log, "w") as f:
                p = subprocess.Popen(orchestrator_cmd(broker.bootstrap, defs, prefix),
                                     stdout=f, stderr=subprocess.STDOUT, env=env(), cwd=ROOT)
            time.sleep(rng.uniform(1.5, 3.0))
            p.send_signal(signal.SIGKILL)
            p.wait()
            if r in broker_kill_rounds:
                producer.close()
                broker.kill()
                broker.start()
                producer = Producer({"bootstrap.servers": broker.bootstrap})
        final = subprocess.run(orchestrator_cmd(broker.bootstrap, defs, prefix, "--until-idle"),
                               capture_output=True, text=True, env=env(), cwd=ROOT,
                               timeout=240)
        assert final.returncode == 0, final.stdout + final.stderr
    finally:
        producer.close()
        stop.set()
        for t in threads:
            t.join(30)
        for p in parts:
            p.close()
    states = read_states({"bootstrap.servers": broker.bootstrap}, SagaTopics(prefix))
    check(shop, orders, states)
    text = "\n".join(p.read_text() for p in logs) + final.stdout + final.stderr
    return {"sagas": len(orders),
            "completed": sum(s.status == "COMPLETED" for s in states.values()),
            "compensated": sum(s.status == "COMPENSATED" for s in states.values()),
            "alerts": text.count("ALERT")}


def check(shop: Shop, orders: dict[str, dict[str, Any]], states: dict[str, Any]) -> None:
    assert set(states) == set(orders), "a saga was lost or invented"
    completed = set()
    for sid, order in orders.items():
        s = states[sid]
        if order["customer"] == "poor" or order["blackhole"]:
            assert s.status == "COMPENSATED", (sid, order, s)
        else:
            assert s.status == "COMPLETED", (sid, order, s)
            completed.add(sid)
    conn = shop.connect()
    ledgers = {t: dict(conn.execute(f"SELECT key, state FROM {t}").fetchall())
               for t in ("ledger_stock", "ledger_pay", "ledger_ship")}
    for sid in orders:
        for table, step in (("ledger_stock", "reserve"), ("ledger_pay", "charge"),
                            ("ledger_ship", "ship")):
            state = ledgers[table].get(f"{sid}/{step}")
            if sid in completed:
                assert state == "done", (sid, step, state)
            else:  # nothing left applied; compensated only what had run
                assert state in (None, "failed", "compensated", "blocked"), (sid, step, state)
    (qty,) = conn.execute("SELECT qty FROM stock").fetchone()
    assert qty == STOCK - sum(orders[s]["qty"] for s in completed)
    for customer in ("alice", "bob", "poor"):
        (bal,) = conn.execute("SELECT balance FROM accounts WHERE customer = ?",
                              (customer,)).fetchone()
        spent = sum(10 * orders[s]["qty"] for s in completed
                    if orders[s]["customer"] == customer)
        assert bal == (0 if customer == "poor" else BALANCE) - spent, customer
    shipped = {r[0] for r in conn.execute("SELECT saga_id FROM shipments")}
    assert shipped == completed
    conn.close()


def test_saga_orchestrator_kill9(broker: BrokerProcess, tmp_path: Path) -> None:
    stats = crash_run(broker, tmp_path, rounds=3, per_round=12, broker_kill_rounds={1},
                      seed=51)
    print(stats)
    assert stats["completed"] > 0 and stats["compensated"] > 0
    assert stats["alerts"] > 0  # the silent shipping step, the refused compensations
    check_cli(broker, "sg51", stats)


def check_cli(broker: BrokerProcess, prefix: str, stats: dict[str, int]) -> None:
    """`tidegate sagas start|list|describe` on what the crash run left."""
    base = [sys.executable, "-m", "tidegate.cli.main", "sagas"]
    common = ["--bootstrap-server", broker.bootstrap, "--prefix", prefix]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, env=env(),
                              cwd=ROOT, timeout=60)

    r = cli("list", *common, "--status", "compensated")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert len(rows) == stats["compensated"] and {row[2] for row in rows} == {"COMPENSATED"}
    states = read_states({"bootstrap.servers": broker.bootstrap}, SagaTopics(prefix))
    refused = [sid for sid, s in states.items()
               if "charge failed: insufficient funds" in s.history]
    assert refused, "no saga was refused at the charge"
    r = cli("describe", *common, refused[0])
    assert "charge failed: insufficient funds" in r.stdout, r.stdout
    assert "reserve compensated" in r.stdout and "ship" not in r.stdout, r.stdout
    r = cli("describe", *common, "nope")
    assert r.returncode == 1 and "no saga nope" in r.stderr
    r = cli("start", *common, "order", "--id", "cli-1", "--payload", "{}")
    assert r.returncode == 0 and r.stdout.strip() == "cli-1", r.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)
@SOAK
def test_saga_orchestrator_kill9_soak(broker: BrokerProcess, tmp_path: Path) -> None:
    stats = crash_run(broker, tmp_path, rounds=25, per_round=20,
                      broker_kill_rounds={3, 11, 19}, seed=61)
    print(stats)
