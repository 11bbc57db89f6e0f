"""log.max.open.files: a broker holding far fewer segment files open than it has, through
produce, kill -9, recovery and consume, loses nothing acknowledged.

Light: one broker process, one kill, no timing assertions.
"""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from tests.integration.conftest import BrokerProcess

PARTITIONS = 100  # x 3 files each (+ the internal topics'), against a bound of 64
BOUND = 64


def open_files(b: BrokerProcess) -> int:
    assert b.proc is not None
    return len(os.listdir(f"/proc/{b.proc.pid}/fd"))


def test_bounded_open_files_survive_kill_and_recovery(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={"log.max.open.files": str(BOUND)})
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("many", PARTITIONS, 1)])["many"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
        acked: list[tuple[int, int]] = []

        def cb(err: object, msg: object) -> None:
            assert err is None, err
            acked.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

        for i in range(5 * PARTITIONS):
            p.produce("many", b"v%d" % i, partition=i % PARTITIONS, on_delivery=cb)
        assert p.flush(60) == 0
        # 300+ segment files, at most BOUND open (plus sockets, the lock, stdio...)
        assert open_files(b) < BOUND + 40, open_files(b)
        b.kill()  # every partition's tail is now past its checkpointed recovery point
        b.start()
        assert open_files(b) < BOUND + 40, open_files(b)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("many", part, 0) for part in range(PARTITIONS)])
        seen: set[tuple[int, int]] = set()
        for _ in range(200):
            for m in c.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                seen.add((m.partition(), m.offset()))
            if len(seen) >= len(acked):
                break
        c.close()
        assert seen == set(acked)
    finally:
        b.kill()
