"""Transactions with Tidegate's client: commit, abort, and offsets in a transaction.

    python examples/transactions.py [BOOTSTRAP]

Writes two transactions to ``txn-example`` (the first committed, the second aborted),
then reads the topic as a read_committed consumer of group ``txn-example-group`` and
copies what it read to ``txn-example-copy`` in a third transaction that also commits
the group's offsets (consume-transform-produce: output and offsets together, or
neither).
"""

from __future__ import annotations

import os
import sys

from tidegate.client import Admin, Consumer, NewTopic, Producer, TopicPartition


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        existing = set(admin.list_topics())
        admin.create_topics([NewTopic(t, 1) for t in ("txn-example", "txn-example-copy")
                             if t not in existing])

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-example"})
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send("txn-example", f"kept {i}".encode())
    p.commit_transaction()
    p.begin_transaction()
    p.send("txn-example", b"dropped")
    p.abort_transaction()
    print("committed 3 records, aborted 1")

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-example-group",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["txn-example"])
    seen: list[bytes] = []
    next_offsets: dict[TopicPartition, int] = {}
    for _ in range(50):
        for r in c.poll(timeout=0.2):
            seen.append(r.value or b"")
            next_offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
        if len(seen) >= 3:
            break
    print("read_committed sees:", [v.decode() for v in seen])
    p.begin_transaction()
    for v in seen:
        p.send("txn-example-copy", v.upper())
    p.send_offsets_to_transaction(next_offsets, c.group_metadata())
    p.commit_transaction()
    print("copied", len(seen), "records and committed offsets",
          {f"{tp.topic}-{tp.partition}": o for tp, o in next_offsets.items()})
    c.close()
    p.close()


if __name__ == "__main__":
    main()
