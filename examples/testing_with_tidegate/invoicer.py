"""invoicer: turns orders into invoices exactly once (consume-transform-produce).

    python invoicer.py BOOTSTRAP [--crash-after N]

Each transaction holds a batch of invoices *and* the offsets of the orders they came
from, so a crash anywhere leaves both or neither. `--crash-after N` kills the process
(SIGKILL) after its N-th invoice is in the log but before the transaction commits:
what a crash test needs. The invoicer stops once it has caught up with the orders.
"""

from __future__ import annotations

import os
import signal
import sys

from confluent_kafka import Consumer, Producer


def run(bootstrap: str, *, orders: str = "orders", invoices: str = "invoices",
        group: str = "invoicer", crash_after: int | None = None) -> int:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group,
        # a restarted instance takes the crashed one's place at once (KIP-345)
        "group.instance.id": f"{group}-0",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"{group}-0"})
    producer.init_transactions()  # fences an earlier instance, aborts what it left open
    consumer.subscribe([orders])
    sent = 0
    while True:
        batch = [m for m in consumer.consume(100, timeout=0.2) if m.error() is None]
        if not batch:
            if caught_up(consumer):
                break
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(invoices, key=m.key(), value=b"invoice for " + m.value(),
                             partition=m.partition())
            sent += 1
            if sent == crash_after:
                producer.flush()  # the invoices so far are in the log, not committed
                os.kill(os.getpid(), signal.SIGKILL)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata())
        producer.commit_transaction()
    consumer.close()
    return sent


def caught_up(consumer: Consumer) -> bool:
    """Every assigned partition committed up to its end (a test's stopping rule; a
    service would run on). With read_committed the end is reached once no transaction
    is open on the partition."""
    owned = consumer.assignment()
    if not owned:
        return False
    committed = consumer.committed(owned, timeout=10)
    return all(max(tp.offset, 0) >= consumer.get_watermark_offsets(tp, timeout=10)[1]
               for tp in committed)


if __name__ == "__main__":
    crash = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--crash-after" else None
    print(run(sys.argv[1], crash_after=crash), "invoices")
