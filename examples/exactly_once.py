"""Exactly-once consume-transform-produce with Tidegate's client (docs/exactly-once.md).

    make run                                   # a broker on 127.0.0.1:9092
    .venv/bin/python examples/exactly_once.py [BOOTSTRAP]

Writes 1,000 orders to an input topic, then a `TransactionalProcessor` turns each into
an invoice in an output topic: every transaction holds the invoices *and* the input
offsets they came from, so a crash anywhere leaves either both or neither. Finally a
read_committed consumer checks that every order has exactly one invoice. The topics
have names of their own and are deleted at the end.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter

from tidegate.client import Admin, Consumer, ConsumerRecord, Producer, TopicPartition
from tidegate.client.eos import Output, TransactionalProcessor

N = 1000


def bootstrap_from_args() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def invoice(record: ConsumerRecord) -> list[Output]:
    """The transform: one order in, one invoice out (to the same partition number)."""
    assert record.value is not None
    return [Output(OUTPUT, b"invoice for " + record.value, key=record.key,
                   partition=record.partition)]


def main(bootstrap: str) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        for topic in (INPUT, OUTPUT):
            admin.create_topic(topic, num_partitions=3)
    try:
        with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(N):
                producer.send(INPUT, f"order {i}", key=f"customer-{i % 7}")
        run_processor(bootstrap)
        check_output(bootstrap)
    finally:
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.delete_topics([INPUT, OUTPUT])


def run_processor(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"{GROUP}-instance-0"})
    with consumer, producer:
        ends = consumer.end_offsets([TopicPartition(INPUT, p) for p in range(3)])

        def caught_up() -> bool:  # an example stops; a service would run on
            owned = consumer.assignment()
            return bool(owned) and all(consumer.position(tp) >= ends[tp] for tp in owned)

        processor = TransactionalProcessor(consumer, producer, invoice)
        processor.run([INPUT], should_stop=caught_up)
        print(f"committed {processor.committed_transactions} transactions, "
              f"aborted {processor.aborted_transactions}")
        committed = consumer.committed(list(ends))
        print("committed offsets:", {tp.partition: c.offset if c else None
                                     for tp, c in sorted(committed.items())})


def check_output(bootstrap: str) -> None:
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as reader:
        tps = [TopicPartition(OUTPUT, p) for p in range(3)]
        reader.assign(tps)
        ends = reader.end_offsets(tps)
        seen: Counter[bytes] = Counter()
        while any(reader.position(tp) < ends[tp] for tp in tps):
            seen.update(r.value for r in reader.poll(1000) if r.value is not None)
    exactly_once = len(seen) == N and set(seen.values()) == {1}
    print(f"{sum(seen.values())} invoices for {N} orders; every order exactly once: "
          f"{exactly_once}")
    if not exactly_once:
        sys.exit(1)


SUFFIX = uuid.uuid4().hex[:8]
INPUT, OUTPUT, GROUP = f"orders-{SUFFIX}", f"invoices-{SUFFIX}", f"invoicer-{SUFFIX}"

if __name__ == "__main__":
    main(bootstrap_from_args())
