"""Manage topics, configs and offsets with Tidegate's admin client.

    make run                                   # a broker on 127.0.0.1:9092
    .venv/bin/python examples/admin.py [BOOTSTRAP]

The bootstrap server comes from the first argument, else the KAFKA_BOOTSTRAP_SERVERS
environment variable, else 127.0.0.1:9092. The example creates a topic of its own and
deletes it at the end.
"""

from __future__ import annotations

import os
import sys
import uuid

from tidegate.client import (
    Admin,
    ConfigResource,
    NewTopic,
    Producer,
    TopicPartition,
)
from tidegate.common.errors import KafkaError

EARLIEST, LATEST = -2, -1  # ListOffsets "timestamps" for the log start and end


def bootstrap_from_args() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def main(bootstrap: str) -> None:
    topic = f"example-admin-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        cluster = admin.describe_cluster()
        print(f"cluster {cluster.cluster_id}: brokers "
              f"{[f'{b.node_id}@{b.host}:{b.port}' for b in cluster.brokers]}")

        # create_topics reports an error per topic instead of raising.
        result = admin.create_topics([NewTopic(topic, 2, configs={"retention.ms": "3600000"})])
        print(f"create {topic}: {result[topic] or 'ok'}")
        again = admin.create_topics([NewTopic(topic, 2)])[topic]
        print(f"create it again: {again.name if again else 'ok'}")
        try:
            print(f"topics: {[t for t in admin.list_topics() if t.startswith('example-')]}")

            (desc,) = admin.describe_topics([topic])
            print(f"{desc.name} ({desc.topic_id}): {len(desc.partitions)} partitions, "
                  f"leaders {[p.leader for p in desc.partitions]}")
            overrides = {k: e.value for k, e in desc.configs.items() if not e.is_default}
            print(f"overridden configs: {overrides}")

            resource = ConfigResource.topic(topic)
            admin.incremental_alter_configs(resource, set={"cleanup.policy": "compact,delete"},
                                            delete=["retention.ms"])
            configs = admin.describe_configs([resource])[resource]
            print(f"after alter: cleanup.policy={configs['cleanup.policy'].value}, "
                  f"retention.ms={configs['retention.ms'].value} "
                  f"(default: {configs['retention.ms'].is_default})")

            print(f"add partitions: {admin.create_partitions({topic: 4})[topic] or 'ok'}")

            with Producer(bootstrap_servers=bootstrap) as producer:
                for i in range(10):
                    producer.send(topic, b"record %d" % i, key=b"k%d" % i, partition=0,
                                  timestamp_ms=1_700_000_000_000 + i * 1000)
            tp = TopicPartition(topic, 0)
            earliest = admin.list_offsets({tp: EARLIEST})[tp]
            latest = admin.list_offsets({tp: LATEST})[tp]
            by_time = admin.list_offsets({tp: 1_700_000_004_500})[tp]
            print(f"partition 0: earliest {earliest and earliest.offset}, latest "
                  f"{latest and latest.offset}, first at/after t+4.5s "
                  f"{by_time and by_time.offset}")
            # (a compact-only topic refuses DeleteRecords with POLICY_VIOLATION, as on Kafka)
            print(f"delete records before offset 3: new start "
                  f"{admin.delete_records({tp: 3})[tp]}")
        finally:
            admin.delete_topic(topic)
            print(f"deleted {topic}")
        try:
            admin.delete_topic(topic)
        except KafkaError as e:
            print(f"delete it again: {e.name}")


if __name__ == "__main__":
    main(bootstrap_from_args())
