"""Produce records and read them back with Tidegate's blocking client.

    make run                                   # a broker on 127.0.0.1:9092
    .venv/bin/python examples/produce_consume.py [BOOTSTRAP]

The bootstrap server comes from the first argument, else the KAFKA_BOOTSTRAP_SERVERS
environment variable, else 127.0.0.1:9092. The example creates a topic of its own and
deletes it at the end.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

from tidegate.client import Admin, Consumer, ConsumerRecord, Producer, TopicPartition


def bootstrap_from_args() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def main(bootstrap: str) -> None:
    topic = f"example-orders-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(topic, num_partitions=3)
    try:
        # send() returns a concurrent.futures.Future of the record's RecordMetadata.
        with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            futures = [
                producer.send(topic, f"order {i}", key=f"customer-{i % 3}",
                              headers=[("source", b"example")])
                for i in range(9)
            ]
            producer.flush()
            for future in futures:
                meta = future.result()
                print(f"sent to partition {meta.partition} at offset {meta.offset}")

        # Consumer groups are on their way; until then, assign partitions yourself.
        with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
            partitions = consumer.partitions_for_topic(topic)
            consumer.assign([TopicPartition(topic, p) for p in partitions])
            received: list[ConsumerRecord] = []
            deadline = time.monotonic() + 30
            while len(received) < len(futures) and time.monotonic() < deadline:
                received += consumer.poll(timeout_ms=1000)
        for r in sorted(received, key=lambda r: (r.partition, r.offset)):
            key = r.key.decode() if r.key is not None else None
            value = r.value.decode() if r.value is not None else None
            print(f"received {r.partition}:{r.offset} key={key} value={value} "
                  f"headers={list(r.headers)}")
        if len(received) != len(futures):
            raise SystemExit(f"expected {len(futures)} records, got {len(received)}")
    finally:
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.delete_topic(topic)


if __name__ == "__main__":
    main(bootstrap_from_args())
