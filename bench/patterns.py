"""Seed 001's patterns on Tidegate: what the transactional outbox costs.

One broker (`BrokerProcess`, default settings: every acknowledged write fsynced) and,
if Debian's postgresql and psycopg are installed, one PostgreSQL server
(tests/integration/pgserver.py, fsync off: the database is not what is measured)
serve every part, in one run, in rotating order each round:

- ``txn-producer``: the baseline, Tidegate's blocking `Producer` sending `--records`
  records (`--payload` bytes, keyed by one of 100 aggregates) in transactions of
  `--batch` records: what an application that writes only to Kafka gets.
- ``outbox-sqlite`` / ``outbox-postgres``: the same records as outbox rows, written
  beforehand (not timed), then `OutboxRelay.run(until_idle=True)` publishing them in
  batches of `--batch`: each batch is a prepared transaction (KIP-939), one local
  transaction marking the rows, then the commit. Timed from the relay's first fetch
  to the table drained.

Aim (no hard gate; printed for the record): the relay within 0.5 x the plain
transactional producer, since each batch adds a prepare round trip and a database
transaction.

Then ``sagas``: `--sagas` three-step sagas (reserve, charge, ship; every step
succeeds) started at once, run by one `SagaOrchestrator` with three `SagaParticipant`s
(threads, one SQLite database, each step a local transaction and a ledger row): sagas/s
from the first start request to the last saga COMPLETED. Each saga costs at least four
orchestrator turns (transactions, batched across sagas) and three participant commits.

    .venv/bin/python bench/patterns.py [--records 20000] [--batch 500] [--rounds 3]
                                       [--sagas 500] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.conftest import BrokerProcess
from tests.integration.pgserver import PostgresServer, available

from tidegate.client import Admin, NewTopic, Producer
from tidegate.patterns.outbox import OutboxRelay, OutboxStore, SqliteOutboxStore
from tidegate.patterns.outbox.postgres import PostgresOutboxStore
from tidegate.patterns.saga import (
    ParticipantCommand,
    SagaDefinition,
    SagaOrchestrator,
    SagaParticipant,
    SagaTopics,
    Step,
    ledger_schema,
    start_saga,
)

AGGREGATES = 100
AIM = 0.5


def rows(n: int, payload: int) -> list[tuple[str, str, str, str, bytes]]:
    body = b"x" * payload
    return [(str(uuid.uuid4()), "bench", f"agg-{i % AGGREGATES}", "created", body)
            for i in range(n)]


def plain(bootstrap: str, topic: str, n: int, payload: int, batch: int) -> float:
    body = b"x" * payload
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}",
                  "linger.ms": 5})
    try:
        p.init_transactions()
        start = time.perf_counter()
        for first in range(0, n, batch):
            p.begin_transaction()
            for i in range(first, min(n, first + batch)):
                p.send(topic, body, f"agg-{i % AGGREGATES}",
                       headers=[("id", str(i)), ("type", "created")])
            p.commit_transaction()
        return n / (time.perf_counter() - start)
    finally:
        p.close()


def relay_rate(bootstrap: str, store: OutboxStore, topic: str, batch: int, n: int) -> float:
    relay = OutboxRelay(store, {"bootstrap.servers": bootstrap, "linger.ms": 5},
                        topic=topic, batch_size=batch, poll_interval_s=0.05)
    try:
        assert relay.start()
        start = time.perf_counter()
        relay.run(until_idle=True)
        elapsed = time.perf_counter() - start
    finally:
        relay.close()
    if relay.stats.published != n:
        raise SystemExit(f"relay published {relay.stats.published} of {n}")
    return n / elapsed


def outbox_sqlite(bootstrap: str, topic: str, n: int, payload: int, batch: int) -> float:
    path = os.path.join(tempfile.mkdtemp(prefix="bench-outbox-"), "app.db")
    store = SqliteOutboxStore(path, create=True)
    store.create_schema()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        conn.executemany("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                         "VALUES (?, ?, ?, ?, ?)", rows(n, payload))
    conn.close()
    return relay_rate(bootstrap, store, topic, batch, n)


def outbox_postgres(url: str) -> Callable[[str, str, int, int, int], float]:
    def run(bootstrap: str, topic: str, n: int, payload: int, batch: int) -> float:
        import psycopg
        table = f"outbox_{uuid.uuid4().hex[:8]}"
        store = PostgresOutboxStore(url, table)
        store.create_schema()
        with psycopg.connect(url) as conn, conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} (id, aggregatetype, aggregateid, type, "
                            "payload) VALUES (%s, %s, %s, %s, %s)", rows(n, payload))
        return relay_rate(bootstrap, store, topic, batch, n)
    return run


def sagas_rate(bootstrap: str, n: int, run: int) -> float:
    prefix = f"bench-sagas-{run}"
    topics = SagaTopics(prefix)
    steps = ("stock", "payments", "shipping")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(f"{prefix}.{t}", 3) for t in ("start", "replies", *steps)]
                            + [NewTopic(topics.state, 3,
                                        configs={"cleanup.policy": "compact"})])
    path = os.path.join(tempfile.mkdtemp(prefix="bench-sagas-"), "shop.db")
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE effects (saga TEXT, step TEXT)")
    for t in steps:
        db.execute(ledger_schema(f"ledger_{t}"))
    db.commit()

    def effect(conn: sqlite3.Connection, cmd: ParticipantCommand) -> None:
        conn.execute("INSERT INTO effects VALUES (?, ?)", (cmd.saga_id, cmd.step))

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, timeout=30, check_same_thread=False)

    cfg = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    parts = [SagaParticipant(f"{prefix}.{t}", cfg, connect, effect, effect,
                             ledger_table=f"ledger_{t}") for t in steps]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,), daemon=True) for p in parts]
    for t in threads:
        t.start()
    saga = SagaDefinition("order", tuple(Step(t, f"{prefix}.{t}") for t in steps))
    orch = SagaOrchestrator([saga], cfg, topics=topics)
    orch.start()
    try:
        begin = time.perf_counter()
        with Producer(cfg) as p:
            for i in range(n):
                start_saga(p, "order", f"s{i}", "{}", topics)
            p.flush()
        orch.run(until_idle=True)
        elapsed = time.perf_counter() - begin
    finally:
        orch.close()
        stop.set()
        for t in threads:
            t.join(30)
        for part in parts:
            part.close()
    if orch.stats.completed != n:
        raise SystemExit(f"{orch.stats.completed} of {n} sagas completed")
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--payload", type=int, default=200)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sagas", type=int, default=500)
    ap.add_argument("--quick", action="store_true", help="2,000 records, 100 sagas, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.sagas = 2_000, 1, 100
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print(f"{args.records} records of {args.payload} bytes, {args.batch} per transaction, "
          f"{args.rounds} rounds")
    broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="bench-patterns-")) / "data")
    broker.start()
    pg: PostgresServer | None = None
    parts: dict[str, Callable[[str, str, int, int, int], float]] = {
        "txn-producer": plain, "outbox-sqlite": outbox_sqlite}
    why = available()
    if why is None:
        pg = PostgresServer()
        pg.start()
        parts["outbox-postgres"] = outbox_postgres(pg.url)
    else:
        print(f"outbox-postgres: skipped ({why})")
    rates: dict[str, list[float]] = {name: [] for name in parts}
    saga_rates: list[float] = []
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            names = list(parts)
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    topic = f"{name}-{r}"
                    admin.create_topic(topic, 3)
                    rates[name].append(parts[name](broker.bootstrap, topic, args.records,
                                                   args.payload, args.batch))
                saga_rates.append(sagas_rate(broker.bootstrap, args.sagas, r))
    finally:
        broker.stop()
        if pg is not None:
            pg.stop()
    base = statistics.median(rates["txn-producer"])
    print(f"{'part':<18}{'records/s, median':>20}{'x txn-producer':>16}")
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"{name:<18}{med:>20,.0f}{med / base:>16.2f}")
    for name in rates:
        if name.startswith("outbox"):
            ratio = statistics.median(rates[name]) / base
            print(f"{name}: {'meets' if ratio >= AIM else 'below'} the aim "
                  f"(>= {AIM} x txn-producer)")
    print(f"sagas/s (three-step saga, {args.sagas} at once), median: "
          f"{statistics.median(saga_rates):,.1f}")


if __name__ == "__main__":
    main()
