"""Several log.dirs (JBOD) on a real broker: partitions spread over both directories,
DescribeLogDirs and AlterReplicaLogDirs from kafka-python's admin (and raw requests for
the error cases), produce/consume across both, a restart finding partitions where they
are, and a directory failing with real EIO (an ext4 image on a loop device, shut down
with EXT4_IOC_SHUTDOWN) taken offline while the other keeps serving."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

from tidegate.records.builder import build_batch

STORAGE_ERROR, LOG_DIR_NOT_FOUND, UNKNOWN_TOPIC = 56, 57, 3
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def _jbod_broker(a: Path, b: Path) -> BrokerProcess:
    return BrokerProcess(a, overrides={"log.dirs": f"{a},{b}"})


def _create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _layout(broker: BrokerProcess, topic: str, *,
            written: bool | None = True) -> dict[int, str]:
    """partition -> the directory DescribeLogDirs (kafka-python's admin) puts it in."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_log_dirs()
    finally:
        admin.close()
    out: dict[int, str] = {}
    for result in described[0]["log_dirs"]:
        assert result["error_code"] == 0, result
        for t in result["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    assert written is None or (p["partition_size"] > 0) == written
                    out[p["partition_index"]] = result["log_dir"]
    return out


def _produce(broker: BrokerProcess, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    failed: list[Any] = []
    for p, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, f"{p}:{i}".encode(), partition=p,
                             on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed


def _consume(broker: BrokerProcess, topic: str, partitions: list[int],
             expect: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "jbod",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got: list[bytes] = []
    try:
        for _ in range(60):
            for m in consumer.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value() or b"")
            if len(got) >= expect:
                break
    finally:
        consumer.close()
    return got


def test_partitions_on_two_dirs_describe_move_and_restart(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker = _jbod_broker(a, b)
    broker.start()
    try:
        _create(broker, "jb", 4)
        _produce(broker, "jb", dict.fromkeys(range(4), 10))
        layout = _layout(broker, "jb")
        assert sorted(layout) == [0, 1, 2, 3]
        assert set(layout.values()) == {str(a.resolve()), str(b.resolve())}
        other = str(b.resolve()) if layout[0] == str(a.resolve()) else str(a.resolve())
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            moved = admin.alter_replica_log_dirs({("jb", 0, 1): other})
        finally:
            admin.close()
        assert [e.errno for e in moved.values()] == [0]
        assert _layout(broker, "jb")[0] == other
        assert (Path(other) / "jb-0" / "00000000000000000000.log").exists()
        rc = RawClient(broker.bootstrap)
        try:
            elsewhere = str(tmp_path / "elsewhere")
            res = rc.call(34, 2, {"dirs": [
                {"path": elsewhere, "topics": [{"name": "jb", "partitions": [1]}]},
                {"path": other, "topics": [{"name": "nope", "partitions": [0]}]}]})
        finally:
            rc.close()
        codes = {(t.topic_name, p.partition_index): p.error_code
                 for t in res.results for p in t.partitions}
        assert codes == {("jb", 1): LOG_DIR_NOT_FOUND, ("nope", 0): UNKNOWN_TOPIC}
        want = sorted(f"{p}:{i}".encode() for p in range(4) for i in range(10))
        assert sorted(_consume(broker, "jb", [0, 1, 2, 3], 40)) == want
        before = _layout(broker, "jb")
        broker.restart()
        assert _layout(broker, "jb") == before
        assert sorted(_consume(broker, "jb", [0, 1, 2, 3], 40)) == want
    finally:
        broker.stop()


@contextlib.contextmanager
def _ext4(mount_point: Path) -> Iterator[Path]:
    """A small ext4 file system on a loop device at `mount_point` (skips if this machine
    cannot mount one)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root")
    image = mount_point.with_suffix(".img")
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    mount_point.mkdir()
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    mounted = made.returncode == 0 and subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount_point)], capture_output=True
    ).returncode == 0
    if not mounted:
        pytest.skip("cannot mount an ext4 image on a loop device here")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def _shut_down(mount_point: Path) -> None:
    """Every later I/O on the file system fails with EIO, as on a dead disk."""
    fd = os.open(mount_point, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def _produce_raw(broker: BrokerProcess, topic: str, partition: int) -> int:
    rc = RawClient(broker.bootstrap)
    try:
        res = rc.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [{
            "name": topic, "partition_data": [{
                "index": partition, "records": build_batch([(1_700_000_000_000, None, b"v", ())]),
            }]}]})
    finally:
        rc.close()
    return int(res.responses[0].partition_responses[0].error_code)


def test_a_failed_dir_goes_offline_and_the_other_keeps_serving(tmp_path: Path) -> None:
    a = tmp_path / "a"
    with _ext4(tmp_path / "b") as b:
        broker = _jbod_broker(a, b)
        broker.start()
        try:
            _create(broker, "f", 2)
            layout = _layout(broker, "f", written=False)
            on_b = [p for p, d in layout.items() if d == str(b.resolve())]
            on_a = [p for p, d in layout.items() if d == str(a.resolve())]
            assert len(on_b) == 1 and len(on_a) == 1, layout
            _produce(broker, "f", {0: 10, 1: 10})
            _shut_down(b)
            assert _produce_raw(broker, "f", on_b[0]) == STORAGE_ERROR  # the EIO itself
            assert _produce_raw(broker, "f", on_b[0]) == STORAGE_ERROR  # then: offline
            assert _produce_raw(broker, "f", on_a[0]) == 0
            admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            try:
                dirs = {d["log_dir"]: d for d in admin.describe_log_dirs()[0]["log_dirs"]}
            finally:
                admin.close()
            assert dirs[str(b.resolve())]["error_code"] == STORAGE_ERROR
            assert dirs[str(a.resolve())]["error_code"] == 0
            rc = RawClient(broker.bootstrap)
            try:  # as Kafka: no leader for the offline replica, LEADER_NOT_AVAILABLE
                md = rc.call(3, 12, {"topics": [{"name": "f"}],
                                     "allow_auto_topic_creation": False})
            finally:
                rc.close()
            parts = {p.partition_index: p for p in md.topics[0].partitions}
            assert (parts[on_b[0]].leader_id, parts[on_b[0]].error_code) == (-1, 5)
            assert list(parts[on_b[0]].offline_replicas) == [1]
            assert (parts[on_a[0]].leader_id, parts[on_a[0]].error_code) == (1, 0)
            got = _consume(broker, "f", on_a, 11)
            assert len(got) == 11 and broker.proc is not None and broker.proc.poll() is None
            assert "is offline" in broker.logs()
        finally:
            broker.stop()


def test_a_move_under_idempotent_produce_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """The partition is out of service while it moves: the producer's appends meanwhile
    get KAFKA_STORAGE_ERROR and are retried; every record lands once, in order."""
    a, b = tmp_path / "a", tmp_path / "b"
    broker = _jbod_broker(a, b)
    broker.start()
    try:
        _create(broker, "mv", 1)
        total = 3000
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1,
                             "enable.idempotence": True, "retry.backoff.ms": 20})
        failed: list[Any] = []
        delivered = [0]
        pad = b"x" * 1000  # 3 MB in all: each move copies enough to take a while

        def report(err: Any, _msg: Any) -> None:
            if err:
                failed.append(err)
            else:
                delivered[0] += 1

        moved = threading.Event()  # two moves done: the second half may go

        def produce() -> None:
            for i in range(total):
                producer.produce("mv", b"%d:" % i + pad, partition=0, on_delivery=report)
                producer.poll(0)
                if i % 50 == 0:
                    time.sleep(0.01)  # spread over ~0.6 s: the moves land mid-stream
                if i == total // 2:  # however slow the machine, moves happen mid-stream
                    producer.flush(30)
                    moved.wait(60)
            producer.flush(30)

        writer = threading.Thread(target=produce)
        writer.start()
        deadline = time.monotonic() + 20
        while delivered[0] < 300 and time.monotonic() < deadline:
            time.sleep(0.005)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            moves = 0
            while writer.is_alive() and moves < 10:
                here = _layout(broker, "mv", written=None)[0]
                there = str(b.resolve()) if here == str(a.resolve()) else str(a.resolve())
                result = admin.alter_replica_log_dirs({("mv", 0, 1): there})
                assert [e.errno for e in result.values()] == [0]
                moves += 1
                if moves == 2:
                    moved.set()
        finally:
            moved.set()
            admin.close()
            writer.join(60)
        assert not failed and moves >= 2, (failed, moves)
        got = _consume(broker, "mv", [0], total)
        assert [int(v.split(b":")[0]) for v in got] == list(range(total))  # once, in order
    finally:
        broker.stop()
