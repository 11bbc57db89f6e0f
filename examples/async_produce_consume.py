"""Produce and consume with Tidegate's asyncio client.

    make run                                   # a broker on 127.0.0.1:9092
    .venv/bin/python examples/async_produce_consume.py [BOOTSTRAP]

The bootstrap server comes from the first argument, else the KAFKA_BOOTSTRAP_SERVERS
environment variable, else 127.0.0.1:9092. The example creates a topic of its own and
deletes it at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

from tidegate.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    RecordMetadata,
    TopicPartition,
)


def bootstrap_from_args() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def on_delivery(meta: RecordMetadata | None, error: BaseException | None) -> None:
    # Runs on the event loop when the broker has answered; keep it short.
    if error is not None:
        print(f"delivery failed: {error}")


async def main(bootstrap: str) -> None:
    topic = f"example-events-{uuid.uuid4().hex[:8]}"
    async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topic(topic, num_partitions=2)
    try:
        # A value serializer turns your objects into bytes.
        async with AsyncProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=5,
            compression_type="zstd",
            value_serializer=lambda obj: json.dumps(obj).encode(),
        ) as producer:
            # send() waits only if the buffer is full; it returns a future.
            futures = [
                await producer.send(topic, {"event": "click", "n": i}, key=f"user-{i % 4}",
                                    on_delivery=on_delivery)
                for i in range(20)
            ]
            # send_and_wait() is send() plus awaiting its future.
            meta = await producer.send_and_wait(topic, {"event": "done"}, key="user-0")
            print(f"last record: partition {meta.partition}, offset {meta.offset}")
            offsets = [(await f).offset for f in futures]
            print(f"sent {len(offsets)} more records")

        async with AsyncConsumer(bootstrap_servers=bootstrap,
                                 auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            count = 0
            async with asyncio.timeout(30):
                async for record in consumer:  # polls for you
                    event = json.loads(record.value or b"null")
                    print(f"{record.partition}:{record.offset} {record.key!r} {event}")
                    count += 1
                    if count == 21:
                        break
    finally:
        async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:
            await admin.delete_topic(topic)


if __name__ == "__main__":
    asyncio.run(main(bootstrap_from_args()))
