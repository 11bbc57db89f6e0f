"""Check-back (client/checkback.py, RocketMQ's transactional message on KIP-939) with a
SQLite local transaction, the process SIGKILLed at many points between prepare and
commit (issue 10's acceptance).

The subprocess (`_ORDERS`, below) places orders: for each, `CheckbackProducer.run()`
sends ``order n`` as a prepared transaction and, as the local action, inserts the
order's row (with the prepared transaction's key) in one SQLite transaction, then
commits the Kafka transaction. Its resolver answers COMMIT if the key is in the
database, ABORT if not. ``KILL_AT=<point>`` makes it SIGKILL itself at that point of
order ``KILL_ORDER``:

- ``mid-send``: one record of the order sent, the transaction not prepared;
- ``before-prepare``: all records sent, `prepare_transaction()` not called;
- ``after-prepare``: prepared, the local action not started;
- ``in-local-txn``: the row inserted, SQLite's COMMIT not reached;
- ``after-local-commit``: the row committed, the Kafka commit not started;
- ``mid-kafka-commit``: the coordinator has answered the EndTxn(commit) (its markers
  are on their way), the client has not processed the answer;
- ``after-kafka-commit``: `complete_transaction()` returned, the helper's cleanup
  (the epoch bump) and the caller's bookkeeping not done;
- ``in-check``: on the restart after an ``after-local-commit`` kill, inside the
  resolver (the recovery itself dies; the next start must recover again).

Under two-phase commit the coordinator keeps an open transaction whether or not it was
prepared (KIP-939: both are Ongoing and never time out), so after the first two points
too the restart finds it and asks the resolver (no row: ABORT). After every kill the
program is started again (it resolves what was left, then places
more orders). Then the topic, read with read_committed by confluent-kafka up to the
high watermark (so a transaction left prepared fails the read), and the database hold
the same orders — every message both or neither — and the killed order is present
exactly when its local commit happened.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.conftest import ROOT, BrokerProcess
from tests.integration.test_transactions import create, read_all

_ORDERS = r"""
import os, signal, sqlite3, sys
from tidegate.client.checkback import CheckbackProducer, Resolution, key
from tidegate.client.producer.txn_manager import END_TXN

bootstrap, db_path, topic, first, count = sys.argv[1:6]
first, count = int(first), int(count)
version = int(os.environ.get("TXN_VERSION", "2"))
kill_at = os.environ.get("KILL_AT", "")
kill_order = int(os.environ.get("KILL_ORDER", "-1"))

def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)

db = sqlite3.connect(db_path, isolation_level=None)
db.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, txn TEXT UNIQUE)")

def check(prepared):
    found = db.execute("SELECT 1 FROM orders WHERE txn = ?", (key(prepared),)).fetchone()
    if kill_at == "in-check":
        die()
    verdict = Resolution.COMMIT if found else Resolution.ABORT
    print("CHECK", key(prepared), verdict.value, flush=True)
    return verdict

cp = CheckbackProducer({"bootstrap.servers": bootstrap, "transactional.id": "cb-" + topic,
                        "tidegate.transaction.version.max": version, "linger.ms": 1},
                       check, check_interval_s=0.2)
resolution = cp.start()
print("START", resolution.value if resolution else "none", flush=True)

original_complete = cp.producer.complete_transaction
def complete(prepared, commit=True, timeout_ms=None):
    original_complete(prepared, commit, timeout_ms)
    if current == kill_order and kill_at == "after-kafka-commit":
        die()
cp.producer.complete_transaction = complete

coordinators = cp.producer._async._txn.coordinators  # fault injection: EndTxn answered,
original_call = coordinators.call                    # its answer never processed
async def call(key_type, key_, api, data, **kw):
    resp = await original_call(key_type, key_, api, data, **kw)
    if api == END_TXN and current == kill_order and kill_at == "mid-kafka-commit":
        die()
    return resp
coordinators.call = call

def records(n):
    for part in range(2):  # two records per order, on different partitions
        if n == kill_order and kill_at == "mid-send" and part == 1:
            cp.producer.flush()
            die()
        yield (topic, f"order {n} part {part}", f"{n}-{part}")
    if n == kill_order and kill_at == "before-prepare":
        cp.producer.flush()
        die()

def place(prepared, n):
    if n == kill_order and kill_at == "after-prepare":
        die()
    db.execute("BEGIN")
    db.execute("INSERT INTO orders (id, txn) VALUES (?, ?)", (n, key(prepared)))
    if n == kill_order and kill_at == "in-local-txn":
        die()
    db.execute("COMMIT")
    if n == kill_order and kill_at == "after-local-commit":
        die()
    return n

for current in range(first, first + count):
    cp.run(records(current), lambda prepared, n=current: place(prepared, n))
    print("PLACED", current, flush=True)
cp.close()
"""

# point -> (is the killed order kept, what the restart's start() applies)
POINTS: dict[str, tuple[bool, str]] = {
    # not prepared, but under two-phase commit the coordinator cannot tell an open
    # transaction from a prepared one (KIP-939: both are Ongoing, neither times out):
    # the restart finds it and asks check, which finds no row
    "mid-send": (False, "abort"),
    "before-prepare": (False, "abort"),
    "after-prepare": (False, "abort"),
    "in-local-txn": (False, "abort"),  # SQLite rolls the open transaction back
    "after-local-commit": (True, "commit"),
    "after-kafka-commit": (True, "none"),
}
ORDERS_PER_RUN = 3
KILL_ORDER = 2


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("checkbackkill") / "data",
                      overrides={"transaction.two.phase.commit.enable": "true"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _run(b: BrokerProcess, db: Path, topic: str, first: int, count: int,
         kill_at: str = "", version: int = 2) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KILL_AT=kill_at, KILL_ORDER=str(KILL_ORDER),
               TXN_VERSION=str(version))
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", _ORDERS, b.bootstrap, str(db), topic,
                           str(first), str(count)],
                          capture_output=True, text=True, env=env, timeout=90)


def _start_line(proc: subprocess.CompletedProcess[str]) -> str:
    return next((ln for ln in proc.stdout.splitlines() if ln.startswith("START ")), "")


def _check_agree(b: BrokerProcess, db: Path, topic: str) -> set[int]:
    with sqlite3.connect(db) as conn:
        in_db = {int(r[0]) for r in conn.execute("SELECT id FROM orders")}
    values = read_all(b.bootstrap, topic, "read_committed")  # up to the high watermark
    in_topic = sorted(v.decode() for v in values)
    assert len(in_topic) == len(set(in_topic)), f"duplicates in {topic}: {in_topic}"
    want = sorted(f"order {n} part {k}" for n in in_db for k in range(2))
    assert in_topic == want, f"topic {in_topic} vs database {sorted(in_db)}"
    return in_db


def _killed_then_restarted(tb: BrokerProcess, tmp_path: Path, topic: str, point: str,
                           version: int) -> subprocess.CompletedProcess[str]:
    create(tb.bootstrap, topic, partitions=2)
    db = tmp_path / "orders.db"
    killed = _run(tb, db, topic, 1, ORDERS_PER_RUN, kill_at=point, version=version)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert f"PLACED {KILL_ORDER}" not in killed.stdout, killed.stdout
    assert f"PLACED {KILL_ORDER - 1}" in killed.stdout
    again = _run(tb, db, topic, ORDERS_PER_RUN + 1, ORDERS_PER_RUN, version=version)
    assert again.returncode == 0, again.stdout + again.stderr
    return again


@pytest.mark.parametrize("point", list(POINTS))
def test_killed_at_a_point_then_restarted_topic_and_db_agree(
        tb: BrokerProcess, tmp_path: Path, point: str) -> None:
    kept, applied = POINTS[point]
    again = _killed_then_restarted(tb, tmp_path, f"cbk-{point}", point, version=2)
    assert _start_line(again) == f"START {applied}", again.stdout
    orders = _check_agree(tb, tmp_path / "orders.db", f"cbk-{point}")
    want = {1, *range(ORDERS_PER_RUN + 1, 2 * ORDERS_PER_RUN + 1)} | ({2} if kept else set())
    assert orders == want


@pytest.mark.parametrize("point", ["in-local-txn", "after-local-commit"])
def test_killed_under_transaction_version_1(tb: BrokerProcess, tmp_path: Path,
                                            point: str) -> None:
    kept, applied = POINTS[point]
    again = _killed_then_restarted(tb, tmp_path, f"cbk1-{point}", point, version=1)
    assert _start_line(again) == f"START {applied}", again.stdout
    orders = _check_agree(tb, tmp_path / "orders.db", f"cbk1-{point}")
    assert (KILL_ORDER in orders) is kept and len(orders) == 1 + ORDERS_PER_RUN + kept


def test_killed_during_the_kafka_commit(tb: BrokerProcess, tmp_path: Path) -> None:
    """The coordinator took the commit, the process died before hearing it: the restart
    finds nothing left to resolve (init_transactions waits out the markers) and the
    order is in both places."""
    again = _killed_then_restarted(tb, tmp_path, "cbk-mid-commit", "mid-kafka-commit", 2)
    assert _start_line(again) == "START none", again.stdout
    orders = _check_agree(tb, tmp_path / "orders.db", "cbk-mid-commit")
    assert orders == {1, 2, *range(ORDERS_PER_RUN + 1, 2 * ORDERS_PER_RUN + 1)}


def test_recovery_itself_killed_then_recovered(tb: BrokerProcess, tmp_path: Path) -> None:
    """Killed after the local commit; the restart is killed inside the resolver; the
    third start resolves it (COMMIT) and goes on."""
    topic = "cbk-in-check"
    create(tb.bootstrap, topic, partitions=2)
    db = tmp_path / "orders.db"
    first = _run(tb, db, topic, 1, ORDERS_PER_RUN, kill_at="after-local-commit")
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = _run(tb, db, topic, 10, 1, kill_at="in-check")
    assert second.returncode == -signal.SIGKILL, second.stdout + second.stderr
    assert "START" not in second.stdout
    third = _run(tb, db, topic, 20, 2)
    assert third.returncode == 0, third.stdout + third.stderr
    assert _start_line(third) == "START commit", third.stdout
    assert _check_agree(tb, db, topic) == {1, 2, 20, 21}
