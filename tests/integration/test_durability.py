"""Durability: kill -9 mid-produce, torn tails, restarts, rebuilt indexes.

Every record whose acks=all delivery report succeeded must be readable after a
kill -9 and restart, at the offset it was acknowledged with; a torn tail is cut off
and never served; the producer carries on; topics, configs and data survive restarts;
deleted index files are rebuilt.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from tests.integration.conftest import BrokerProcess


def _read_all(
    bootstrap: str, topic: str, partitions: int, timeout: float = 30
) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", "enable.auto.commit": False})
    end = {}
    for p in range(partitions):
        _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        end[p] = high
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = all(sum(1 for (pp, _o) in out if pp == p) >= end[p] for p in range(partitions))
        if done:
            break
        for m in c.consume(5000, 0.5):
            assert not m.error(), m.error()
            out[(m.partition(), m.offset())] = (m.key(), m.value())
    c.close()
    return out


def test_kill9_during_acks_all_produce_then_torn_tail(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("durable", 3, 1)])["durable"].result(30)
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    failed = 0
    lock = threading.Lock()

    def on_delivery(err: object, msg: object) -> None:
        nonlocal failed
        with lock:
            if err is None:
                acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())  # type: ignore[attr-defined]
            else:
                failed += 1

    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "enable.idempotence": False,
            "message.timeout.ms": 60000,
            "retries": 1_000_000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    stop = threading.Event()

    def pump() -> None:
        i = 0
        while not stop.is_set():
            try:
                p.produce(
                    "durable", f"value-{i}".encode() * 8, f"k{i}".encode(), on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                pass
            p.poll(0.0005 if i % 100 else 0.001)

    t = threading.Thread(target=pump)
    t.start()
    time.sleep(3)
    broker.kill()  # SIGKILL in the middle of the stream
    with lock:
        acked_at_kill = dict(acked)
    assert len(acked_at_kill) > 1000, "produce too slow to test anything"
    # A torn write: garbage half-batch at the tail of a partition's active segment.
    seg = sorted((tmp_path / "data" / "durable-0").glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x01\x00\xde\xad\xbe\xef" * 3)
    time.sleep(1)
    broker.start()
    time.sleep(3)  # the producer reconnects and continues
    stop.set()
    t.join()
    assert p.flush(60) == 0
    broker_logs = broker.logs()
    data = _read_all(broker.bootstrap, "durable", 3)
    for key, kv in acked_at_kill.items():
        assert data.get(key) == kv, f"acknowledged record at {key} lost or changed"
    for key, kv in acked.items():
        assert data.get(key) == kv, f"record acknowledged after restart at {key} missing"
    # Nothing but real records is served (the torn tail was cut off).
    for (_part, _off), (k, v) in data.items():
        assert k.startswith(b"k") and v.startswith(b"value-")
    assert len(acked) > len(acked_at_kill), "producer did not continue after restart"
    assert "Traceback" not in broker_logs
    broker.stop()


def test_restart_keeps_topics_configs_data_and_rebuilds_indexes(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics(
        [NewTopic("keep", 2, 1, config={"retention.ms": "123456789", "segment.bytes": "65536"})]
    )["keep"].result(30)
    p = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 16384}
    )
    base_ts = 1_700_000_000_000
    errors: list[object] = []
    for i in range(5000):
        p.produce(
            "keep",
            f"v{i}".encode() * 20,
            f"k{i}".encode(),
            partition=i % 2,
            timestamp=base_ts + i,
            on_delivery=lambda e, _m: errors.append(e) if e else None,
        )
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    before = _read_all(broker.bootstrap, "keep", 2)
    assert len(before) == 5000
    broker.stop()
    removed = 0
    for part in (tmp_path / "data").glob("keep-*"):
        for idx in list(part.glob("*.index")) + list(part.glob("*.timeindex")):
            idx.unlink()
            removed += 1
    assert removed >= 4, "expected several segments with indexes"
    broker.start()
    after = _read_all(broker.bootstrap, "keep", 2)
    assert after == before
    res = ConfigResource("topic", "keep")
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "123456789"
    assert configs["segment.bytes"].value == "65536"
    # Timestamp lookups use the rebuilt time index.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    found = c.offsets_for_times([TopicPartition("keep", 0, base_ts + 3000)], timeout=10)
    assert found[0].offset == 1500
    c.close()
    for part in (tmp_path / "data").glob("keep-*"):
        assert list(part.glob("*.index")), "index files were not rebuilt"
    broker.stop()
