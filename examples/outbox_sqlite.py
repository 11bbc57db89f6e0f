"""Transactional outbox with SQLite: an order row and its event, committed together,
published exactly once by the relay.

    python examples/outbox_sqlite.py [BOOTSTRAP]

The application changes its own table and writes an outbox row in ONE local
transaction; it never talks to Kafka. A second order is rolled back: its outbox row
never existed, so no event is ever published for it. The relay
(`tidegate.patterns.outbox.OutboxRelay`, or ``tidegate outbox relay --db sqlite:///...``
from the shell) then publishes each committed row to ``outbox.event.<aggregatetype>``
— key ``aggregateid``, value ``payload``, headers ``id`` and ``type`` — and a
read_committed consumer sees each event once. Kill the relay at any moment and start
it again: nothing is lost or duplicated (tests/integration/test_patterns_outbox.py
does exactly that with kill -9).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
import uuid

from tidegate.client import Consumer
from tidegate.patterns.outbox import OutboxRelay, SqliteOutboxStore


def place_order(db: sqlite3.Connection, order_id: str, amount: int, *, fail: bool = False
                ) -> None:
    """The application's local transaction: the order and its outbox event together."""
    with db:  # BEGIN ... COMMIT (or ROLLBACK if the block raises)
        db.execute("INSERT INTO orders (id, amount) VALUES (?, ?)", (order_id, amount))
        db.execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
            "VALUES (?, 'order', ?, 'OrderPlaced', ?)",
            (str(uuid.uuid4()), order_id, f'{{"order": "{order_id}", "amount": {amount}}}'))
        if fail:
            raise RuntimeError("payment declined")


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else \
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    path = os.path.join(tempfile.mkdtemp(), "shop.db")
    run = uuid.uuid4().hex[:8]  # a fresh topic per run: the output is the same each time

    store = SqliteOutboxStore(path, create=True)
    store.create_schema()  # the outbox table (see `tidegate outbox schema`)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER)")

    place_order(db, "order-1", 30)
    try:
        place_order(db, "order-2", 99, fail=True)
    except RuntimeError as e:
        print(f"order-2 rolled back ({e}): no event")
    place_order(db, "order-3", 12)

    relay = OutboxRelay(store, {"bootstrap.servers": bootstrap},
                        topic=f"shop-{run}.{{aggregatetype}}")
    relay.run(until_idle=True)  # a service runs relay.run(stop_event) instead
    relay.close()
    print(f"relay published {relay.stats.published} events")

    with Consumer({"bootstrap.servers": bootstrap, "group.id": f"shop-{run}",
                   "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([f"shop-{run}.order"])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            for r in consumer.poll(500):
                headers = dict(r.headers)
                seen.append(r.key)
                print(f"event {headers['type'].decode()} key={r.key.decode()} "
                      f"value={r.value.decode()}")
    print("events:", sorted(k.decode() for k in seen))


if __name__ == "__main__":
    main()
