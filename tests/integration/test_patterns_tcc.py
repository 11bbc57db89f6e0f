"""TCC (patterns/tcc) against a real broker, real HTTP participants and real databases
(SQLite), the coordinator killed with kill -9.

Two participants serve `tcc_app` over HTTP in this process: a debit service (Try
freezes the amount, Confirm spends it, Cancel releases it; "poor" has no money, so its
Try is refused) and a credit service (Try books the amount as pending, Confirm
credits it, Cancel drops it; it refuses each transaction's first Cancel, so the
coordinator must retry). tests/integration/tcc_driver.py runs transfers with a
`TccCoordinator` and is SIGKILLed at random moments, the broker killed and restarted
too; each new driver first recovers what the last one left, and `tidegate tcc
recover` finishes at the end. Then every global transaction in the state topic must
be CONFIRMED or CANCELLED, every branch confirmed or cancelled to match, no branch
ever called with Confirm after a Cancel (or both), no branch touched for a transaction
the state topic does not know, and the money must add up: nothing frozen or pending,
balances moved by exactly the confirmed transfers. `make soak` kills many more times.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import ROOT, BrokerProcess, free_port

from tidegate.patterns.tcc import (
    TccParticipant,
    TryRefused,
    read_txns,
    tcc_app,
    tcc_ledger_schema,
)

pytestmark = pytest.mark.interop

SOAK = pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                          reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
START = {"alice": 10_000, "bob": 10_000, "poor": 0}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("tcc") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


class Services:
    """The debit and credit participants, their databases and a record of the calls."""

    def __init__(self, tmp: Path) -> None:
        self.debit_db, self.credit_db = tmp / "debit.db", tmp / "credit.db"
        self.calls: defaultdict[str, list[str]] = defaultdict(list)
        self.refused_cancel: defaultdict[str, int] = defaultdict(int)
        self.cancel_refusals = 1  # each transaction's first Cancel is refused
        conn = sqlite3.connect(self.debit_db)
        conn.execute("CREATE TABLE acct (name TEXT PRIMARY KEY, balance INTEGER, "
                     "frozen INTEGER)")
        conn.executemany("INSERT INTO acct VALUES (?, ?, 0)", START.items())
        conn.execute(tcc_ledger_schema())
        conn.commit()
        conn = sqlite3.connect(self.credit_db)
        conn.execute("CREATE TABLE acct (name TEXT PRIMARY KEY, balance INTEGER, "
                     "pending INTEGER)")
        conn.execute("INSERT INTO acct VALUES ('carol', 0, 0)")
        conn.execute(tcc_ledger_schema())
        conn.commit()
        self.debit = TccParticipant("debit", lambda: sqlite3.connect(self.debit_db),
                                    self.freeze, self.spend, self.release)
        self.credit = TccParticipant("credit", lambda: sqlite3.connect(self.credit_db),
                                     self.book, self.credit_it, self.drop)
        for p in (self.debit, self.credit):
            p.handle = self._recorded(p, p.handle)  # type: ignore[method-assign]
        self.port_debit, self.port_credit = free_port(), free_port()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        assert ready.wait(60)  # the participants' servers start in a thread: slow when loaded

    def _recorded(self, p: TccParticipant, handle: Any) -> Any:
        def wrapped(action: str, xid: str, payload: str) -> tuple[int, str]:
            self.calls[f"{xid}/{p.name}"].append(action)
            return handle(action, xid, payload)  # type: ignore[no-any-return]
        return wrapped

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        for p, port in ((self.debit, self.port_debit), (self.credit, self.port_credit)):
            runner = web.AppRunner(tcc_app(p))
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    @staticmethod
    def _amount(payload: str) -> tuple[str, int]:
        d = json.loads(payload)
        return str(d["from"]), int(d["amount"])

    def freeze(self, c: Any, xid: str, payload: str) -> None:
        who, amount = self._amount(payload)
        (bal,) = c.execute("SELECT balance FROM acct WHERE name = ?", (who,)).fetchone()
        if bal < amount:
            raise TryRefused("insufficient funds")
        c.execute("UPDATE acct SET balance = balance - ?, frozen = frozen + ? WHERE name = ?",
                  (amount, amount, who))

    def spend(self, c: Any, xid: str, payload: str) -> None:
        who, amount = self._amount(payload)
        c.execute("UPDATE acct SET frozen = frozen - ? WHERE name = ?", (amount, who))

    def release(self, c: Any, xid: str, payload: str) -> None:
        who, amount = self._amount(payload)
        c.execute("UPDATE acct SET balance = balance + ?, frozen = frozen - ? WHERE name = ?",
                  (amount, amount, who))

    def book(self, c: Any, xid: str, payload: str) -> None:
        c.execute("UPDATE acct SET pending = pending + ?", (self._amount(payload)[1],))

    def credit_it(self, c: Any, xid: str, payload: str) -> None:
        amount = self._amount(payload)[1]
        c.execute("UPDATE acct SET pending = pending - ?, balance = balance + ?",
                  (amount, amount))

    def drop(self, c: Any, xid: str, payload: str) -> None:
        if self.refused_cancel[xid] < self.cancel_refusals:
            self.refused_cancel[xid] += 1
            raise RuntimeError("credit service busy")
        c.execute("UPDATE acct SET pending = pending - ?", (self._amount(payload)[1],))


def create_state_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 3, 1, config={
            "cleanup.policy": "compact"})]).values():
        f.result(30)


def driver(bootstrap: str, topic: str, s: Services, n: int, seed: int) -> list[str]:
    return [sys.executable, str(ROOT / "tests" / "integration" / "tcc_driver.py"), bootstrap,
            topic, f"http://127.0.0.1:{s.port_debit}", f"http://127.0.0.1:{s.port_credit}",
            str(n), str(seed)]


def crash_run(broker: BrokerProcess, tmp: Path, *, rounds: int,
              broker_kill_rounds: set[int], seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    topic = f"tcc{seed}.state"
    create_state_topic(broker.bootstrap, topic)
    s = Services(tmp)
    logs = []
    try:
        for r in range(rounds):
            log = tmp / f"driver-{r}.log"
            logs.append(log)
            with open(log, "w") as f:
                p = subprocess.Popen(driver(broker.bootstrap, topic, s, 1000, seed * 100 + r),
                                     stdout=f, stderr=subprocess.STDOUT, env=env(), cwd=ROOT)
            time.sleep(rng.uniform(1.5, 3.0))
            p.send_signal(signal.SIGKILL)
            p.wait()
            if r in broker_kill_rounds:
                broker.kill()
                broker.start()
        final = subprocess.run([sys.executable, "-m", "tidegate.cli.main", "tcc", "recover",
                                "--bootstrap-server", broker.bootstrap, "--state-topic", topic],
                               capture_output=True, text=True, env=env(), cwd=ROOT, timeout=180)
        assert final.returncode == 0, final.stdout + final.stderr
    finally:
        s.stop()
    txns = read_txns({"bootstrap.servers": broker.bootstrap}, topic)
    check(s, txns)
    text = "\n".join(p.read_text() for p in logs)
    return {"txns": len(txns), "confirmed": sum(t.phase == "CONFIRMED" for t in txns.values()),
            "cancelled": sum(t.phase == "CANCELLED" for t in txns.values()),
            "recovered": sum(int(line.split()[-1]) for line in text.splitlines()
                             if line.startswith("recovered ")),
            "recover_cli": int(final.stdout.split()[1].rstrip(":"))}


def check(s: Services, txns: dict[str, Any]) -> None:
    ledgers = {}
    for name, db in (("debit", s.debit_db), ("credit", s.credit_db)):
        conn = sqlite3.connect(db)
        ledgers[name] = dict(conn.execute("SELECT key, state FROM tcc_ledger").fetchall())
    for key, actions in s.calls.items():
        xid = key.rsplit("/", 1)[0]
        assert xid in txns, f"branch {key} called for a transaction never recorded"
        assert not ("confirm" in actions and "cancel" in actions), (key, actions)
    confirmed_amount: defaultdict[str, int] = defaultdict(int)
    for xid, t in txns.items():
        assert t.phase in ("CONFIRMED", "CANCELLED"), (xid, t.phase, t.history)
        want = "confirmed" if t.phase == "CONFIRMED" else "cancelled"
        for branch in ("debit", "credit"):
            assert ledgers[branch].get(f"{xid}/{branch}") == want, (xid, branch, t.history)
        if t.phase == "CONFIRMED":
            d = json.loads(t.payload)
            assert d["from"] != "poor"
            confirmed_amount[d["from"]] += d["amount"]
    conn = sqlite3.connect(s.debit_db)
    for name, balance, frozen in conn.execute("SELECT name, balance, frozen FROM acct"):
        assert frozen == 0, name
        assert balance == START[name] - confirmed_amount[name], name
    conn = sqlite3.connect(s.credit_db)
    assert conn.execute("SELECT balance, pending FROM acct").fetchone() == (
        sum(confirmed_amount.values()), 0)


def test_tcc_coordinator_kill9(broker: BrokerProcess, tmp_path: Path) -> None:
    stats = crash_run(broker, tmp_path, rounds=3, broker_kill_rounds={1}, seed=71)
    print(stats)
    assert stats["confirmed"] > 0 and stats["cancelled"] > 0


@pytest.mark.slow
@pytest.mark.timeout(1800)
@SOAK
def test_tcc_coordinator_kill9_soak(broker: BrokerProcess, tmp_path: Path) -> None:
    stats = crash_run(broker, tmp_path, rounds=30, broker_kill_rounds={4, 13, 22}, seed=81)
    print(stats)
    assert stats["recovered"] + stats["recover_cli"] > 0, "no kill left anything to recover"


def test_refused_cancel_alerts_until_accepted_and_hanging_try(
        broker: BrokerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tidegate.patterns.tcc import Branch, TccCoordinator
    topic = "tccbad.state"
    create_state_topic(broker.bootstrap, topic)
    s = Services(tmp_path)
    s.cancel_refusals = 5
    debit = Branch("debit", f"http://127.0.0.1:{s.port_debit}")
    credit = Branch("credit", f"http://127.0.0.1:{s.port_credit}")
    coord = TccCoordinator({"bootstrap.servers": broker.bootstrap}, state_topic=topic,
                           backoff_s=(0.05,), alert_every=2)
    try:
        coord.start()
        with caplog.at_level("ERROR", logger="tidegate.patterns.tcc"):
            # poor's Try is refused: Cancel everywhere; credit refuses it 5 times
            phase = coord.execute("bad-1", [debit, credit],
                                  json.dumps({"from": "poor", "amount": 5}))
        assert phase == "CANCELLED"
        alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
        assert len(alerts) == 2 and "cancel of branch credit refused" in alerts[0]
        assert s.calls["bad-1/credit"] == ["try"] + ["cancel"] * 6
        # refused forever: the transaction stays CANCELLING (until a recovery finishes it)
        s.cancel_refusals = 10**9
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        assert coord.execute("bad-2", [debit, credit], json.dumps(
            {"from": "poor", "amount": 5}), stop=stop) == "CANCELLING"
        assert read_txns({"bootstrap.servers": broker.bootstrap}, topic)["bad-2"].phase \
            == "CANCELLING"
        s.cancel_refusals = 0
        assert coord.recover() == {"bad-2": "CANCELLED"}
    finally:
        coord.close()
        s.stop()
    # the hanging case over HTTP: a Cancel before its Try, then the Try is refused
    status, _ = s.debit.handle("cancel", "late-1", json.dumps({"from": "alice", "amount": 1}))
    assert status == 200
    status, text = s.debit.handle("try", "late-1", json.dumps({"from": "alice", "amount": 1}))
    assert status == 409 and "hanging" in text
    base = [sys.executable, "-m", "tidegate.cli.main", "tcc"]
    common = ["--bootstrap-server", broker.bootstrap, "--state-topic", topic]
    r = subprocess.run([*base, "list", *common], capture_output=True, text=True, env=env(),
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()[1:]}
    assert rows == {"bad-1": "CANCELLED", "bad-2": "CANCELLED"}
    assert "tidegate-tcc-tccbad.state" in r.stdout  # the owner
    r = subprocess.run([*base, "describe", *common, "bad-1"], capture_output=True, text=True,
                       env=env(), cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "try refused (debit: HTTP 409: insufficient funds)" in r.stdout
    assert "every branch cancelled" in r.stdout
