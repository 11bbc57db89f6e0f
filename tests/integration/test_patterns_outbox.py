"""The transactional outbox relay (patterns/outbox) against a real broker and real
databases (SQLite, and PostgreSQL from Debian's package), killed with kill -9.

The crash test: a writer thread commits outbox rows (1-3 per local transaction, a
fifth of the transactions rolled back) while relays run as `tidegate outbox relay`
processes, two at a time (only the one holding the lock publishes), each SIGKILLed at
a random moment; the broker is killed and restarted too. Then a last relay runs until
the table is drained, and confluent-kafka reads the topic with read_committed up to
the high watermark (so a transaction left open or prepared fails the read). The
database and the topic must agree: every committed row published exactly once, no
record for a rolled-back row, every row marked published, and per aggregate the
records in the order the rows were written. `make test` runs a few kills per
database; `make soak` (TIDEGATE_SOAK=1) many more.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.integration.conftest import ROOT, BrokerProcess
from tests.integration.pgserver import PostgresServer, available
from tests.integration.test_transactions import create

from tidegate.patterns.outbox import OutboxRelay, SqliteOutboxStore
from tidegate.patterns.outbox.postgres import PostgresOutboxStore

pytestmark = pytest.mark.interop

SOAK = pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                          reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
AGGREGATES = [f"order-{i}" for i in range(6)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("outbox") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    why = available()
    if why:
        pytest.skip(why)
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- databases: a writer connection and the table --------------------------------------

class Db:
    """The application's side: one connection committing outbox rows."""

    def __init__(self, url: str, table: str) -> None:
        self.url = url
        self.table = table
        self.committed: list[str] = []
        self.rolled_back: list[str] = []
        self.next_n: Counter[str] = Counter()

    def store(self) -> Any:
        if self.url.startswith("sqlite:///"):
            return SqliteOutboxStore(self.url[len("sqlite:///"):], self.table, create=True)
        return PostgresOutboxStore(self.url, self.table)

    def connect(self) -> Any:
        if self.url.startswith("sqlite:///"):
            return sqlite3.connect(self.url[len("sqlite:///"):], timeout=30)
        import psycopg
        return psycopg.connect(self.url)

    def write(self, conn: Any, rng: random.Random) -> None:
        """One local transaction of 1-3 outbox rows, committed or rolled back."""
        mark = "?" if self.url.startswith("sqlite") else "%s"
        ids = []
        for _ in range(rng.randint(1, 3)):
            agg = rng.choice(AGGREGATES)
            self.next_n[agg] += 1
            eid = str(uuid.uuid4())
            conn.execute(f"INSERT INTO {self.table} (id, aggregatetype, aggregateid, type, "
                         f"payload) VALUES ({mark}, {mark}, {mark}, {mark}, {mark})",
                         (eid, "order", agg, "updated", f"{agg}:{self.next_n[agg]}".encode()))
            ids.append(eid)
        if rng.random() < 0.2:
            conn.rollback()
            self.rolled_back += ids
        else:
            conn.commit()
            self.committed += ids

    def unpublished(self) -> int:
        conn = self.connect()
        try:
            return int(conn.execute(f"SELECT count(*) FROM {self.table} "
                                    "WHERE relay_txn IS NULL").fetchone()[0])
        finally:
            conn.close()


class Writer(threading.Thread):
    def __init__(self, db: Db, seed: int) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = self.db.connect()
        try:
            while not self.stop.is_set():
                self.db.write(conn, self.rng)
                time.sleep(0.005)
        except BaseException as e:
            self.error = e
        finally:
            conn.close()


# -- relays as processes ---------------------------------------------------------------

def relay_cmd(bootstrap: str, db: Db, topic: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tidegate.cli.main", "outbox", "relay",
            "--bootstrap-server", bootstrap, "--db", db.url, "--table", db.table,
            "--topic", topic + ".{aggregatetype}", "--batch-size", "25",
            "--poll-interval-ms", "100", *extra]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def read_committed(bootstrap: str, topic: str, timeout: float = 60
                   ) -> list[tuple[bytes, bytes, dict[str, bytes]]]:
    """(key, value, headers) of every record read_committed sees, per partition in
    order, reading until each position reaches the high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p, 0) for p in parts]
        c.assign(tps)
        out: list[tuple[bytes, bytes, dict[str, bytes]]] = []
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, "read_committed never reached the end"
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value(), dict(msg.headers() or [])))
                continue
            marks = [c.get_watermark_offsets(tp, timeout=5, cached=False) for tp in tps]
            pos = [p.offset if p.offset >= 0 else low
                   for p, (low, _) in zip(c.position(tps), marks)]
            if all(p >= high for p, (_, high) in zip(pos, marks)):
                return out
    finally:
        c.close()


def check_agreement(db: Db, records: list[tuple[bytes, bytes, dict[str, bytes]]]) -> None:
    ids = Counter(h["id"].decode() for _, _, h in records)
    dup = [i for i, n in ids.items() if n > 1]
    assert not dup, f"{len(dup)} rows published more than once"
    assert not set(db.rolled_back) & set(ids), "a rolled-back row was published"
    missing = set(db.committed) - set(ids)
    assert not missing, f"{len(missing)} committed rows never published"
    assert set(ids) == set(db.committed)
    last: dict[bytes, int] = {}
    for key, value, headers in records:
        assert headers["type"] == b"updated"
        agg, n = value.decode().split(":")
        assert agg.encode() == key
        assert int(n) > last.get(key, 0), f"aggregate {agg}: {n} after {last[key]}"
        last[key] = int(n)
    assert db.unpublished() == 0


def crash_run(broker: BrokerProcess, db: Db, tmp: Path, *, rounds: int,
              broker_kill_rounds: set[int], seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    topic = f"ev{seed}"
    create(broker.bootstrap, f"{topic}.order")
    store = db.store()
    store.create_schema()
    store.close()
    writer = Writer(db, seed)
    writer.start()
    logs: list[Path] = []
    try:
        for r in range(rounds):
            procs = []
            for k in range(2):  # two relays at once: one publishes, one stands by
                log = tmp / f"relay-{r}-{k}.log"
                logs.append(log)
                with open(log, "w") as f:
                    procs.append(subprocess.Popen(relay_cmd(broker.bootstrap, db, topic),
                                                  stdout=f, stderr=subprocess.STDOUT,
                                                  env=env(), cwd=ROOT))
            for p in procs:
                time.sleep(rng.uniform(0.6, 1.8))
                p.send_signal(signal.SIGKILL)
                p.wait()
            if r in broker_kill_rounds:
                broker.kill()
                broker.start()
        writer.stop.set()
        writer.join(30)
        assert writer.error is None, writer.error
        final = subprocess.run(relay_cmd(broker.bootstrap, db, topic, "--until-idle"),
                               capture_output=True, text=True, env=env(), cwd=ROOT,
                               timeout=120)
        assert final.returncode == 0, final.stdout + final.stderr
    finally:
        writer.stop.set()
    check_agreement(db, read_committed(broker.bootstrap, f"{topic}.order"))
    text = "\n".join(p.read_text() for p in logs)
    return {"committed": len(db.committed), "rolled_back": len(db.rolled_back),
            "recovered": text.count("left by an earlier relay")}


def sqlite_db(tmp: Path) -> Db:
    return Db(f"sqlite:///{tmp / 'app.db'}", "outbox")


def pg_db(pg: PostgresServer, table: str) -> Db:
    return Db(pg.url, table)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_outbox_relay_kill9(broker: BrokerProcess, request: pytest.FixtureRequest,
                            tmp_path: Path, kind: str) -> None:
    db = sqlite_db(tmp_path) if kind == "sqlite" else \
        pg_db(request.getfixturevalue("pg"), "outbox_crash")
    stats = crash_run(broker, db, tmp_path, rounds=2, broker_kill_rounds={0},
                      seed=11 if kind == "sqlite" else 12)
    print(kind, stats)
    assert stats["committed"] > 100


@pytest.mark.slow
@pytest.mark.timeout(1800)
@SOAK
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_outbox_relay_kill9_soak(broker: BrokerProcess, request: pytest.FixtureRequest,
                                 tmp_path: Path, kind: str) -> None:
    db = sqlite_db(tmp_path) if kind == "sqlite" else \
        pg_db(request.getfixturevalue("pg"), "outbox_soak")
    stats = crash_run(broker, db, tmp_path, rounds=40, broker_kill_rounds={5, 17, 31},
                      seed=21 if kind == "sqlite" else 22)
    print(kind, stats)
    assert stats["recovered"] > 0, "no kill left a transaction to recover"


# -- bad input, wake-ups, the command line ----------------------------------------------

def test_too_large_row_goes_to_the_dead_letter_topic(
        broker: BrokerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("big.order", 1, 1, config={
            "max.message.bytes": "2000"})]).values():
        f.result(30)
    db = sqlite_db(tmp_path)
    store = db.store()
    store.create_schema()
    conn = db.connect()
    for i in range(30):  # all in one partition: the big row shares a batch with others
        payload = b"x" * 5000 if i == 12 else f"o:{i + 1}".encode()
        conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                     "VALUES (?, 'order', 'o', 'updated', ?)", (f"e{i}", payload))
    conn.commit()
    relay = OutboxRelay(store, {"bootstrap.servers": broker.bootstrap},
                        topic="big.{aggregatetype}", dead_letter_topic="big.dead",
                        poll_interval_s=0.1)
    with caplog.at_level("ERROR", logger="tidegate.patterns.outbox"):
        relay.run(until_idle=True)
    relay.close()
    assert (relay.stats.published, relay.stats.dead_lettered) == (29, 1)
    alerts = [r for r in caplog.records if "ALERT" in r.getMessage()]
    assert len(alerts) == 1 and "id=e12" in alerts[0].getMessage()
    records = read_committed(broker.bootstrap, "big.order")
    assert [h["id"] for _, _, h in records] == [f"e{i}".encode() for i in range(30) if i != 12]
    dead = read_committed(broker.bootstrap, "big.dead")
    assert len(dead) == 1
    key, value, headers = dead[0]
    assert (key, value) == (b"o", None)
    assert headers["id"] == b"e12" and headers["error"] == b"MESSAGE_TOO_LARGE"
    assert headers["payload.size"] == b"5000"
    assert db.unpublished() == 0


def test_postgres_notify_wakes_the_relay(broker: BrokerProcess, pg: PostgresServer) -> None:
    db = pg_db(pg, "outbox_notify")
    store = db.store()
    store.create_schema()
    create(broker.bootstrap, "wake.order", partitions=1)
    # Polling every 60 s: only the trigger's NOTIFY can bring the row out quickly.
    relay = OutboxRelay(store, {"bootstrap.servers": broker.bootstrap},
                        topic="wake.{aggregatetype}", poll_interval_s=60)
    stop = threading.Event()
    t = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while relay.producer is None:  # active: holds the lock, LISTENs
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # into its 60-s wait
        conn = db.connect()
        conn.execute("INSERT INTO outbox_notify (id, aggregatetype, aggregateid, type, "
                     "payload) VALUES ('n1', 'order', 'o', 'created', 'hello')")
        conn.commit()
        start = time.monotonic()
        while relay.stats.published < 1:
            assert time.monotonic() - start < 10, "the NOTIFY did not wake the relay"
            time.sleep(0.02)
    finally:
        stop.set()
        conn_wake = db.connect()  # wake the relay's wait so it sees `stop`
        conn_wake.execute("NOTIFY tidegate_outbox_outbox_notify")
        conn_wake.commit()
        t.join(30)
        relay.close()
    assert [v for _, v, _ in read_committed(broker.bootstrap, "wake.order")] == [b"hello"]


def test_cli_says_what_it_expects_and_creates_nothing(broker: BrokerProcess, tmp_path: Path,
                                                      pg: PostgresServer) -> None:
    base = [sys.executable, "-m", "tidegate.cli.main", "outbox"]
    sqlite3.connect(tmp_path / "empty.db").close()
    for url in (f"sqlite:///{tmp_path / 'empty.db'}", pg.url):
        r = subprocess.run([*base, "relay", "--bootstrap-server", broker.bootstrap,
                            "--db", url, "--table", "missing_outbox"], capture_output=True,
                           text=True, env=env(), cwd=ROOT, timeout=60)
        assert r.returncode == 2, r.stderr
        assert "has no table 'missing_outbox'" in r.stderr
        assert "CREATE TABLE missing_outbox" in r.stderr
    conn = sqlite3.connect(tmp_path / "empty.db")
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    # schema --apply creates it when asked; then the relay drains it
    url = f"sqlite:///{tmp_path / 'new.db'}"
    r = subprocess.run([*base, "schema", "--db", url, "--apply"], capture_output=True,
                       text=True, env=env(), cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    conn = sqlite3.connect(tmp_path / "new.db")
    conn.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                 "VALUES ('c1', 'cli', 'k', 'created', 'v')")
    conn.commit()
    r = subprocess.run([*base, "relay", "--bootstrap-server", broker.bootstrap, "--db", url,
                        "--until-idle", "--delete-published"], capture_output=True,
                       text=True, env=env(), cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "published 1, dead-lettered 0 in 1 transactions" in r.stdout
    assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (0,)
    assert [v for _, v, _ in read_committed(broker.bootstrap, "outbox.event.cli")] == [b"v"]
