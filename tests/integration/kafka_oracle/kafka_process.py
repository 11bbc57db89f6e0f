"""One Apache Kafka 4.x KRaft broker (combined broker + controller) for differential tests.

The launcher is `bench/peer_kafka.py`'s `KafkaBroker`, shared with the benchmarks (there
Kafka is the peer beside Tidegate); `make deps-kafka` copies its jars into lib/ beside this
file (pom.xml). The oracle's differences: a 512 MB heap and a JVM that starts fast (C1
only), one partition for new and internal topics and no initial rebalance delay (the tests
compare answers, not speed), and readiness judged by the tests' own raw client (the broker
answers Metadata with itself in it). `available()` says whether the jars and a `java` are
there, so tests can skip cleanly on a machine without them.
"""

from __future__ import annotations

from pathlib import Path

from bench.peer_kafka import LIB, KafkaBroker, available, kafka_version, random_cluster_id

__all__ = ["LIB", "KafkaProcess", "available", "kafka_version", "random_cluster_id"]

JAVA_OPTS = ["-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Xshare:auto", "-Djava.awt.headless=true"]
ORACLE_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}


class KafkaProcess(KafkaBroker):
    def __init__(self, work_dir: Path, overrides: dict[str, str] | None = None) -> None:
        super().__init__(work_dir, {**ORACLE_SETTINGS, **(overrides or {})},
                         java_opts=JAVA_OPTS)

    def _serving(self) -> bool:
        from tests.integration.rawclient import RawClient

        try:
            c = RawClient(self.bootstrap, timeout=2.0)
        except OSError:
            return False
        try:
            r = c.call(3, 12, {"topics": [], "allow_auto_topic_creation": False})
            return len(r.brokers) > 0
        except (TimeoutError, OSError, AssertionError):
            return False
        finally:
            c.close()
